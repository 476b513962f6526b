package otlp_test

import (
	"context"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/collector/internal/otlp"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// TestCollectorAppLayerFromCounters: a collector with OTLP metrics on
// takes a real conntag pool's counters at /v1/metrics and its hold spans
// (every hold, every statement) at /v1/traces; the app layer's hold per
// tag equals conntag's own counter, once: the spans, which describe the
// same holds, add nothing.
func TestCollectorAppLayerFromCounters(t *testing.T) {
	d := testenv.NewDatabase(t)
	c, err := collector.New(collector.Config{OTLP: collector.OTLPConfig{Enabled: true, Metrics: true}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	ctx := context.Background()

	mexp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(srv.URL+"/v1/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	own := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(own), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(200*time.Millisecond))))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	texp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(texp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	db, err := conntag.Open("mysql", d.Target.Config(d.Name).FormatDSN(), conntag.WithMeterProvider(mp), conntag.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })

	for range 30 {
		tctx := conntag.WithTag(ctx, "checkout")
		tx, err := db.BeginTx(tctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(tctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // idle in the transaction
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := own.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var want float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[float64]); ok && m.Name == otlp.MetricHoldTime {
				for _, p := range s.DataPoints {
					if v, _ := p.Attributes.Value(attribute.Key(otlp.AttrConnTag)); v.AsString() == "checkout" {
						want += p.Value
					}
				}
			}
		}
	}
	if want < 30*0.005 {
		t.Fatalf("conntag counted %.3f s of hold for 30 holds of at least 5 ms", want)
	}
	r, err := c.TopReport(collector.TopQuery{Window: 5 * time.Minute, Layer: string(collector.LayerApp)})
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, row := range r.Rows {
		if row.Tag == "checkout" {
			got = row.Layers[collector.LayerApp].HoldSeconds
		}
	}
	if math.Abs(got-want) > 1e-6*want {
		t.Fatalf("app layer hold %.6f s, conntag's counter %.6f s (twice it: the spans were added too)", got, want)
	}
	t.Logf("checkout: app layer %.4f s = conntag's counter %.4f s", got, want)
}
