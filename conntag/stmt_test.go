package conntag

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"
)

// checkerConn has a NamedValueChecker on the connection only, as pgx's
// stdlib driver does: its statements rely on it for argument types the
// default converter rejects.
type checkerConnector struct{}

func (checkerConnector) Connect(context.Context) (driver.Conn, error) { return checkerConn{}, nil }
func (checkerConnector) Driver() driver.Driver                        { return nil }

type checkerConn struct{}

func (checkerConn) Prepare(string) (driver.Stmt, error) { return plainStmt{}, nil }
func (checkerConn) Close() error                        { return nil }
func (checkerConn) Begin() (driver.Tx, error)           { return nil, driver.ErrSkip }
func (checkerConn) CheckNamedValue(*driver.NamedValue) error {
	return nil // accepts any Go value, []string included
}

type plainStmt struct{}

func (plainStmt) Close() error                               { return nil }
func (plainStmt) NumInput() int                              { return 1 }
func (plainStmt) Exec([]driver.Value) (driver.Result, error) { return driver.RowsAffected(1), nil }
func (plainStmt) Query([]driver.Value) (driver.Rows, error)  { return nil, driver.ErrSkip }

func TestStatementKeepsConnectionChecker(t *testing.T) {
	for name, db := range map[string]*sql.DB{
		"raw":     sql.OpenDB(checkerConnector{}),
		"conntag": OpenDB(checkerConnector{}, WithoutMetrics()),
	} {
		st, err := db.Prepare("UPDATE t SET tags = ?")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Exec([]string{"a", "b"}); err != nil {
			t.Errorf("%s: a []string argument the connection's checker accepts was refused: %v", name, err)
		}
		st.Close()
		db.Close()
	}
}
