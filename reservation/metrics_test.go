package reservation

import (
	"context"
	"testing"
	"time"
)

// TestMetricsOffAllocateNothing: without a MeterProvider (the default) the
// engine records nothing and pays nothing for it: no allocation per
// operation, where a no-op provider would still build attribute sets.
func TestMetricsOffAllocateNothing(t *testing.T) {
	m, err := newMetrics(nil, StrategySkipLocked, func() int64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	short := []int64{1, 2}
	allocs := testing.AllocsPerRun(100, func() {
		m.op(ctx, opReserve, start, nil)
		m.op(ctx, opClaim, start, ErrNotFound)
		m.retry(ctx, opReserve, ErrDeadlock)
		m.shortRead(ctx, short)
		m.refilledUnits(ctx, 5)
		m.refillWait(ctx, time.Millisecond)
		m.backgroundRefill(ctx)
		m.pruned(ctx, 1)
		m.expired(ctx, 1)
	})
	if allocs != 0 {
		t.Errorf("metrics off: %v allocations per operation set, want 0", allocs)
	}
}
