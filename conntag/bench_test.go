package conntag

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/holdtime/holdtime/internal/stubdriver"
	"github.com/holdtime/holdtime/testenv"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

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
		{"raw", func() *sql.DB { return sql.OpenDB(stubdriver.Connector{}) }},
		{"all_off", func() *sql.DB {
			return OpenDB(stubdriver.Connector{}, WithoutMetrics(), WithFormat(FormatNone), WithMeterProvider(noop.NewMeterProvider()))
		}},
		{"tag_only", func() *sql.DB { return OpenDB(stubdriver.Connector{}, WithoutMetrics()) }},
		{"tag_noop_meter", func() *sql.DB { return OpenDB(stubdriver.Connector{}, WithMeterProvider(noop.NewMeterProvider())) }},
		{"tag_metrics", func() *sql.DB { return OpenDB(stubdriver.Connector{}, WithMeterProvider(mp)) }},
		{"tag_metrics_histograms", func() *sql.DB { return OpenDB(stubdriver.Connector{}, WithMeterProvider(mp), WithHistograms()) }},
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
		if c.name == "tag_metrics" {
			// A fresh WithTag per statement, as per request in a server: the
			// context's cached tag state misses every time.
			b.Run("exec/"+c.name+"_fresh_ctx", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := db.ExecContext(WithTag(context.Background(), "checkout_completion"), "UPDATE t SET a = 1 WHERE id = 7"); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
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

// BenchmarkLoopback compares statements on two pools against the real test
// server over loopback: "control" runs raw against raw (the noise floor of
// the method on this machine), "conntag" raw against wrapped with metrics
// on. Each iteration runs one statement on each pool, alternating which goes
// first, and every 200 iterations both pools reconnect, so neither keeps a
// lucky or unlucky server thread. It reports each side's median latency and
// the ratio b/a.
func BenchmarkLoopback(b *testing.B) {
	d := testenv.NewDatabase(b)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ctx := WithTag(context.Background(), "checkout_completion")
	wrappedPool := func() *sql.DB {
		connector, err := mysql.NewConnector(d.Config())
		if err != nil {
			b.Fatal(err)
		}
		db := OpenDB(connector, WithMeterProvider(mp))
		b.Cleanup(func() { db.Close() })
		return db
	}
	for _, c := range []struct {
		name string
		a, b func() *sql.DB
	}{
		{"control", func() *sql.DB { return d.Open(b) }, func() *sql.DB { return d.Open(b) }},
		{"conntag", func() *sql.DB { return d.Open(b) }, wrappedPool},
	} {
		b.Run(c.name, func(b *testing.B) {
			pa, pb := c.a(), c.b()
			run := func(db *sql.DB) time.Duration {
				start := time.Now()
				var v int
				if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			reconnect := func() {
				for _, db := range []*sql.DB{pa, pb} {
					db.SetMaxIdleConns(0) // closes the idle connection
					db.SetMaxIdleConns(2)
					run(db) // connect outside the measurement
				}
			}
			var la, lb []time.Duration
			i := 0
			for b.Loop() {
				if i%200 == 0 {
					reconnect()
				}
				if i%2 == 0 {
					la = append(la, run(pa))
					lb = append(lb, run(pb))
				} else {
					lb = append(lb, run(pb))
					la = append(la, run(pa))
				}
				i++
			}
			ma, mb := median(la), median(lb)
			b.ReportMetric(float64(ma.Nanoseconds()), "a-median-ns")
			b.ReportMetric(float64(mb.Nanoseconds()), "b-median-ns")
			b.ReportMetric(float64(mb)/float64(ma), "b/a")
		})
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
