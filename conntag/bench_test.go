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
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
		// Every statement on a *sql.DB is a hold of its own here: the
		// profile's cost per hold is its cost per statement.
		{"tag_metrics_holdprofile", func() *sql.DB {
			return OpenDB(stubdriver.Connector{}, WithMeterProvider(mp), WithHoldProfile(NewHoldProfile(0)))
		}},
		{"tag_metrics_holdprofile_every", func() *sql.DB {
			return OpenDB(stubdriver.Connector{}, WithMeterProvider(mp), WithHoldProfile(NewHoldProfile(1)))
		}},
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

// BenchmarkStatementInterleaved measures what each variant adds to one
// statement on the stub driver, with the variants interleaved round by
// round (each round runs 2,000 statements per variant, in a rotating order)
// so that the machine's noise hits them alike. It reports per variant the
// median over rounds of its ns per statement minus raw's in the same round
// ("<variant>-added-ns"), and its allocations per statement minus raw's.
// Run it with -benchtime 30x (30 rounds).
func BenchmarkStatementInterleaved(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	variants := []struct {
		name string
		db   *sql.DB
	}{
		{"raw", sql.OpenDB(stubdriver.Connector{})},
		{"tag_only", OpenDB(stubdriver.Connector{}, WithoutMetrics())},
		{"tag_metrics", OpenDB(stubdriver.Connector{}, WithMeterProvider(mp))},
		{"holdprofile_default_rate", OpenDB(stubdriver.Connector{}, WithMeterProvider(mp), WithHoldProfile(NewHoldProfile(0)))},
		{"holdprofile_every_hold", OpenDB(stubdriver.Connector{}, WithMeterProvider(mp), WithHoldProfile(NewHoldProfile(1)))},
	}
	ctx := WithTag(context.Background(), "checkout_completion")
	ops := map[string]func(db *sql.DB) error{
		"exec": func(db *sql.DB) error {
			_, err := db.ExecContext(ctx, "UPDATE t SET a = 1 WHERE id = 7")
			return err
		},
		"query": func(db *sql.DB) error {
			rows, err := db.QueryContext(ctx, "SELECT a FROM t WHERE id = 7")
			if err != nil {
				return err
			}
			var v int64
			for rows.Next() {
				if err := rows.Scan(&v); err != nil {
					return err
				}
			}
			return rows.Close()
		},
	}
	for _, opName := range []string{"exec", "query"} {
		op := ops[opName]
		b.Run(opName, func(b *testing.B) {
			const k = 2000
			added := make([][]float64, len(variants))
			round := 0
			for b.Loop() {
				ns := make([]float64, len(variants))
				for j := range variants {
					i := (j + round) % len(variants)
					start := time.Now()
					for range k {
						if err := op(variants[i].db); err != nil {
							b.Fatal(err)
						}
					}
					ns[i] = float64(time.Since(start).Nanoseconds()) / k
				}
				for i := range variants {
					added[i] = append(added[i], ns[i]-ns[0])
				}
				round++
			}
			b.StopTimer()
			rawAllocs := testing.AllocsPerRun(1000, func() { _ = op(variants[0].db) })
			for i, v := range variants[1:] {
				slices.Sort(added[i+1])
				b.ReportMetric(added[i+1][len(added[i+1])/2], v.name+"-added-ns")
				b.ReportMetric(testing.AllocsPerRun(1000, func() { _ = op(v.db) })-rawAllocs, v.name+"-added-allocs")
			}
		})
	}
	for _, v := range variants {
		v.db.Close()
	}
}

// BenchmarkClock is the cost of one of conntag's clock reads (the runtime's
// monotonic clock; a vDSO call that reads the TSC where the kernel's
// clocksource is tsc), against the cheapest work in the same run. conntag
// reads it twice per statement and twice per hold.
func BenchmarkClock(b *testing.B) {
	in := &instr{epoch: time.Now()}
	var sink int64
	b.Run("baseline_add", func(b *testing.B) {
		for b.Loop() {
			sink++
		}
	})
	b.Run("now", func(b *testing.B) {
		for b.Loop() {
			sink += in.now()
		}
	})
	_ = sink
}

// discardExporter takes spans and drops them: the SDK's batching still does
// all its work, nothing leaves the process.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkHoldSpans measures what spans cost per hold (here one statement
// on a *sql.DB, so one hold per statement) on the stub driver, with metrics
// on in every variant: spans off (the default, the baseline), a span per
// statement and per hold, hold spans only, and hold spans sampled (none of
// these short holds passes MinHold, so 1 in 100 gets a span by the rate).
// The variants run interleaved round by round like
// BenchmarkStatementInterleaved; it reports per variant the median over
// rounds of its ns per hold divided by spans_off's in the same round
// ("<variant>-x"), the added ns, and allocations per hold.
// Run it with -benchtime 20x.
func BenchmarkHoldSpans(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	defer tp.Shutdown(context.Background())
	sampled := SpanSampling{MinHold: time.Millisecond, MinIdle: time.Millisecond, Rate: 0.01}
	variants := []struct {
		name string
		db   *sql.DB
	}{
		{"spans_off", OpenDB(stubdriver.Connector{}, WithMeterProvider(mp))},
		{"spans_all", OpenDB(stubdriver.Connector{}, WithMeterProvider(mp), WithTracerProvider(tp))},
		{"hold_spans_all", OpenDB(stubdriver.Connector{}, WithMeterProvider(mp), WithTracerProvider(tp), WithoutStatementSpans())},
		{"hold_spans_sampled", OpenDB(stubdriver.Connector{}, WithMeterProvider(mp), WithTracerProvider(tp), WithoutStatementSpans(),
			WithHoldSpanSampling(sampled))},
		{"stmt_spans_hold_sampled", OpenDB(stubdriver.Connector{}, WithMeterProvider(mp), WithTracerProvider(tp),
			WithHoldSpanSampling(sampled))},
	}
	ctx := WithTag(context.Background(), "checkout_completion")
	op := func(db *sql.DB) error {
		_, err := db.ExecContext(ctx, "UPDATE t SET a = 1 WHERE id = 7")
		return err
	}
	const k = 2000
	ratio := make([][]float64, len(variants))
	added := make([][]float64, len(variants))
	round := 0
	for b.Loop() {
		ns := make([]float64, len(variants))
		for j := range variants {
			i := (j + round) % len(variants)
			start := time.Now()
			for range k {
				if err := op(variants[i].db); err != nil {
					b.Fatal(err)
				}
			}
			ns[i] = float64(time.Since(start).Nanoseconds()) / k
		}
		for i := range variants {
			ratio[i] = append(ratio[i], ns[i]/ns[0])
			added[i] = append(added[i], ns[i]-ns[0])
		}
		round++
	}
	b.StopTimer()
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	for i, v := range variants {
		if i > 0 {
			b.ReportMetric(median(ratio[i]), v.name+"-x")
			b.ReportMetric(median(added[i]), v.name+"-added-ns")
		}
		b.ReportMetric(testing.AllocsPerRun(1000, func() { _ = op(v.db) }), v.name+"-allocs")
	}
	for _, v := range variants {
		v.db.Close()
	}
}
