package migration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/holdtime/holdtime/reservation/redisstock"
	"github.com/holdtime/holdtime/testenv"
)

// Redis claims that died between their halves (a shadow's, a truth's left
// stuck "claiming", a truth's driven again and counted twice in Redis's
// ledger): reconcile names them and the drift they leave, per item on the
// injected registry too; repair settles them and brings the drift to zero,
// Redis's ledger included.
func TestRepairSettlesRedisClaimsStuckBetweenHalves(t *testing.T) {
	ctx := context.Background()
	const onMySQL, onShadow, stock = 31, 32, 10
	var mu sync.Mutex
	dieOnce := map[string]bool{"a1": true, "b1": true, "b2": true}
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	e := setupStore(t, Config{QuietPeriod: -1, MeterProvider: mp}, func(c *redisstock.Config) {
		c.BetweenClaimHalves = func(_ context.Context, _ uint64, id string) error {
			mu.Lock()
			defer mu.Unlock()
			if dieOnce[id] {
				delete(dieOnce, id)
				return errors.New("the process died between the halves of the claim")
			}
			return nil
		}
	}, testenv.PersistenceNone, stock, onMySQL, onShadow)
	if err := e.r.SetRollout(ctx, Rollout{Shadow: Plan{Shops: []uint64{onShadow}}, MySQL: Plan{Shops: []uint64{onMySQL}}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		shop uint64
		id   string
	}{{onMySQL, "a1"}, {onShadow, "b1"}, {onShadow, "b2"}} {
		if _, err := e.r.Reserve(ctx, cart(r.shop, r.id)); err != nil {
			t.Fatal(err)
		}
	}
	// MySQL the truth: it claims; Redis, its shadow, dies between halves.
	if err := e.r.Claim(ctx, onMySQL, "a1"); err != nil {
		t.Fatal(err)
	}
	// Redis the truth: b1's claim dies and is driven again (both halves
	// run again: Redis's ledger counts it twice); b2's dies and stays.
	if err := e.r.Claim(ctx, onShadow, "b1"); err == nil {
		t.Fatal("b1's first claim did not die")
	}
	if err := e.r.Claim(ctx, onShadow, "b1"); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Claim(ctx, onShadow, "b2"); err == nil {
		t.Fatal("b2's claim did not die")
	}

	rep, err := e.r.Reconcile(ctx, onMySQL)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stuck between their halves: a1", "held redis 1 mysql 0"} {
		if !strings.Contains(rep.Drift(), want) {
			t.Errorf("reconcile of shop %d: drift %q, want it to name %q", onMySQL, rep.Drift(), want)
		}
	}
	rep, err = e.r.Reconcile(ctx, onShadow)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stuck between their halves: b2", "counted more than once in its ledger: b1"} {
		if !strings.Contains(rep.Drift(), want) {
			t.Errorf("reconcile of shop %d: drift %q, want it to name %q", onShadow, rep.Drift(), want)
		}
	}
	if got := itemDriftSeries(t, reg); got[`figure=held,group=1,item=1,shop=31`] != 1 || len(got) != 2 {
		t.Errorf("item drift gauge before repair: %v, want shop 31's held at 1 and its available at 0, nothing else", got)
	}

	for _, shop := range []uint64{onMySQL, onShadow} {
		rep, err := e.r.Repair(ctx, shop)
		if err != nil {
			t.Fatal(err)
		}
		if d := rep.Drift(); d != "" {
			t.Errorf("shop %d after repair: %s", shop, d)
		}
	}
	if got := itemDriftSeries(t, reg); len(got) != 0 {
		t.Errorf("item drift gauge after repair: %v, want no drifted item", got)
	}
	// Each system's books, by the test's own queries: every sale counted
	// once in both ledgers, nothing held, Redis's ledger agreeing with its
	// counters.
	for shop, sold := range map[uint64]int64{onMySQL: 1, onShadow: 2} {
		rb, err := e.store.Books(ctx, key(shop))
		if err != nil {
			t.Fatal(err)
		}
		if rb.Claimed != sold || rb.OnHand != stock-sold || rb.Available != stock-sold || rb.Held != 0 {
			t.Errorf("shop %d: redis books %+v, want %d claimed, %d on hand and available, 0 held", shop, rb, sold, stock-sold)
		}
		ra, rh, ma, mh := e.figures(t, shop)
		if ra != ma || rh != 0 || mh != 0 {
			t.Errorf("shop %d: redis %d/%d mysql %d/%d", shop, ra, rh, ma, mh)
		}
		var claimed int64
		if err := e.r.cfg.DB.QueryRowContext(ctx, `SELECT claimed FROM inventory_ledger WHERE shop_id = ?`, shop).Scan(&claimed); err != nil || claimed != sold {
			t.Errorf("shop %d: MySQL claimed %d, %v: want %d", shop, claimed, err, sold)
		}
	}
	for _, id := range []string{"b1", "b2"} {
		if st, err := e.store.States(ctx, onShadow, []string{id}); err != nil || st[0] != "claimed" {
			t.Errorf("redis state of %s: %v, %v: want claimed", id, st, err)
		}
	}
	// A repair again changes nothing.
	rep, err = e.r.Repair(ctx, onShadow)
	if err != nil || rep.Drift() != "" {
		t.Fatalf("second repair: %v, drift %q", err, rep.Drift())
	}
	if rb, err := e.store.Books(ctx, key(onShadow)); err != nil || rb.Claimed != 2 || rb.OnHand != stock-2 {
		t.Fatalf("redis books after a second repair: %+v, %v", rb, err)
	}
}
