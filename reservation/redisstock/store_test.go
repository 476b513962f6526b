package redisstock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	s     *Store
	redis *testenv.Redis
	key   reservation.ItemKey
}

// setup starts a Redis and a database of the test's own, and stocks one
// item/group with stock units.
func setup(t *testing.T, cfg Config, p testenv.Persistence, stock int64) env {
	t.Helper()
	r := testenv.NewRedis(t, testenv.RedisOptions{Persistence: p})
	db := testenv.NewDatabase(t).Open(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	cfg.Redis, cfg.DB = rdb, db
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	k := reservation.ItemKey{ShopID: 7, ItemID: 1, GroupID: 1}
	if stock > 0 {
		if err := s.Receive(ctx, k, stock); err != nil {
			t.Fatal(err)
		}
	}
	return env{s: s, redis: r, key: k}
}

func cart(id string, qty int64, groups ...uint64) reservation.ReserveParams {
	if len(groups) == 0 {
		groups = []uint64{1}
	}
	return reservation.ReserveParams{ShopID: 7, ReservationID: id, Lines: []reservation.Line{{ItemID: 1, Quantity: qty, GroupIDs: groups}}}
}

func books(t *testing.T, e env, k reservation.ItemKey) Books {
	t.Helper()
	b, err := e.s.Books(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReserveClaimReleaseExpire(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	clock := func() time.Time { return now }
	e := setup(t, Config{Now: clock}, testenv.PersistenceNone, 5)

	r, err := e.s.Reserve(ctx, cart("a", 2))
	if err != nil || r.State != reservation.StateHeld || len(r.Lines) != 1 || r.Lines[0].Quantity != 2 {
		t.Fatalf("reserve a: %+v, %v", r, err)
	}
	// A retry returns the first answer and takes nothing more.
	if _, err := e.s.Reserve(ctx, cart("a", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Reserve(ctx, cart("b", 4)); !errors.Is(err, reservation.ErrInsufficientStock) {
		t.Fatalf("reserve 4 of 3 left: %v, want ErrInsufficientStock", err)
	}
	if got := books(t, e, e.key); got != (Books{Available: 3, Held: 2, OnHand: 5}) {
		t.Fatalf("books after reserve: %+v", got)
	}
	if err := e.s.Claim(ctx, 7, "a"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Claim(ctx, 7, "a"); err != nil {
		t.Fatalf("claim again: %v, want nil (idempotent)", err)
	}
	if got := books(t, e, e.key); got != (Books{Available: 3, Held: 0, OnHand: 3, Claimed: 2}) {
		t.Fatalf("books after claim: %+v", got)
	}
	if _, err := e.s.Reserve(ctx, cart("c", 1)); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Release(ctx, 7, "c"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Claim(ctx, 7, "c"); !errors.Is(err, reservation.ErrReleased) {
		t.Fatalf("claim released: %v", err)
	}
	if err := e.s.Release(ctx, 7, "a"); !errors.Is(err, reservation.ErrClaimed) {
		t.Fatalf("release claimed: %v", err)
	}
	p := cart("d", 3)
	p.TTL = time.Minute
	if _, err := e.s.Reserve(ctx, p); err != nil {
		t.Fatal(err)
	}
	if n, err := e.s.ExpireDue(ctx); err != nil || n != 0 {
		t.Fatalf("expire before the deadline: %d, %v", n, err)
	}
	now = now.Add(time.Minute)
	if n, err := e.s.ExpireDue(ctx); err != nil || n != 1 {
		t.Fatalf("expire at the deadline: %d, %v; want 1", n, err)
	}
	if err := e.s.Claim(ctx, 7, "d"); !errors.Is(err, reservation.ErrExpired) {
		t.Fatalf("claim expired: %v", err)
	}
	if err := e.s.Claim(ctx, 7, "nope"); !errors.Is(err, reservation.ErrNotFound) {
		t.Fatalf("claim unknown: %v", err)
	}
	if got := books(t, e, e.key); got != (Books{Available: 3, Held: 0, OnHand: 3, Claimed: 2}) {
		t.Fatalf("books at the end: %+v", got)
	}
}

// A line takes its first group's units, then the next group's.
func TestReserveSplitsOverGroups(t *testing.T) {
	ctx := context.Background()
	e := setup(t, Config{}, testenv.PersistenceNone, 2)
	k2 := reservation.ItemKey{ShopID: 7, ItemID: 1, GroupID: 2}
	if err := e.s.Receive(ctx, k2, 5); err != nil {
		t.Fatal(err)
	}
	r, err := e.s.Reserve(ctx, cart("x", 4, 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]int64{}
	for _, l := range r.Lines {
		got[l.GroupID] = l.Quantity
	}
	if got[1] != 2 || got[2] != 2 {
		t.Fatalf("lines %+v: want 2 from group 1 and 2 from group 2", r.Lines)
	}
	if err := e.s.Claim(ctx, 7, "x"); err != nil {
		t.Fatal(err)
	}
	if b1, b2 := books(t, e, e.key), books(t, e, k2); b1.Claimed != 2 || b2.Claimed != 2 || b2.Available != 3 {
		t.Fatalf("books %+v %+v", b1, b2)
	}
}

var errKilled = errors.New("killed between the halves of a claim")

// A claim killed between its halves and driven again: ledger-first counts
// the sale twice in the ledger (undersold), redis-first never (oversold).
func TestKilledClaim(t *testing.T) {
	for _, tc := range []struct {
		order       ClaimOrder
		wantClaimed int64 // the ledger's claimed after one sale of 1 unit
	}{
		{ClaimLedgerFirst, 2},
		{ClaimRedisFirst, 0},
	} {
		t.Run(string(tc.order), func(t *testing.T) {
			ctx := context.Background()
			kills := 1
			e := setup(t, Config{ClaimOrder: tc.order, BetweenClaimHalves: func(context.Context, uint64, string) error {
				if kills > 0 {
					kills--
					return errKilled
				}
				return nil
			}}, testenv.PersistenceNone, 3)
			if _, err := e.s.Reserve(ctx, cart("a", 1)); err != nil {
				t.Fatal(err)
			}
			if err := e.s.Claim(ctx, 7, "a"); !errors.Is(err, errKilled) {
				t.Fatalf("first claim: %v, want the kill", err)
			}
			if err := e.s.Claim(ctx, 7, "a"); err != nil {
				t.Fatalf("claim driven again: %v", err)
			}
			b := books(t, e, e.key)
			if b.Claimed != tc.wantClaimed || b.Available != 2 || b.Held != 0 {
				t.Fatalf("books %+v: one unit sold, want the ledger to say claimed=%d and Redis 2 available, 0 held",
					b, tc.wantClaimed)
			}
		})
	}
}

// A Redis crash with snapshots only brings the counter back to the last
// snapshot: the units sold since are sold again.
func TestRestartFromSnapshotOversells(t *testing.T) {
	ctx := context.Background()
	e := setup(t, Config{}, testenv.PersistenceSnapshot, 3)
	if err := e.redis.Save(ctx); err != nil {
		t.Fatal(err)
	}
	sell := func(prefix string) (sold int64) {
		for i := 0; ; i++ {
			id := fmt.Sprintf("%s%d", prefix, i)
			_, err := e.s.Reserve(ctx, cart(id, 1))
			if errors.Is(err, reservation.ErrInsufficientStock) {
				return sold
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := e.s.Claim(ctx, 7, id); err != nil {
				t.Fatal(err)
			}
			sold++
		}
	}
	before := sell("a")
	if err := e.redis.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	after := sell("b")
	b := books(t, e, e.key)
	if before != 3 || after != 3 || b.Claimed != 6 || b.OnHand != -3 {
		t.Fatalf("sold %d before and %d after the restart, books %+v: want 3+3 of 3 stocked (claimed 6, on hand -3)", before, after, b)
	}
}

// Every Redis command is timed under its context's tag; a script by name.
func TestCommandMetricsPerTag(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	e := setup(t, Config{MeterProvider: mp}, testenv.PersistenceNone, 3)
	if _, err := e.s.Reserve(ctx, cart("a", 1)); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Claim(conntag.WithTag(ctx, "ignored"), 7, "a"); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "holdtime.redis.command.duration" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				tag, _ := dp.Attributes.Value("conn_tag")
				cmd, _ := dp.Attributes.Value("command")
				got[tag.AsString()+" "+cmd.AsString()] += dp.Count
			}
		}
	}
	for _, want := range []string{"inventory_stock incrby", "inventory_reserve script:reserve",
		"inventory_claim script:begin_claim", "inventory_claim script:finish_claim"} {
		if got[want] == 0 {
			t.Errorf("no %q command recorded; got %v", want, got)
		}
	}
}

// A connection KILLed while idle in the pool fails the ledger half's first
// statement: the half runs again on a fresh connection instead of failing
// the claim (issue 21, cause 5).
func TestLedgerHalfSurvivesKilledIdleConnection(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t, testenv.RedisOptions{})
	d := testenv.NewDatabase(t)
	mc := d.Config()
	mc.InterpolateParams = true // as flashsale.OpenDB: the UPDATE is the first packet sent on the dead connection
	db, err := conntag.Open("mysql", mc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxIdleConns(4)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	s, err := New(Config{Redis: rdb, DB: db})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	k := reservation.ItemKey{ShopID: 7, ItemID: 1, GroupID: 1}
	if err := s.Receive(ctx, k, 5); err != nil {
		t.Fatal(err)
	}
	admin := d.Target.Admin()
	for i := range 3 {
		id := fmt.Sprint("k", i)
		if _, err := s.Reserve(ctx, cart(id, 1)); err != nil {
			t.Fatal(err)
		}
		// Every idle connection of the pool dies.
		rows, err := admin.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ?`, d.Name)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var n int64
			rows.Scan(&n)
			ids = append(ids, n)
		}
		rows.Close()
		if len(ids) == 0 {
			t.Fatal("no idle connection to kill")
		}
		for _, n := range ids {
			admin.ExecContext(ctx, fmt.Sprintf("KILL %d", n))
		}
		if err := s.Claim(ctx, 7, id); err != nil {
			t.Fatalf("claim %d after its idle connections were killed: %v", i, err)
		}
	}
	if b := books(t, env{s: s}, k); b.Claimed != 3 || b.OnHand != 2 || b.Held != 0 {
		t.Fatalf("books %+v: want 3 claimed once each", b)
	}
}
