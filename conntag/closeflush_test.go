package conntag

import (
	"context"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/holdtime/holdtime/internal/stubdriver"
)

// lastHold is an exporter that keeps the hold seconds of the last export.
type lastHold struct {
	mu   sync.Mutex
	hold float64
	n    int
}

func (e *lastHold) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return sdkmetric.DefaultTemporalitySelector(k)
}
func (e *lastHold) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}
func (e *lastHold) Export(_ context.Context, rm *metricdata.ResourceMetrics) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	e.hold = 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[float64]); ok && m.Name == "holdtime.connection.hold_time" {
				for _, p := range s.DataPoints {
					e.hold += p.Value
				}
			}
		}
	}
	return nil
}
func (e *lastHold) ForceFlush(context.Context) error { return nil }
func (e *lastHold) Shutdown(context.Context) error   { return nil }

// TestCloseExportsTheLastCounters: a pool closed between two exports of a
// push exporter (an hour apart here) gets its final counters out on Close,
// not lost with its callback.
func TestCloseExportsTheLastCounters(t *testing.T) {
	exp := &lastHold{}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Hour))))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	db := OpenDB(stubdriver.Connector{}, WithMeterProvider(mp))
	ctx := WithTag(context.Background(), "checkout")
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the hold being measured
	conn.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	exp.mu.Lock()
	defer exp.mu.Unlock()
	if exp.n != 1 || exp.hold < 0.02 {
		t.Fatalf("%d exports, last hold %.3f s; want one export on Close with at least 0.020 s of hold", exp.n, exp.hold)
	}
}
