// Package stubdriver is an in-process database/sql driver that does no I/O
// and answers every statement at once, so that a benchmark through it
// measures database/sql plus whatever wraps the driver, and nothing else.
package stubdriver

import (
	"context"
	"database/sql/driver"
	"io"
)

// Connector opens stub connections. It implements every interface a real
// driver such as go-sql-driver/mysql does on the statement path.
type Connector struct {
	// OnStatement, when set, sees the text of every Exec and Query, so a
	// test can check what a wrapper sends.
	OnStatement func(query string)
}

func (c Connector) Connect(context.Context) (driver.Conn, error) { return conn{c.OnStatement}, nil }
func (Connector) Driver() driver.Driver                          { return Driver{} }

// Driver is the stub's driver.Driver.
type Driver struct{}

func (Driver) Open(string) (driver.Conn, error) { return conn{}, nil }

type conn struct{ onStatement func(string) }

func (conn) Prepare(string) (driver.Stmt, error)                          { return nil, driver.ErrSkip }
func (conn) Close() error                                                 { return nil }
func (conn) Begin() (driver.Tx, error)                                    { return tx{}, nil }
func (conn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) { return tx{}, nil }
func (conn) PrepareContext(context.Context, string) (driver.Stmt, error)  { return nil, driver.ErrSkip }
func (conn) ResetSession(context.Context) error                           { return nil }
func (conn) IsValid() bool                                                { return true }
func (conn) CheckNamedValue(*driver.NamedValue) error                     { return nil }
func (conn) Ping(context.Context) error                                   { return nil }

func (c conn) ExecContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Result, error) {
	if c.onStatement != nil {
		c.onStatement(q)
	}
	return driver.RowsAffected(1), nil
}

func (c conn) QueryContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
	if c.onStatement != nil {
		c.onStatement(q)
	}
	return &rows{n: 1}, nil
}

type tx struct{}

func (tx) Commit() error   { return nil }
func (tx) Rollback() error { return nil }

// rows returns one row with one int64 column.
type rows struct{ n int }

func (*rows) Columns() []string { return []string{"a"} }
func (*rows) Close() error      { return nil }

func (r *rows) Next(dest []driver.Value) error {
	if r.n == 0 {
		return io.EOF
	}
	r.n--
	dest[0] = int64(1)
	return nil
}
