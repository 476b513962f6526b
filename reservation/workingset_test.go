package reservation

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// fakeClock is the engine's clock in tests that must not sleep.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// gauge reads the pool depth gauge as a scrape would.
func gauge(t *testing.T, r *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "holdtime.reservation.pool.depth" {
				var n int64
				for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
					n += dp.Value
				}
				return n
			}
		}
	}
	t.Fatal("no holdtime.reservation.pool.depth")
	return 0
}

func TestPoolDepthGaugeIsLive(t *testing.T) {
	for _, s := range []Strategy{StrategySkipLocked, StrategyCounter} {
		t.Run(string(s), func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			e, _ := setup(t, Config{Strategy: s, PoolSize: 10,
				MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
			ctx := t.Context()
			key := ItemKey{1, 1, 1}
			receive(t, e, key, 25)
			if got := gauge(t, reader); got != 0 {
				t.Fatalf("depth before any count = %d, want 0", got)
			}
			if _, err := e.Refill(ctx, key); err != nil {
				t.Fatal(err)
			}
			if got := gauge(t, reader); got != 10 {
				t.Fatalf("depth after refill = %d, want 10", got)
			}
			// No refill in between: the gauge follows the engine's own
			// takes and returns.
			if _, err := e.Reserve(ctx, cart("a", key, 3)); err != nil {
				t.Fatal(err)
			}
			if got := gauge(t, reader); got != 7 {
				t.Fatalf("depth after reserving 3 = %d, want 7", got)
			}
			if err := e.Release(ctx, 1, "a"); err != nil {
				t.Fatal(err)
			}
			if got := gauge(t, reader); got != 10 {
				t.Fatalf("depth after release = %d, want 10", got)
			}
			if _, err := e.Reserve(ctx, cart("b", key, 6)); err != nil {
				t.Fatal(err)
			}
			if got := gauge(t, reader); got != 4 {
				t.Fatalf("depth after reserving 6 = %d, want 4", got)
			}
			// Below half: Run is asked to refill at once.
			select {
			case k := <-e.wake:
				if k != key {
					t.Fatalf("woke for %+v, want %+v", k, key)
				}
			default:
				t.Fatal("a pool below half did not wake the refiller")
			}
			e.backgroundRefill(ctx, key)
			if got := gauge(t, reader); got != 10 {
				t.Fatalf("depth after the woken refill = %d, want 10", got)
			}
		})
	}
}

func TestRefillerForgetsIdleItems(t *testing.T) {
	e, _ := setup(t, Config{PoolSize: 10, RefillIdle: time.Minute})
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	e.now = clock.Now
	ctx := t.Context()
	idle, busy := ItemKey{1, 1, 1}, ItemKey{1, 2, 1}
	receive(t, e, idle, 20)
	receive(t, e, busy, 20)
	e.refillHot(ctx) // counts both
	if n := len(e.refillDue()); n != 0 {
		t.Fatalf("%d items due right after a refill, want 0", n)
	}
	clock.Add(50 * time.Second)
	if _, err := e.Reserve(ctx, cart("a", busy, 1)); err != nil {
		t.Fatal(err)
	}
	clock.Add(20 * time.Second) // idle unused for 70 s, busy for 20 s
	e.refillHot(ctx)
	e.hotMu.Lock()
	_, idleKept := e.hot[idle]
	_, busyKept := e.hot[busy]
	n := len(e.hot)
	e.hotMu.Unlock()
	if idleKept || !busyKept || n != 1 {
		t.Fatalf("working set after 70 s: idle kept %v, busy kept %v, %d items; want only busy", idleKept, busyKept, n)
	}
	if got := e.poolDepth(); got != 10 {
		t.Fatalf("pool depth of the working set = %d, want 10 (busy only, recounted and topped up)", got)
	}
	// A forgotten item comes back with its next reserve.
	if _, err := e.Reserve(ctx, cart("b", idle, 1)); err != nil {
		t.Fatal(err)
	}
	e.hotMu.Lock()
	_, idleKept = e.hot[idle]
	e.hotMu.Unlock()
	if !idleKept {
		t.Fatal("a reserve did not bring a forgotten item back")
	}
}

func TestPruneEnded(t *testing.T) {
	e, db := setup(t, Config{PoolSize: 10})
	ctx := t.Context()
	key := ItemKey{1, 1, 1}
	receive(t, e, key, 20)
	for _, id := range []string{"claimed", "released", "expired", "held", "recent"} {
		p := cart(id, key, 1)
		if id == "expired" {
			p.TTL = time.Microsecond
		}
		if _, err := e.Reserve(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"claimed", "recent"} {
		if err := e.Claim(ctx, 1, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Release(ctx, 1, "released"); err != nil {
		t.Fatal(err)
	}
	if n, err := e.ExpireDue(ctx); err != nil || n != 1 {
		t.Fatalf("ExpireDue = %d, %v; want 1", n, err)
	}
	// Age every row but "recent" past the default retention of 24 h.
	if _, err := db.ExecContext(ctx, `UPDATE inventory_reservations SET expires_at = expires_at - INTERVAL 2 DAY,
		updated_at = updated_at - INTERVAL 2 DAY WHERE reservation_id <> 'recent'`); err != nil {
		t.Fatal(err)
	}
	n, err := e.PruneEnded(ctx)
	if err != nil || n != 3 {
		t.Fatalf("PruneEnded = %d, %v; want 3 (claimed, released, expired)", n, err)
	}
	rows, err := db.QueryContext(ctx, `SELECT reservation_id FROM inventory_reservations ORDER BY reservation_id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := scanStrings(rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids[0] != "held" || ids[1] != "recent" {
		t.Fatalf("rows left %v, want [held recent]: a live hold or a recent end was pruned", ids)
	}
	if err := e.Claim(ctx, 1, "claimed"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("claim after pruning = %v, want ErrNotFound", err)
	}
	if n, err := e.PruneEnded(ctx); err != nil || n != 0 {
		t.Fatalf("second PruneEnded = %d, %v; want 0", n, err)
	}
	checkBooks(t, db, StrategySkipLocked, key, 20, 2)
}

func TestPruneEndedBatches(t *testing.T) {
	e, db := setup(t, Config{PoolSize: 50, ExpiryBatch: 2}) // batches of 20
	ctx := t.Context()
	key := ItemKey{1, 1, 1}
	receive(t, e, key, 50)
	for i := range 45 {
		id := "r" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		if _, err := e.Reserve(ctx, cart(id, key, 1)); err != nil {
			t.Fatal(err)
		}
		if err := e.Release(ctx, 1, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `UPDATE inventory_reservations SET expires_at = expires_at - INTERVAL 2 DAY,
		updated_at = updated_at - INTERVAL 2 DAY`); err != nil {
		t.Fatal(err)
	}
	if n, err := e.PruneEnded(ctx); err != nil || n != 45 {
		t.Fatalf("PruneEnded = %d, %v; want 45 over three batches", n, err)
	}
}

func scanStrings(rows interface {
	Next() bool
	Scan(...any) error
	Close() error
	Err() error
}) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
