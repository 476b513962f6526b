package flashsale

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/migration"
	"github.com/holdtime/holdtime/testenv"
)

type outcome struct {
	shop  uint64
	id    string
	lines []reservation.ReservedLine
	paid  bool
}

// A sale that moves five shops through every stage, flips the kill switch
// back and forth, KILLs the MySQL connections twice and restarts Redis:
// every reservation's source of truth ends with exactly what its customer
// did (claimed when paid, not held otherwise), both systems' books balance,
// and every mismatch comes from an injected fault.
func TestMigrationDuringSale(t *testing.T) {
	ctx := t.Context()
	rs := testenv.NewRedis(t, testenv.RedisOptions{Persistence: testenv.PersistenceAOF})
	d := testenv.NewDatabase(t)
	db, err := OpenDB(Config{MySQL: d.Config(), Concurrency: 24})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1, PoolSize: 32})
	t.Cleanup(func() { rdb.Close() })
	shops := []uint64{101, 102, 103, 104, 105} // lowest volume first

	var mu sync.Mutex
	var mismatches []migration.Mismatch
	type window struct{ from, to time.Time }
	var faults []window
	b, err := NewMigration(ctx, MigrationConfig{DB: db, Redis: rdb, Shops: shops, PoolSize: 100,
		ShadowTimeout: 10 * time.Second, QuietPeriod: 20 * time.Millisecond, GateInterval: 5 * time.Millisecond,
		OnMismatch: func(m migration.Mismatch) {
			mu.Lock()
			mismatches = append(mismatches, m)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	router, store := b.R, b.Redis
	stage := func(shadow, mysql float64) func(context.Context) error {
		return func(ctx context.Context) error {
			return router.SetRollout(ctx, migration.Rollout{Shadow: migration.Plan{Percent: shadow}, MySQL: migration.Plan{Percent: mysql}})
		}
	}
	kill := func(on bool) func(context.Context) error {
		return func(ctx context.Context) error { return router.SetKillSwitch(ctx, on, true) }
	}
	fault := func(do func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			w := window{from: time.Now()}
			err := do(ctx)
			w.to = time.Now()
			mu.Lock()
			faults = append(faults, w)
			mu.Unlock()
			return err
		}
	}
	killMySQL := fault(func(ctx context.Context) error { return KillConnections(ctx, d.Target.Admin(), d.Name) })
	var outcomes []outcome
	cfg := Config{Backend: b, ShopIDs: shops, Buyers: 1500, Concurrency: 16, Items: 2, Stock: 2000,
		PaymentDelay: time.Millisecond, AbandonRate: 0.1, AbandonTTL: 20 * time.Millisecond, KillClaims: 0.05,
		Outcome: func(shop uint64, id string, lines []reservation.ReservedLine, paid bool) {
			mu.Lock()
			outcomes = append(outcomes, outcome{shop, id, lines, paid})
			mu.Unlock()
		},
		Events: []Event{
			{At: 0.08, Name: "shadow 40%", Do: stage(40, 0)},
			{At: 0.16, Name: "shadow 100%, mysql 20%", Do: stage(100, 20)},
			{At: 0.24, Name: "KILL mysql connections", Do: killMySQL},
			{At: 0.32, Name: "mysql 60%", Do: stage(100, 60)},
			{At: 0.40, Name: "kill switch on", Do: kill(true)},
			{At: 0.48, Name: "restart redis", Do: fault(rs.Restart)},
			{At: 0.56, Name: "kill switch off", Do: kill(false)},
			{At: 0.64, Name: "mysql 100%", Do: stage(100, 100)},
			{At: 0.72, Name: "kill switch on", Do: kill(true)},
			{At: 0.80, Name: "kill switch off", Do: kill(false)},
			{At: 0.88, Name: "KILL mysql connections", Do: killMySQL},
		}}
	r, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Phases {
		t.Logf("%-24s buyers %4d reserves %4d %6.0f/s mismatches %v, books %d checked %d wrong", p.Name, p.Buyers,
			p.Reserves, p.Throughput, p.Counters, p.Checked, p.Wrong)
		if p.Wrong != 0 || p.Checked != p.Reserves {
			t.Errorf("phase %s: %d of %d reservations checked, %d disagree with their customer", p.Name, p.Checked, p.Reserves, p.Wrong)
		}
	}
	t.Logf("%+v", r)
	if r.Oversold != 0 || r.Undersold != 0 || r.Leaked != 0 || r.FailedCalls != 0 || r.LostHolds != 0 || r.Paid == 0 {
		t.Errorf("the books of the source of truth do not balance: %+v", r)
	}

	// Every reservation: its source of truth says what the customer did.
	truths := map[migration.Backend]int{}
	redisStuck := map[reservation.ItemKey]int64{}
	stuckIDs := map[string]bool{}
	for _, o := range outcomes {
		truth, _, err := router.Truth(ctx, o.shop, o.id)
		if err != nil {
			t.Fatal(err)
		}
		truths[truth]++
		st, err := b.TruthState(ctx, o.shop, o.id)
		if err != nil {
			t.Fatal(err)
		}
		if (st == reservation.StateClaimed) != o.paid || st == reservation.StateHeld || st == "missing" {
			t.Errorf("reservation %d/%s (truth %s): state %s, paid %v", o.shop, o.id, truth, st, o.paid)
		}
		if res, err := store.Lookup(ctx, o.shop, o.id); err == nil && res.State == reservation.StateHeld {
			// A Redis shadow stuck between the halves of its claim.
			stuckIDs[fmt.Sprintf("%d/%s", o.shop, o.id)] = true
			for _, l := range o.lines {
				redisStuck[reservation.ItemKey{ShopID: o.shop, ItemID: l.ItemID, GroupID: l.GroupID}] += l.Quantity
			}
		}
	}
	if truths[migration.BackendMySQL] == 0 || truths[migration.BackendRedis] == 0 {
		t.Errorf("reservations by source of truth %v: want both", truths)
	}
	// Each system's own books balance, and the two agree (one stock): the
	// engine was backfilled from Redis when each shop entered shadow, so
	// its ledger counts the sales it saw since; what both can still sell,
	// and hold, is the same.
	faulted := map[uint64]bool{}
	for _, m := range mismatches {
		faulted[m.ShopID] = true
	}
	for _, shop := range shops {
		rep, err := router.Reconcile(ctx, shop)
		if err != nil {
			t.Fatal(err)
		}
		// A Redis claim whose ledger half lost its COMMIT reply to a KILL
		// is driven again and counted twice in Redis's ledger (the Redis
		// design's flaw, whatever the stage; no mismatch: both systems
		// end the hold alike).
		redisOwn := len(rep.Overcounted) > 0 && len(rep.Claiming) == 0 && !slices.ContainsFunc(rep.Items, migration.ItemDrift.Drifted)
		if d := rep.Drift(); d != "" && (faulted[shop] || redisOwn) {
			// A fault may leave drift (a shadow that missed a call, a
			// Redis shadow's claim stuck between its halves): repair
			// brings it to zero.
			t.Logf("shop %d (%s) at rest after faults: %s", shop, rep.Stage, d)
			if rep, err = router.Repair(ctx, shop); err != nil {
				t.Fatal(err)
			}
		}
		if d := rep.Drift(); d != "" {
			t.Errorf("shop %d (%s) at rest: %s", shop, rep.Stage, d)
		}
		for item := uint64(1); item <= 2; item++ {
			k := reservation.ItemKey{ShopID: shop, ItemID: item, GroupID: 1}
			eb, err := Audit(ctx, db, reservation.StrategySkipLocked, k)
			if err != nil {
				t.Fatal(err)
			}
			if eb.Leaked() != 0 || eb.Held != 0 || eb.OnHand+eb.Claimed > cfg.Stock {
				t.Errorf("engine books of %+v: %+v", k, eb)
			}
			rb, err := store.Books(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			// A shop whose Redis shadow missed a claim in a fault (a
			// mismatch) and that rests with Redis its truth may have its
			// Redis ledger one sale behind its counter.
			if rb.OnHand+rb.Claimed != cfg.Stock || (rb.Available+rb.Held != rb.OnHand && !faulted[shop]) || rb.Held != 0 {
				t.Errorf("redis books of %+v: %+v (stuck shadow holds before repair: %d)", k, rb, redisStuck[k])
			}
		}
	}
	// Every mismatch is explained by a fault: it happened during one (or
	// within a second of its end, the calls in flight), or it is a later
	// call on a reservation whose earlier mismatch was.
	explained := map[string]bool{}
	for _, m := range mismatches {
		key := fmt.Sprintf("%d/%s", m.ShopID, m.ReservationID)
		in := explained[key]
		for _, w := range faults {
			in = in || (!m.At.Before(w.from) && m.At.Before(w.to.Add(time.Second)))
		}
		if !in {
			t.Errorf("mismatch without a fault: %+v", m)
		}
		explained[key] = true
	}
	for id := range stuckIDs {
		if !explained[id] {
			t.Errorf("Redis holds reservation %s at rest without a mismatch", id)
		}
	}
	t.Logf("%d mismatches, %d faults, %d stuck shadow holds", len(mismatches), len(faults), len(stuckIDs))
}
