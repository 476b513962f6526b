package conntag

import (
	"context"
	"database/sql/driver"
)

//go:generate go run gen_wrap.go

// The optional interfaces of a driver connection that conntag's connection
// has exactly when the driver's has them, one bit each. wrapConn
// (wrap_gen.go, made by gen_wrap.go) has one combination per set of bits.
const (
	capPrepareContext = 1 << iota
	capBeginTx
	capExecerContext
	capQueryerContext
	capExecer
	capQueryer
	capPinger
	capNamedValueChecker
	numCaps = iota
)

// capsOf returns the optional interfaces ci implements.
func capsOf(ci driver.Conn) uint8 {
	var caps uint8
	if _, ok := ci.(driver.ConnPrepareContext); ok {
		caps |= capPrepareContext
	}
	if _, ok := ci.(driver.ConnBeginTx); ok {
		caps |= capBeginTx
	}
	if _, ok := ci.(driver.ExecerContext); ok {
		caps |= capExecerContext
	}
	if _, ok := ci.(driver.QueryerContext); ok {
		caps |= capQueryerContext
	}
	if _, ok := ci.(driver.Execer); ok { //nolint:staticcheck // the legacy interface is part of the set
		caps |= capExecer
	}
	if _, ok := ci.(driver.Queryer); ok { //nolint:staticcheck // the legacy interface is part of the set
		caps |= capQueryer
	}
	if _, ok := ci.(driver.Pinger); ok {
		caps |= capPinger
	}
	if _, ok := ci.(driver.NamedValueChecker); ok {
		caps |= capNamedValueChecker
	}
	return caps
}

// newConn wraps the driver's connection ci: the *conn that keeps conntag's
// state, and the driver.Conn handed to database/sql.
func (in *instr) newConn(ci driver.Conn) (*conn, driver.Conn) {
	c := &conn{inner: ci, in: in}
	return c, wrapConn(c, capsOf(ci))
}

// The method carriers: each adds one interface to a combination, calling
// the *conn it holds.

type prepareContextM struct{ c *conn }

func (m prepareContextM) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return m.c.prepare(ctx, m.c.in.stateFor(ctx), query)
}

type beginTxM struct{ c *conn }

func (m beginTxM) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return m.c.beginTx(ctx, m.c.in.stateFor(ctx), opts)
}

type execerContextM struct{ c *conn }

func (m execerContextM) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return m.c.execContext(ctx, query, args)
}

type queryerContextM struct{ c *conn }

func (m queryerContextM) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return m.c.queryContext(ctx, query, args)
}

type execerM struct{ c *conn }

func (m execerM) Exec(query string, args []driver.Value) (driver.Result, error) {
	return m.c.exec(query, args)
}

type queryerM struct{ c *conn }

func (m queryerM) Query(query string, args []driver.Value) (driver.Rows, error) {
	return m.c.query(query, args)
}

type pingerM struct{ c *conn }

func (m pingerM) Ping(ctx context.Context) error { return m.c.ping(ctx) }

type namedValueCheckerM struct{ c *conn }

func (m namedValueCheckerM) CheckNamedValue(nv *driver.NamedValue) error {
	return m.c.inner.(driver.NamedValueChecker).CheckNamedValue(nv)
}
