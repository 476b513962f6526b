package migration

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/redisstock"
	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	r      *Router
	rs     *testenv.Redis
	db     *testenv.Database
	engine *reservation.Engine
	store  *redisstock.Store
	mu     sync.Mutex
	seen   []Mismatch
}

// setup builds a Router on a Redis and a database of the test's own and
// stocks item 1 (group 1) of every shop in shops with stock units.
func setup(t *testing.T, cfg Config, p testenv.Persistence, stock int64, shops ...uint64) *env {
	t.Helper()
	return setupStore(t, cfg, nil, p, stock, shops...)
}

// setupStore is setup with a change to the Redis design's configuration.
func setupStore(t *testing.T, cfg Config, store func(*redisstock.Config), p testenv.Persistence, stock int64, shops ...uint64) *env {
	t.Helper()
	e := &env{rs: testenv.NewRedis(t, testenv.RedisOptions{Persistence: p}), db: testenv.NewDatabase(t)}
	mc := e.db.Config()
	mc.InterpolateParams = true
	db, err := conntag.Open("mysql", mc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(40)
	t.Cleanup(func() { db.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: e.rs.Addr, MaxRetries: -1, PoolSize: 40})
	t.Cleanup(func() { rdb.Close() })
	sc := redisstock.Config{Redis: rdb, DB: db, ExpiryInterval: 10 * time.Millisecond}
	if store != nil {
		store(&sc)
	}
	if e.store, err = redisstock.New(sc); err != nil {
		t.Fatal(err)
	}
	if e.engine, err = reservation.New(db, reservation.Config{PoolSize: 50, ExpiryInterval: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	cfg.Redis, cfg.Engine, cfg.DB = e.store, e.engine, db
	cfg.ShadowTimeout = cmpOr(cfg.ShadowTimeout, 10*time.Second)
	own := cfg.OnMismatch
	cfg.OnMismatch = func(m Mismatch) {
		e.mu.Lock()
		e.seen = append(e.seen, m)
		e.mu.Unlock()
		if own != nil {
			own(m)
		}
	}
	if e.r, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.r.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range shops {
		if err := e.r.Receive(ctx, reservation.ItemKey{ShopID: s, ItemID: 1, GroupID: 1}, stock); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func cart(shop uint64, id string) reservation.ReserveParams {
	return reservation.ReserveParams{ShopID: shop, ReservationID: id,
		Lines: []reservation.Line{{ItemID: 1, Quantity: 1, GroupIDs: []uint64{1}}}}
}

func TestRolloutStagesAndKillSwitch(t *testing.T) {
	ctx := context.Background()
	e := setup(t, Config{ShopsByVolume: []uint64{10, 20, 30, 40}, QuietPeriod: -1}, testenv.PersistenceNone, 0)
	if err := e.r.SetRollout(ctx, Rollout{Shadow: Plan{Percent: 75}, MySQL: Plan{Percent: 25, Shops: []uint64{99}}}); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]Stage{10: StageMySQL, 20: StageShadow, 30: StageShadow, 40: StageRedis, 99: StageMySQL, 7: StageRedis}
	for shop, st := range want {
		if got := e.r.Stage(shop); got != st {
			t.Errorf("stage of shop %d = %s, want %s", shop, got, st)
		}
	}
	srv := httptest.NewServer(e.r.Handler())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/killswitch?on=true", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !e.r.KillSwitch() || e.r.Stage(10) != StageShadow || e.r.Stage(99) != StageShadow {
		t.Fatalf("kill switch on: stages %s %s, want shadow (Redis the truth again)", e.r.Stage(10), e.r.Stage(99))
	}
	if err := e.r.SetKillSwitch(ctx, false, false); err != nil {
		t.Fatal(err)
	}
	if e.r.Stage(10) != StageMySQL {
		t.Fatal("kill switch off: shop 10 not back on MySQL")
	}
	resp, err = http.Post(srv.URL+"/killswitch?on=maybe", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad value: status %d", resp.StatusCode)
	}
	if err := e.r.SetRollout(ctx, Rollout{MySQL: Plan{Percent: 101}}); err == nil {
		t.Fatal("percent 101 accepted")
	}
}

// A claim or release goes to the system that made the reservation,
// whatever the stage and the kill switch say now.
func TestInFlightReservationsHonoured(t *testing.T) {
	ctx := context.Background()
	const shop = 5
	e := setup(t, Config{QuietPeriod: -1}, testenv.PersistenceNone, 10, shop)
	book := func() (redisClaimed, mysqlClaimed int64) {
		rb, err := e.store.Books(ctx, reservation.ItemKey{ShopID: shop, ItemID: 1, GroupID: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.db.Open(t).QueryRowContext(ctx, `SELECT claimed FROM inventory_ledger WHERE shop_id = ?`, shop).
			Scan(&mysqlClaimed); err != nil {
			t.Fatal(err)
		}
		return rb.Claimed, mysqlClaimed
	}
	// Made on Redis alone, claimed after the shop moved to MySQL.
	if _, err := e.r.Reserve(ctx, cart(shop, "on-redis")); err != nil {
		t.Fatal(err)
	}
	if err := e.r.SetRollout(ctx, Rollout{MySQL: Plan{Shops: []uint64{shop}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Claim(ctx, shop, "on-redis"); err != nil {
		t.Fatal(err)
	}
	if r, m := book(); r != 1 || m != 1 {
		t.Fatalf("claimed redis %d, mysql %d: want the Redis reservation claimed in Redis, its truth, and in MySQL, "+
			"where the cutover carried the hold over", r, m)
	}
	if got, in, _ := e.r.Truth(ctx, shop, "on-redis"); got != BackendRedis || !in {
		t.Fatalf("carried-over reservation: truth %s, in MySQL %v", got, in)
	}
	// Made with MySQL the truth, claimed after the kill switch sent the shop back.
	if _, err := e.r.Reserve(ctx, cart(shop, "on-mysql")); err != nil {
		t.Fatal(err)
	}
	if got, in, err := e.r.Truth(ctx, shop, "on-mysql"); err != nil || got != BackendMySQL || !in {
		t.Fatalf("truth %s %v %v", got, in, err)
	}
	if err := e.r.SetKillSwitch(ctx, true, false); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Claim(ctx, shop, "on-mysql"); err != nil {
		t.Fatal(err)
	}
	if r, m := book(); r != 2 || m != 2 {
		t.Fatalf("claimed redis %d, mysql %d: want MySQL (truth) and Redis (shadow) to claim it", r, m)
	}
	// Made in shadow (kill switch on), released after the switch went off.
	if _, err := e.r.Reserve(ctx, cart(shop, "shadowed")); err != nil {
		t.Fatal(err)
	}
	if got, in, _ := e.r.Truth(ctx, shop, "shadowed"); got != BackendRedis || !in {
		t.Fatalf("shadowed reservation: truth %s, in MySQL %v", got, in)
	}
	if err := e.r.SetKillSwitch(ctx, false, false); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Release(ctx, shop, "shadowed"); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Claim(ctx, shop, "shadowed"); !errors.Is(err, reservation.ErrReleased) {
		t.Fatalf("claim after release: %v", err)
	}
	if n := len(e.seen); n != 0 {
		t.Fatalf("mismatches without a fault: %+v", e.seen)
	}
	// Routes outlive their holds, then go.
	if n, err := e.r.PruneRoutes(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("pruned %d routes younger than an hour, %v", n, err)
	}
	if n, err := e.r.PruneRoutes(ctx, 0); err != nil || n != 3 {
		t.Fatalf("pruned %d routes, %v: want the 3 of on-redis, on-mysql and shadowed", n, err)
	}
	if got, in, _ := e.r.Truth(ctx, shop, "on-mysql"); got != BackendRedis || in {
		t.Fatalf("after pruning: truth %s, in MySQL %v", got, in)
	}
}

// A shadow that hangs (its tables locked) neither fails the customer's
// reservation nor delays it beyond ShadowTimeout; it is counted.
func TestShadowNeverSlowsTheCustomer(t *testing.T) {
	ctx := context.Background()
	const shop, bound = 6, 200 * time.Millisecond
	var logged bytes.Buffer
	reader := sdkmetric.NewManualReader()
	e := setup(t, Config{ShadowTimeout: bound, Logger: slog.New(slog.NewTextHandler(&logged, nil)), SampleInterval: time.Hour,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}, testenv.PersistenceNone, 10, shop)
	if err := e.r.SetRollout(ctx, Rollout{Shadow: Plan{Shops: []uint64{shop}}}); err != nil {
		t.Fatal(err)
	}
	lockDB := e.db.Open(t)
	conn, err := lockDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "LOCK TABLES inventory_reservations WRITE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := e.r.Reserve(ctx, cart(shop, "c1"))
	took := time.Since(start)
	res2, err2 := e.r.Reserve(ctx, cart(shop, "c2"))
	conn.ExecContext(ctx, "UNLOCK TABLES")
	if err2 != nil || res2.State != reservation.StateHeld {
		t.Fatalf("second reservation: %+v, %v", res2, err2)
	}
	if err != nil || res.State != reservation.StateHeld {
		t.Fatalf("the customer's reservation failed with the shadow hung: %+v, %v", res, err)
	}
	// The bound plus the time for the driver to give up a cancelled query
	// on a loaded machine: far below "until the lock goes", which is never.
	if took > bound+2*time.Second {
		t.Fatalf("reserve took %v with ShadowTimeout %v", took, bound)
	}
	if got := e.r.Mismatches()[KindShadowError]; got != 2 {
		t.Fatalf("shadow errors counted %d, want 2: %+v", got, e.seen)
	}
	// Samples: one per kind per SampleInterval.
	if n := strings.Count(logged.String(), "migration mismatch"); n != 1 || !strings.Contains(logged.String(), "reservation=c1") {
		t.Fatalf("want one sample (c1) of two mismatches within SampleInterval, logged:\n%s", logged.String())
	}
	// Metrics: the truth's and the shadow's calls per stage and backend,
	// and the mismatches by kind.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					var parts []string
					for _, kv := range dp.Attributes.ToSlice() {
						parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
					}
					got[m.Name+" "+strings.Join(parts, ",")] += dp.Value
				}
			}
		}
	}
	for want, n := range map[string]int64{
		"holdtime.migration.operations backend=redis,operation=reserve,outcome=ok,role=truth,stage=shadow": 2,
		"holdtime.migration.mismatches kind=shadow_error,stage=shadow":                                     2,
	} {
		if got[want] != n {
			t.Errorf("%s = %d, want %d; got %v", want, got[want], n, got)
		}
	}
	// The shadow ran out of time; the driver may report that as the
	// deadline or as the connection it closed to stop the statement.
	shadowFailed := got["holdtime.migration.operations backend=mysql,operation=reserve,outcome=timeout,role=shadow,stage=shadow"] +
		got["holdtime.migration.operations backend=mysql,operation=reserve,outcome=error,role=shadow,stage=shadow"]
	if shadowFailed != 2 {
		t.Errorf("shadow reserves that timed out or failed: %d, want 2; got %v", shadowFailed, got)
	}
	if !strings.Contains(e.seen[0].Shadow, "timeout") && e.seen[0].Shadow != "error" {
		t.Fatalf("sample %+v", e.seen[0])
	}
}
