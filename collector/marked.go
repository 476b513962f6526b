package collector

import (
	"context"
	"database/sql/driver"
)

// markedConnector starts every statement of its connections with
// CollectorMarker: the lock reader's statements (package locks knows
// nothing of the marker) are then never credited, by this collector's
// MySQL source or any other's.
type markedConnector struct{ driver.Connector }

func (c markedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &markedConn{conn}, nil
}

// markedConn needs the inner connection (go-sql-driver/mysql's) to
// implement the context interfaces it forwards; where it does not, the
// call falls back to driver.ErrSkip or the plain interface.
type markedConn struct{ driver.Conn }

var (
	_ driver.QueryerContext     = (*markedConn)(nil)
	_ driver.ExecerContext      = (*markedConn)(nil)
	_ driver.ConnPrepareContext = (*markedConn)(nil)
	_ driver.ConnBeginTx        = (*markedConn)(nil)
	_ driver.Pinger             = (*markedConn)(nil)
	_ driver.SessionResetter    = (*markedConn)(nil)
	_ driver.Validator          = (*markedConn)(nil)
)

func mark(q string) string {
	if isCollectorStatement(q) {
		return q
	}
	return CollectorMarker + q
}

func (c *markedConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if qc, ok := c.Conn.(driver.QueryerContext); ok {
		return qc.QueryContext(ctx, mark(q), args)
	}
	return nil, driver.ErrSkip
}

func (c *markedConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if ec, ok := c.Conn.(driver.ExecerContext); ok {
		return ec.ExecContext(ctx, mark(q), args)
	}
	return nil, driver.ErrSkip
}

func (c *markedConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	if pc, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return pc.PrepareContext(ctx, mark(q))
	}
	return c.Conn.Prepare(mark(q))
}

func (c *markedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if bc, ok := c.Conn.(driver.ConnBeginTx); ok {
		return bc.BeginTx(ctx, opts)
	}
	return c.Conn.Begin() //nolint:staticcheck // the fallback database/sql uses too
}

func (c *markedConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *markedConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *markedConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}
