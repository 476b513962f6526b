package conntag

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"io"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// stubConnector is an in-process driver that does nothing, so a benchmark
// through it measures database/sql plus the wrapper and nothing else.
type stubConnector struct{}

func (stubConnector) Connect(context.Context) (driver.Conn, error) { return stubConn{}, nil }
func (stubConnector) Driver() driver.Driver                        { return stubDriver{} }

type stubDriver struct{}

func (stubDriver) Open(string) (driver.Conn, error) { return stubConn{}, nil }

type stubConn struct{}

func (stubConn) Prepare(string) (driver.Stmt, error)      { return nil, driver.ErrSkip }
func (stubConn) Close() error                             { return nil }
func (stubConn) Begin() (driver.Tx, error)                { return stubTx{}, nil }
func (stubConn) ResetSession(context.Context) error       { return nil }
func (stubConn) IsValid() bool                            { return true }
func (stubConn) CheckNamedValue(*driver.NamedValue) error { return nil }
func (stubConn) ExecContext(context.Context, string, []driver.NamedValue) (driver.Result, error) {
	return driver.RowsAffected(1), nil
}
func (stubConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return &stubRows{n: 1}, nil
}

type stubTx struct{}

func (stubTx) Commit() error   { return nil }
func (stubTx) Rollback() error { return nil }

type stubRows struct{ n int }

func (*stubRows) Columns() []string { return []string{"a"} }
func (*stubRows) Close() error      { return nil }
func (r *stubRows) Next(dest []driver.Value) error {
	if r.n == 0 {
		return io.EOF
	}
	r.n--
	dest[0] = int64(1)
	return nil
}

// BenchmarkStatement measures what the wrapper adds to one statement
// through database/sql, against the unwrapped stub driver in the same run:
// read the ns/op and allocs/op of each case minus "raw".
func BenchmarkStatement(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	cases := []struct {
		name string
		db   func() *sql.DB
	}{
		{"raw", func() *sql.DB { return sql.OpenDB(stubConnector{}) }},
		{"all_off", func() *sql.DB {
			return OpenDB(stubConnector{}, WithoutMetrics(), WithFormat(FormatNone), WithMeterProvider(noop.NewMeterProvider()))
		}},
		{"tag_only", func() *sql.DB { return OpenDB(stubConnector{}, WithoutMetrics()) }},
		{"tag_noop_meter", func() *sql.DB { return OpenDB(stubConnector{}, WithMeterProvider(noop.NewMeterProvider())) }},
		{"tag_metrics", func() *sql.DB { return OpenDB(stubConnector{}, WithMeterProvider(mp)) }},
		{"tag_metrics_histograms", func() *sql.DB { return OpenDB(stubConnector{}, WithMeterProvider(mp), WithHistograms()) }},
	}
	ctx := WithTag(context.Background(), "checkout_completion")
	for _, c := range cases {
		db := c.db()
		db.SetMaxIdleConns(4)
		b.Run("exec/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := db.ExecContext(ctx, "UPDATE t SET a = 1 WHERE id = 7"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("query/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			var v int64
			for b.Loop() {
				rows, err := db.QueryContext(ctx, "SELECT a FROM t WHERE id = 7")
				if err != nil {
					b.Fatal(err)
				}
				for rows.Next() {
					if err := rows.Scan(&v); err != nil {
						b.Fatal(err)
					}
				}
				rows.Close()
			}
		})
		db.Close()
	}
}
