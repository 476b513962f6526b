package conntag

import (
	"database/sql/driver"
	"io"
	"reflect"
)

// rows wraps a result set: the statement stays active, for its tag and the
// connection's hold, until the rows are closed (reading rows is part of a
// statement's time).
type rows struct {
	inner driver.Rows
	conn  *conn
	start stmtStart
	err   error // first error from Next other than io.EOF
	done  bool
	own   bool // the connection's reused wrapper (conn.rowsBuf)
}

var (
	_ driver.Rows                           = (*rows)(nil)
	_ driver.RowsNextResultSet              = (*rows)(nil)
	_ driver.RowsColumnTypeScanType         = (*rows)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*rows)(nil)
	_ driver.RowsColumnTypeLength           = (*rows)(nil)
	_ driver.RowsColumnTypeNullable         = (*rows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*rows)(nil)
)

// newRows wraps inner. The connection's own wrapper is reused when free: a
// connection reads one result set at a time, and database/sql calls nothing
// on a driver's rows after closing them.
func newRows(inner driver.Rows, c *conn, s stmtStart) *rows {
	if c.rowsBusy {
		return &rows{inner: inner, conn: c, start: s}
	}
	c.rowsBusy = true
	r := &c.rowsBuf
	*r = rows{inner: inner, conn: c, start: s, own: true}
	return r
}

func (r *rows) Columns() []string { return r.inner.Columns() }

func (r *rows) Close() error {
	err := r.inner.Close()
	if !r.done {
		r.done = true
		r.conn.in.endStmt(r.conn, r.start, firstErr(r.err, err))
		if r.own {
			r.conn.rowsBusy = false
		}
	}
	return err
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (r *rows) Next(dest []driver.Value) error {
	err := r.inner.Next(dest)
	if err != nil && err != io.EOF && r.err == nil { //nolint:errorlint // io.EOF is returned as is by contract
		r.err = err
	}
	return err
}

func (r *rows) HasNextResultSet() bool {
	if n, ok := r.inner.(driver.RowsNextResultSet); ok {
		return n.HasNextResultSet()
	}
	return false
}

func (r *rows) NextResultSet() error {
	if n, ok := r.inner.(driver.RowsNextResultSet); ok {
		return n.NextResultSet()
	}
	return io.EOF
}

// The column type methods answer what database/sql assumes for a driver
// without them.

func (r *rows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.inner.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *rows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.inner.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *rows) ColumnTypeLength(i int) (int64, bool) {
	if t, ok := r.inner.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *rows) ColumnTypeNullable(i int) (bool, bool) {
	if t, ok := r.inner.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *rows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if t, ok := r.inner.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}
