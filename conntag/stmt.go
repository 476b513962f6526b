package conntag

import (
	"context"
	"database/sql/driver"
)

// stmt wraps a prepared statement. Its text carries the preparer's tag;
// each execution is measured for the tag of its own context.
type stmt struct {
	inner driver.Stmt
	conn  *conn
	op    op     // the statement's operation, found once at prepare
	sent  string // with the tag comment
}

var (
	_ driver.Stmt              = (*stmt)(nil)
	_ driver.StmtExecContext   = (*stmt)(nil)
	_ driver.StmtQueryContext  = (*stmt)(nil)
	_ driver.NamedValueChecker = (*stmt)(nil)
	_ driver.ColumnConverter   = (*stmt)(nil)
)

func (s *stmt) Close() error  { return s.inner.Close() }
func (s *stmt) NumInput() int { return s.inner.NumInput() }

//nolint:staticcheck // required by driver.Stmt
func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), namedValues(args))
}

//nolint:staticcheck // required by driver.Stmt
func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), namedValues(args))
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	in := s.conn.in
	if !in.measure {
		return s.execInner(ctx, args)
	}
	st, sctx := in.startOp(ctx, s.conn, in.stateFor(ctx), s.op, s.sent)
	res, err := s.execInner(sctx, args)
	in.endStmt(s.conn, st, err)
	return res, err
}

func (s *stmt) execInner(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if ec, ok := s.inner.(driver.StmtExecContext); ok {
		return ec.ExecContext(ctx, args)
	}
	vals, err := values(args)
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	default:
	}
	return s.inner.Exec(vals) //nolint:staticcheck // fallback as database/sql does
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	in := s.conn.in
	if !in.measure {
		return s.queryInner(ctx, args)
	}
	st, sctx := in.startOp(ctx, s.conn, in.stateFor(ctx), s.op, s.sent)
	rows, err := s.queryInner(sctx, args)
	if err != nil {
		in.endStmt(s.conn, st, err)
		return nil, err
	}
	return newRows(rows, s.conn, st), nil
}

func (s *stmt) queryInner(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if qc, ok := s.inner.(driver.StmtQueryContext); ok {
		return qc.QueryContext(ctx, args)
	}
	vals, err := values(args)
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	default:
	}
	return s.inner.Query(vals) //nolint:staticcheck // fallback as database/sql does
}

// CheckNamedValue asks the statement's checker, or else the connection's,
// as database/sql does when a statement has none: claiming the interface
// here must not hide a connection's checker.
func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.inner.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	if c, ok := s.conn.inner.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// ColumnConverter keeps the inner statement's converter; without one,
// database/sql's default is what it would have used.
func (s *stmt) ColumnConverter(idx int) driver.ValueConverter {
	if cc, ok := s.inner.(driver.ColumnConverter); ok { //nolint:staticcheck // preserved for drivers that have it
		return cc.ColumnConverter(idx)
	}
	return driver.DefaultParameterConverter
}

func namedValues(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, v := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}

func values(args []driver.NamedValue) ([]driver.Value, error) {
	v := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errNamedArgs
		}
		v[i] = a.Value
	}
	return v, nil
}
