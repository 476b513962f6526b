package conntag

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/holdtime/holdtime/internal/stubdriver"
)

// TestCountersNeverGoDown collects over and over while holds start and end
// on many goroutines: a counter that went down would read as a reset to
// Prometheus, and one that jumped by a whole hold would be a double count.
func TestCountersNeverGoDown(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	db := OpenDB(stubdriver.Connector{}, WithMeterProvider(mp))
	defer db.Close()
	db.SetMaxOpenConns(8)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, tag := range []string{"a", "b", "c", "d"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tctx := WithTag(ctx, tag)
			for ctx.Err() == nil {
				tx, err := db.BeginTx(tctx, nil)
				if err != nil {
					continue // the pool closing under us at the end
				}
				tx.ExecContext(tctx, "UPDATE t SET a = 1")
				tx.Commit()
			}
		}()
	}
	last := map[string]float64{}
	enc := attribute.DefaultEncoder()
	for range 300 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				record := func(key string, v float64) {
					if v < last[key] {
						t.Errorf("%s went down: %v -> %v", key, last[key], v)
					}
					last[key] = v
				}
				switch d := m.Data.(type) {
				case metricdata.Sum[float64]:
					if !d.IsMonotonic {
						continue
					}
					for _, dp := range d.DataPoints {
						record(m.Name+dp.Attributes.Encoded(enc), dp.Value)
					}
				case metricdata.Sum[int64]:
					if !d.IsMonotonic {
						continue
					}
					for _, dp := range d.DataPoints {
						record(m.Name+dp.Attributes.Encoded(enc), float64(dp.Value))
					}
				}
			}
		}
	}
	cancel()
	wg.Wait()
	if len(last) == 0 {
		t.Fatal("no counters collected")
	}
}
