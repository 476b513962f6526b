package conntag

import (
	"context"
	"database/sql/driver"
	"errors"
)

var errNamedArgs = errors.New("sql: driver does not support the use of Named Parameters")

// txn wraps a transaction: Commit and Rollback are driver calls of the hold,
// counted for the tag the transaction began with.
type txn struct {
	inner driver.Tx
	conn  *conn
	ts    *tagState
}

func (t *txn) Commit() error {
	s, _ := t.conn.in.startOp(context.Background(), t.conn, t.ts, opCommit, "COMMIT")
	err := t.inner.Commit()
	t.conn.in.endStmt(t.conn, s, err)
	return err
}

func (t *txn) Rollback() error {
	s, _ := t.conn.in.startOp(context.Background(), t.conn, t.ts, opRollback, "ROLLBACK")
	err := t.inner.Rollback()
	t.conn.in.endStmt(t.conn, s, err)
	return err
}
