package otlp

import (
	"context"
	"database/sql"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/holdtime/holdtime/collector/internal/source"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// app is one conntag-instrumented pool whose MeterProvider exports to a
// receiver over OTLP/HTTP and can also be read directly (own).
type app struct {
	db  *sql.DB
	mp  *sdkmetric.MeterProvider
	own *sdkmetric.ManualReader
}

func newApp(t *testing.T, dsn, endpoint string, res *resource.Resource) *app {
	t.Helper()
	ctx := context.Background()
	exp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(endpoint))
	if err != nil {
		t.Fatal(err)
	}
	a := &app{own: sdkmetric.NewManualReader()}
	a.mp = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(a.own),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(150*time.Millisecond))))
	t.Cleanup(func() { a.mp.Shutdown(context.Background()) })
	a.db, err = conntag.Open("mysql", dsn, conntag.WithMeterProvider(a.mp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.db.Close() })
	return a
}

// figures reads conntag's own counters, per tag.
func (a *app) figures(t *testing.T) map[string]*source.TagDelta {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := a.own.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]*source.TagDelta{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			add := func(attrs attribute.Set, v float64) {
				tag, ok := attrs.Value(conntag.AttrConnTag)
				if !ok {
					return
				}
				d := out[tag.AsString()]
				if d == nil {
					d = &source.TagDelta{}
					out[tag.AsString()] = d
				}
				switch m.Name {
				case MetricHoldTime:
					d.Hold += v
				case MetricActiveTime:
					d.Active += v
				case MetricIdleTime:
					d.Idle += v
				case MetricHolds:
					d.Obs += v
				case MetricOperations:
					d.Stmts += v
					if attrs.HasValue(AttrErrorType) {
						d.Errors += v
					}
				}
			}
			switch data := m.Data.(type) {
			case metricdata.Sum[float64]:
				for _, p := range data.DataPoints {
					add(p.Attributes, p.Value)
				}
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					add(p.Attributes, float64(p.Value))
				}
			}
		}
	}
	return out
}

// work runs a tagged workload on the app: transactions that idle between
// statements, quick reads, and failing statements.
func (a *app) work(t *testing.T, rounds int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 4 {
		wg.Go(func() {
			for i := range rounds {
				cctx := conntag.WithTag(ctx, "checkout")
				tx, err := a.db.BeginTx(cctx, nil)
				if err != nil {
					errs <- err
					return
				}
				tx.ExecContext(cctx, "SELECT 1")
				time.Sleep(5 * time.Millisecond) // idle in the transaction
				if err := tx.Commit(); err != nil {
					errs <- err
					return
				}
				var n int
				if err := a.db.QueryRowContext(conntag.WithTag(ctx, "browse"), "SELECT ?", g*rounds+i).Scan(&n); err != nil {
					errs <- err
					return
				}
				if i%5 == 0 {
					// Fails: counted as a failed statement of its tag.
					a.db.ExecContext(conntag.WithTag(ctx, "broken"), "SELECT * FROM no_such_table")
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestCountersOverOTLPEqualConntagsOwn: two real conntag pools on a real
// MariaDB, with identical resources (two replicas nobody told apart),
// export their counters through the OpenTelemetry SDK's OTLP/HTTP exporter
// while they work; the per-tag deltas the receiver writes add up to what
// conntag's own counters say, every figure.
func TestCountersOverOTLPEqualConntagsOwn(t *testing.T) {
	d := testenv.NewDatabase(t)
	dsn := d.Target.Config(d.Name).FormatDSN()
	sink := newRecordingSink()
	m := &MetricsReceiver{Sink: sink, MaxTags: 1000, MaxBody: 8 << 20, Started: time.Now()}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/metrics", m)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	res := resource.NewSchemaless(attribute.String("service.name", "shop"))
	apps := []*app{newApp(t, dsn, srv.URL+"/v1/metrics", res), newApp(t, dsn, srv.URL+"/v1/metrics", res)}
	var wg sync.WaitGroup
	for _, a := range apps {
		wg.Go(func() { a.work(t, 40) })
	}
	wg.Wait()
	// Every hold has ended: the counters stand still. A last export each.
	ctx := context.Background()
	for _, a := range apps {
		if err := a.mp.ForceFlush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]*source.TagDelta{}
	for _, a := range apps {
		for tag, f := range a.figures(t) {
			if want[tag] == nil {
				want[tag] = &source.TagDelta{}
			}
			want[tag].Add(&f.Figures)
			want[tag].Obs += f.Obs
		}
	}
	if sink.success < 4 {
		t.Errorf("%d exports received: the test wanted several per app while they worked", sink.success)
	}
	if sink.malformed != 0 {
		t.Errorf("%d points rejected from conntag's own exporter", sink.malformed)
	}
	for _, tag := range []string{"checkout", "browse", "broken"} {
		w, g := want[tag], sink.tags[tag]
		if w == nil || w.Hold == 0 || w.Stmts == 0 {
			t.Fatalf("conntag counted nothing for %s: %+v", tag, w)
		}
		if g == nil {
			t.Fatalf("receiver wrote nothing for %s; conntag says %+v", tag, w.Figures)
		}
		near := func(what string, got, want float64) {
			if math.Abs(got-want) > 1e-9*max(1, want) {
				t.Errorf("%s %s: receiver %v, conntag %v", tag, what, got, want)
			}
		}
		near("hold", g.Hold, w.Hold)
		near("active", g.Active, w.Active)
		near("idle", g.Idle, w.Idle)
		near("statements", g.Stmts, w.Stmts)
		near("failed statements", g.Errors, w.Errors)
		near("holds", g.Obs, w.Obs)
		t.Logf("%s: hold %.3fs active %.3fs idle %.3fs, %v statements (%v failed), %v holds", tag, g.Hold, g.Active, g.Idle, g.Stmts, g.Errors, g.Obs)
	}
	if want["checkout"].Idle < 2*4*40*0.005*0.9 {
		t.Errorf("checkout idle %.3fs: its transactions idled at least 5 ms each", want["checkout"].Idle)
	}
	if want["broken"].Errors == 0 {
		t.Errorf("no failed statement counted for broken: %+v", want["broken"])
	}
	// The receiver's memory grows with series, not holds.
	if n := m.Series(); n > 60 {
		t.Errorf("%d series remembered for 3 tags in 2 apps", n)
	}
}
