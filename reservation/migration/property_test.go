package migration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/testenv"
)

// The migration's properties under random schedules: stages moved at
// random (allow-lists), the global and per-shop kill switches flipped,
// shops selling out, claims within a few ms of the hold deadline, abandoned
// and released holds, and, in the faulty runs, KILLs of the MySQL
// connections and Redis crashes with AOF everysec. Checked after each run
// with the test's own queries of MySQL and Redis:
//
//   - no unit sold twice: per item, the units of the reservations whose
//     source of truth says claimed never exceed the stock;
//   - every reservation's source of truth is exact: claimed when its
//     customer's claim succeeded, not held at rest, not claimed when the
//     customer never paid;
//   - every mismatch falls in a window where a fault was injected (or
//     concerns a reservation whose earlier mismatch did); runs without
//     faults have none;
//   - the gate never promotes a drifted shop: at every promotion (the shop
//     fenced), both systems' counts of the shop agree;
//   - at rest, both systems agree on every shop no fault touched.
//
// HOLDTIME_PROPERTY_SEED=n replays one run's schedule (the seed is logged).
func TestMigrationProperties(t *testing.T) {
	testenv.RequireRedis(t)
	seeds := []uint64{uint64(time.Now().UnixNano()), uint64(time.Now().UnixNano()) + 1, uint64(time.Now().UnixNano()) + 2}
	if s := os.Getenv("HOLDTIME_PROPERTY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{n}
	}
	for i, seed := range seeds {
		faults := i%2 == 1 // every other run injects faults
		t.Run(fmt.Sprintf("seed=%d,faults=%v", seed, faults), func(t *testing.T) { propertyRun(t, seed, faults) })
	}
}

type window struct{ from, to time.Time }

type buyer struct {
	shop     uint64
	id       string
	qty      int64
	reserved bool // the truth granted it (its customer learned so)
	unknown  bool // the reserve's outcome never came back
	paid     bool // the customer's claim succeeded
}

func propertyRun(t *testing.T, seed uint64, faults bool) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var rmu sync.Mutex
	rnd := func(n int) int { rmu.Lock(); defer rmu.Unlock(); return rng.IntN(n) }
	shops := []uint64{201, 202, 203, 204}
	stock := int64(20 + rnd(30))
	var mu sync.Mutex
	var windows []window
	var promotions []string
	e := setup(t, Config{QuietPeriod: 30 * time.Millisecond, GateInterval: 5 * time.Millisecond, ShadowTimeout: 5 * time.Second,
		ShopsByVolume: shops}, testenv.PersistenceAOF, stock, shops...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// AOF everysec: a crash loses up to the last second of writes.
	admin := redis.NewClient(&redis.Options{Addr: e.rs.Addr})
	defer admin.Close()
	everysec := func() error { return admin.ConfigSet(ctx, "appendfsync", "everysec").Err() }
	if err := everysec(); err != nil {
		t.Fatal(err)
	}
	// The gate, checked at every promotion with the test's own queries
	// (the shop is fenced: nothing of it moves).
	e.r.cfg.onCutover = func(shop uint64, from, to Stage) {
		if to != StageMySQL {
			return
		}
		ra, rh, ma, mh := e.figuresCtx(ctx, shop)
		mu.Lock()
		promotions = append(promotions, fmt.Sprintf("shop %d %s->%s: redis %d/%d mysql %d/%d", shop, from, to, ra, rh, ma, mh))
		mu.Unlock()
		if ra != ma || rh != mh {
			t.Errorf("the gate promoted shop %d with redis %d available %d held, mysql %d/%d", shop, ra, rh, ma, mh)
		}
	}
	runDone := make(chan struct{})
	go func() { defer close(runDone); e.r.Run(ctx) }()

	fault := func(do func() error) {
		w := window{from: time.Now()}
		err := do()
		w.to = time.Now()
		mu.Lock()
		windows = append(windows, w)
		mu.Unlock()
		if err != nil {
			t.Logf("fault: %v", err)
		}
	}
	// The schedule: every 40-80 ms one random move.
	traffic := 2500 * time.Millisecond
	schedDone := make(chan struct{})
	go func() {
		defer close(schedDone)
		end := time.Now().Add(traffic)
		for time.Now().Before(end) {
			time.Sleep(time.Duration(40+rnd(40)) * time.Millisecond)
			switch n := rnd(10); {
			case n < 5:
				var ro Rollout
				for _, s := range shops {
					switch rnd(3) {
					case 1:
						ro.Shadow.Shops = append(ro.Shadow.Shops, s)
					case 2:
						ro.MySQL.Shops = append(ro.MySQL.Shops, s)
					}
				}
				if err := e.r.SetRollout(ctx, ro); err != nil && !errors.Is(err, ErrDrifted) && ctx.Err() == nil {
					t.Errorf("rollout: %v", err)
				}
			case n < 7:
				if err := e.r.SetKillSwitch(ctx, rnd(2) == 0, rnd(2) == 0); err != nil && !errors.Is(err, ErrDrifted) {
					t.Errorf("kill switch: %v", err)
				}
			case n < 8:
				if err := e.r.SetShopKillSwitch(ctx, shops[rnd(len(shops))], rnd(2) == 0, rnd(2) == 0); err != nil && !errors.Is(err, ErrDrifted) {
					t.Errorf("shop kill switch: %v", err)
				}
			case faults && n == 8:
				fault(func() error { return killMySQL(ctx, e) })
			case faults:
				fault(func() error {
					if err := e.rs.Restart(ctx); err != nil {
						return err
					}
					return everysec()
				})
			}
		}
	}()

	// Buyers: 8 at once until the schedule ends.
	var buyers []*buyer
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-schedDone:
					return
				default:
				}
				b := &buyer{shop: shops[rnd(len(shops))], id: fmt.Sprintf("b%d", next.Add(1)), qty: int64(1 + rnd(2))}
				mu.Lock()
				buyers = append(buyers, b)
				mu.Unlock()
				propertyBuy(ctx, e, b, rnd)
			}
		})
	}
	wg.Wait()
	<-schedDone
	// At rest: every hold due (the longest TTL is 300 ms), swept, followed.
	time.Sleep(400 * time.Millisecond)
	for i := 0; ; i++ {
		if _, err := e.r.ExpireDue(ctx); err == nil {
			break
		} else if i == 50 {
			t.Fatalf("final expiry: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // Redis may be loading after a crash
	}
	cancel()
	<-runDone
	ctx = context.Background()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("stock %d per shop, %d buyers, %d promotions, %d fault windows, mismatches %v", stock, len(buyers), len(promotions),
		len(windows), e.r.Mismatches())
	// Every reservation's truth, by the test's own queries.
	sold := map[uint64]int64{}
	db := e.db.Open(t)
	rdb := redis.NewClient(&redis.Options{Addr: e.rs.Addr})
	defer rdb.Close()
	for _, b := range buyers {
		if !b.reserved && !b.unknown {
			continue
		}
		var truth string
		err := db.QueryRowContext(ctx, `SELECT truth FROM migration_routes WHERE shop_id = ? AND reservation_id = ?`, b.shop, b.id).Scan(&truth)
		if err != nil && !errors.Is(err, errNoRows) {
			t.Fatal(err)
		}
		var state string
		if truth == "mysql" {
			if err := db.QueryRowContext(ctx, `SELECT state FROM inventory_reservations WHERE shop_id = ? AND reservation_id = ?`,
				b.shop, b.id).Scan(&state); err != nil && !errors.Is(err, errNoRows) {
				t.Fatal(err)
			}
		} else {
			state, err = rdb.HGet(ctx, "holdtime:{"+itoa(b.shop)+"}:res:"+b.id, "_state").Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
		}
		if state == "claimed" {
			sold[b.shop] += b.qty
		}
		switch {
		case b.unknown:
			if state == "held" || state == "claiming" {
				t.Errorf("%d/%s (outcome unknown to its customer, truth %s): %s at rest", b.shop, b.id, truth, state)
			}
		case b.paid && state != "claimed" && !(truth != "mysql" && state == "" && faults):
			t.Errorf("%d/%s paid, its truth (%s) says %q", b.shop, b.id, truth, state)
		case !b.paid && state == "claimed":
			t.Errorf("%d/%s never paid, its truth (%s) says claimed", b.shop, b.id, truth)
		case state == "held" || state == "claiming":
			t.Errorf("%d/%s: its truth (%s) still holds it at rest (%s)", b.shop, b.id, truth, state)
		}
	}
	for _, s := range shops {
		if sold[s] > stock {
			t.Errorf("shop %d: %d units sold of %d stocked: sold twice across the two systems", s, sold[s], stock)
		}
	}
	// Mismatches only where a fault was.
	explained := map[string]bool{}
	faulted := map[uint64]bool{}
	for _, m := range e.seen {
		key := fmt.Sprintf("%d/%s", m.ShopID, m.ReservationID)
		in := explained[key]
		for _, w := range windows {
			in = in || (!m.At.Before(w.from) && m.At.Before(w.to.Add(2*time.Second)))
		}
		if !in {
			t.Errorf("mismatch outside any fault window: %+v", m)
		}
		explained[key] = true
		faulted[m.ShopID] = true
	}
	if !faults && len(e.seen) > 0 {
		t.Errorf("%d mismatches in a run without faults: %+v", len(e.seen), e.seen)
	}
	// At rest both systems agree on every shop no fault touched (and on
	// every shop once repaired).
	for _, s := range shops {
		ra, rh, ma, mh := e.figuresCtx(ctx, s)
		if (ra != ma || rh != 0 || mh != 0) && !faulted[s] && e.r.Stage(s) != StageRedis {
			t.Errorf("shop %d (%s) at rest: redis %d available %d held, mysql %d/%d", s, e.r.Stage(s), ra, rh, ma, mh)
		}
		if e.r.Stage(s) == StageRedis {
			continue // not shadowed: MySQL is allowed to be behind
		}
		rep, err := e.r.Repair(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range rep.Items {
			if d.Redis.Available != d.MySQL.Available {
				t.Errorf("shop %d after repair: %s", s, rep.Drift())
			}
		}
	}
}

// propertyBuy is one buyer: reserve, then claim (some right at the hold's
// deadline), release, or abandon. Calls that fail without an answer are
// retried with the same id, as a customer's client would.
func propertyBuy(ctx context.Context, e *env, b *buyer, rnd func(int) int) {
	ttl := time.Duration(100+rnd(200)) * time.Millisecond
	atDeadline := rnd(4) == 0
	if atDeadline {
		ttl = 30 * time.Millisecond
	}
	p := reservation.ReserveParams{ShopID: b.shop, ReservationID: b.id, TTL: ttl,
		Lines: []reservation.Line{{ItemID: 1, Quantity: b.qty, GroupIDs: []uint64{1}}}}
	var res *reservation.Reservation
	var err error
	for try := 0; try < 30; try++ {
		if res, err = e.r.Reserve(ctx, p); err == nil || errors.Is(err, reservation.ErrInsufficientStock) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	switch {
	case errors.Is(err, reservation.ErrInsufficientStock):
		return
	case err != nil:
		b.unknown = true
		return
	}
	b.reserved = true
	switch n := rnd(10); {
	case n < 2: // abandoned
		return
	case n < 3:
		for try := 0; try < 30; try++ {
			if err := e.r.Release(ctx, b.shop, b.id); isAnswer(err) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		return
	}
	if atDeadline {
		// Within a few ms of the deadline, either side.
		time.Sleep(time.Until(res.ExpiresAt.Add(time.Duration(rnd(7)-3) * time.Millisecond)))
	} else {
		time.Sleep(time.Duration(rnd(5)) * time.Millisecond)
	}
	for try := 0; try < 30; try++ {
		err := e.r.Claim(ctx, b.shop, b.id)
		if err == nil {
			b.paid = true
			return
		}
		if isAnswer(err) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killMySQL KILLs every connection to the test's database.
func killMySQL(ctx context.Context, e *env) error {
	admin := e.db.Target.Admin()
	rows, err := admin.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()`, e.db.Name)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		admin.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
	}
	return rows.Err()
}

var errNoRows = sql.ErrNoRows
