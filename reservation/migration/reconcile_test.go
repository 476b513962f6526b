package migration

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/testenv"
)

func key(shop uint64) reservation.ItemKey {
	return reservation.ItemKey{ShopID: shop, ItemID: 1, GroupID: 1}
}

// figures reads both systems' books of item 1 of a shop with queries of
// the test's own.
func (e *env) figures(t *testing.T, shop uint64) (redisAvail, redisHeld, mysqlAvail, mysqlHeld int64) {
	t.Helper()
	ra, rh, ma, mh, err := e.read(context.Background(), shop)
	if err != nil {
		t.Fatal(err)
	}
	return ra, rh, ma, mh
}

// figuresCtx is figures for another goroutine: -1 everywhere on an error.
func (e *env) figuresCtx(ctx context.Context, shop uint64) (redisAvail, redisHeld, mysqlAvail, mysqlHeld int64) {
	ra, rh, ma, mh, err := e.read(ctx, shop)
	if err != nil {
		return -1, -1, -1, -1
	}
	return ra, rh, ma, mh
}

func (e *env) read(ctx context.Context, shop uint64) (redisAvail, redisHeld, mysqlAvail, mysqlHeld int64, err error) {
	rdb := redis.NewClient(&redis.Options{Addr: e.rs.Addr})
	defer rdb.Close()
	for _, f := range []struct {
		key string
		p   *int64
	}{{"avail", &redisAvail}, {"held", &redisHeld}} {
		n, err := rdb.Get(ctx, "holdtime:{"+itoa(shop)+"}:"+f.key+":1:1").Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, 0, 0, 0, err
		}
		*f.p = n
	}
	err = e.r.cfg.DB.QueryRowContext(ctx, `SELECT l.on_hand - COALESCE((SELECT SUM(quantity) FROM inventory_reserved_quantities q
		WHERE q.shop_id = l.shop_id AND q.inventory_item_id = 1 AND q.inventory_group_id = 1), 0),
		COALESCE((SELECT SUM(quantity) FROM inventory_reserved_quantities q WHERE q.shop_id = l.shop_id), 0)
		FROM inventory_ledger l WHERE l.shop_id = ? AND l.inventory_item_id = 1 AND l.inventory_group_id = 1`, shop).
		Scan(&mysqlAvail, &mysqlHeld)
	return
}

func itoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// At the last unit the shadow takes what the truth decided, not what it
// would have decided itself: the refused buyer takes nothing, the granted
// one is recorded (issue 21, cause 1).
func TestShadowMirrorsTheTruthAtTheLastUnit(t *testing.T) {
	ctx := context.Background()
	const shop = 11
	e := setup(t, Config{QuietPeriod: -1}, testenv.PersistenceNone, 1, shop)
	if err := e.r.SetRollout(ctx, Rollout{Shadow: Plan{Shops: []uint64{shop}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Reserve(ctx, cart(shop, "granted")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Reserve(ctx, cart(shop, "refused")); !errors.Is(err, reservation.ErrInsufficientStock) {
		t.Fatalf("second buyer of the last unit: %v", err)
	}
	var ids []string
	rows, err := e.db.Open(t).QueryContext(ctx, `SELECT reservation_id FROM inventory_reserved_quantities WHERE shop_id = ?`, shop)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	if len(ids) != 1 || ids[0] != "granted" {
		t.Fatalf("MySQL holds %v: want the granted reservation only", ids)
	}
	if ra, rh, ma, mh := e.figures(t, shop); ra != 0 || rh != 1 || ma != 0 || mh != 1 {
		t.Fatalf("redis %d available %d held, mysql %d available %d held: want 0/1 in both", ra, rh, ma, mh)
	}
	if len(e.seen) != 0 {
		t.Fatalf("mismatches without a fault: %+v", e.seen)
	}
}

// A claim the truth answers ErrExpired never claims the shadow: the shadow
// gives the units back, as the truth did (issue 21, cause 2).
func TestExpiredTruthClaimNeverClaimsTheShadow(t *testing.T) {
	ctx := context.Background()
	const shop = 12
	e := setup(t, Config{QuietPeriod: -1}, testenv.PersistenceNone, 3, shop)
	if err := e.r.SetRollout(ctx, Rollout{MySQL: Plan{Shops: []uint64{shop}}}); err != nil {
		t.Fatal(err)
	}
	p := cart(shop, "late")
	p.TTL = 30 * time.Millisecond
	res, err := e.r.Reserve(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(res.ExpiresAt.Add(20 * time.Millisecond))) // past the deadline: the subject of the test
	if err := e.r.Claim(ctx, shop, "late"); !errors.Is(err, reservation.ErrExpired) {
		t.Fatalf("claim after the deadline: %v", err)
	}
	rb, err := e.store.Books(ctx, key(shop))
	if err != nil {
		t.Fatal(err)
	}
	if rb.Claimed != 0 || rb.Available != 3 || rb.Held != 0 {
		t.Fatalf("redis (the shadow) books %+v: want nothing claimed, 3 available", rb)
	}
	if st, err := e.store.Lookup(ctx, shop, "late"); err != nil || st.State != reservation.StateReleased {
		t.Fatalf("redis shadow hold: %+v, %v: want released with the truth's expiry", st, err)
	}
	if len(e.seen) != 0 {
		t.Fatalf("mismatches without a fault: %+v", e.seen)
	}
}

// Reconcile names a drift; Repair brings it to zero; the gate never
// promotes a drifted shop and holds one for its quiet period.
func TestReconcileRepairAndGate(t *testing.T) {
	ctx := context.Background()
	const shop = 13
	// The per-item drift gauge, on a registry of the test's own.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	e := setup(t, Config{QuietPeriod: -1, MeterProvider: mp}, testenv.PersistenceNone, 10, shop)
	if _, err := e.r.Reserve(ctx, cart(shop, "before-shadow")); err != nil {
		t.Fatal(err)
	}
	if err := e.r.SetRollout(ctx, Rollout{Shadow: Plan{Shops: []uint64{shop}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Reserve(ctx, cart(shop, "in-shadow")); err != nil {
		t.Fatal(err)
	}
	// The backfill carried the Redis-only hold over: both hold 2 of 10.
	if ra, rh, ma, mh := e.figures(t, shop); ra != 8 || rh != 2 || ma != 8 || mh != 2 {
		t.Fatalf("after backfill: redis %d/%d mysql %d/%d, want 8 available and 2 held in both", ra, rh, ma, mh)
	}
	rep, err := e.r.Reconcile(ctx, shop)
	if err != nil || rep.Drift() != "" {
		t.Fatalf("reconcile: %v, drift %q", err, rep.Drift())
	}
	if got := itemDriftSeries(t, reg); len(got) != 0 {
		t.Fatalf("item drift gauge without drift: %v", got)
	}
	// MySQL loses 3 units (a count correction made in one system only).
	if err := e.engine.Adjust(ctx, reservation.StockParams{ItemKey: key(shop), Quantity: -3}); err != nil {
		t.Fatal(err)
	}
	rep, err = e.r.Reconcile(ctx, shop)
	if err != nil || !strings.Contains(rep.Drift(), "available redis 8 mysql 5") {
		t.Fatalf("reconcile of a drifted shop: %v, drift %q", err, rep.Drift())
	}
	want := map[string]float64{"figure=available,group=1,item=1,shop=13": 3, "figure=held,group=1,item=1,shop=13": 0}
	if got := itemDriftSeries(t, reg); !maps.Equal(got, want) {
		t.Fatalf("item drift gauge: %v, want %v (redis minus mysql)", got, want)
	}
	// The gate refuses to promote it.
	if err := e.r.SetRollout(ctx, Rollout{MySQL: Plan{Shops: []uint64{shop}}}); err != nil {
		t.Fatal(err)
	}
	if st := e.r.Stage(shop); st != StageShadow || !strings.Contains(e.r.Gated()[shop], "drift") {
		t.Fatalf("drifted shop: stage %s, gated %q: want held in shadow for its drift", st, e.r.Gated()[shop])
	}
	rep, err = e.r.Repair(ctx, shop)
	if err != nil || rep.Drift() != "" {
		t.Fatalf("repair: %v, drift left %q", err, rep.Drift())
	}
	if got := itemDriftSeries(t, reg); len(got) != 0 {
		t.Fatalf("item drift gauge after repair: %v, want no drifted item", got)
	}
	if ra, rh, ma, mh := e.figures(t, shop); ra != 8 || rh != 2 || ma != 8 || mh != 2 {
		t.Fatalf("after repair: redis %d/%d mysql %d/%d", ra, rh, ma, mh)
	}
	// Repaired, it moves at the next application of the rollout.
	if err := e.r.SetRollout(ctx, Rollout{MySQL: Plan{Shops: []uint64{shop}}}); err != nil {
		t.Fatal(err)
	}
	if st := e.r.Stage(shop); st != StageMySQL {
		t.Fatalf("repaired shop stage %s, gated %q", st, e.r.Gated()[shop])
	}
	// Both holds end in both systems.
	for _, id := range []string{"before-shadow", "in-shadow"} {
		if err := e.r.Claim(ctx, shop, id); err != nil {
			t.Fatal(err)
		}
	}
	if ra, rh, ma, mh := e.figures(t, shop); ra != 8 || rh != 0 || ma != 8 || mh != 0 {
		t.Fatalf("after the claims: redis %d/%d mysql %d/%d", ra, rh, ma, mh)
	}
}

func TestGateWaitsForTheQuietPeriod(t *testing.T) {
	ctx := context.Background()
	const shop = 14
	e := setup(t, Config{QuietPeriod: time.Hour}, testenv.PersistenceNone, 5, shop)
	if err := e.r.SetRollout(ctx, Rollout{MySQL: Plan{Shops: []uint64{shop}}}); err != nil {
		t.Fatal(err)
	}
	if st := e.r.Stage(shop); st != StageShadow || !strings.Contains(e.r.Gated()[shop], "quiet period") {
		t.Fatalf("stage %s, gated %q: want shadow, held for the quiet period", st, e.r.Gated()[shop])
	}
	moves, err := e.r.DryRun(ctx, Rollout{MySQL: Plan{Shops: []uint64{shop, 15}}})
	if err != nil || len(moves) != 2 || moves[0].To != StageMySQL || moves[0].Gated == "" || moves[1].From != StageRedis {
		t.Fatalf("dry run: %+v, %v", moves, err)
	}
}

// The kill switch refuses to hand the truth back to a Redis that drifted,
// unless forced: then it repairs Redis first. Per shop as globally.
func TestKillSwitchRefusesADriftedRedis(t *testing.T) {
	ctx := context.Background()
	const shop, other = 16, 17
	e := setup(t, Config{QuietPeriod: -1}, testenv.PersistenceNone, 6, shop, other)
	if err := e.r.SetRollout(ctx, Rollout{MySQL: Plan{Shops: []uint64{shop, other}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Reserve(ctx, cart(shop, "a")); err != nil {
		t.Fatal(err)
	}
	// Redis, the shadow, loses its count of shop 16.
	if err := e.store.SetAvailable(ctx, key(shop), 1); err != nil {
		t.Fatal(err)
	}
	err := e.r.SetKillSwitch(ctx, true, false)
	if !errors.Is(err, ErrDrifted) || e.r.Stage(shop) != StageMySQL || e.r.Stage(other) != StageShadow {
		t.Fatalf("kill switch on: %v, stages %s %s: want shop 16 refused (on MySQL), 17 on Redis", err, e.r.Stage(shop), e.r.Stage(other))
	}
	if err := e.r.SetShopKillSwitch(ctx, shop, true, true); err != nil {
		t.Fatal(err)
	}
	if e.r.Stage(shop) != StageShadow {
		t.Fatalf("forced: stage %s", e.r.Stage(shop))
	}
	if ra, rh, ma, mh := e.figures(t, shop); ra != 5 || rh != 1 || ma != 5 || mh != 1 {
		t.Fatalf("forced: redis %d/%d mysql %d/%d: want Redis repaired to MySQL's 5 available, 1 held", ra, rh, ma, mh)
	}
	// The global switch off: shop 17 returns; 16's own switch keeps it.
	if err := e.r.SetKillSwitch(ctx, false, false); err != nil {
		t.Fatal(err)
	}
	if e.r.Stage(shop) != StageShadow || e.r.Stage(other) != StageMySQL {
		t.Fatalf("global off: stages %s %s", e.r.Stage(shop), e.r.Stage(other))
	}
	if err := e.r.Claim(ctx, shop, "a"); err != nil {
		t.Fatal(err)
	}
}

// A Router started later on the same database resumes the stages and the
// kill switches, and routes every in-flight reservation to its truth
// (issue 21, cause 4).
func TestRoutingSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	const shop = 18
	e := setup(t, Config{QuietPeriod: -1}, testenv.PersistenceNone, 4, shop)
	if err := e.r.SetRollout(ctx, Rollout{MySQL: Plan{Shops: []uint64{shop}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Reserve(ctx, cart(shop, "on-mysql")); err != nil {
		t.Fatal(err)
	}
	// Rolled back to Redis, then the process restarts with no rollout.
	if err := e.r.SetRollout(ctx, Rollout{}); err != nil {
		t.Fatal(err)
	}
	r2, err := New(Config{Redis: e.store, Engine: e.engine, DB: e.r.cfg.DB, QuietPeriod: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if got, in, err := r2.Truth(ctx, shop, "on-mysql"); err != nil || got != BackendMySQL || !in {
		t.Fatalf("after restart: truth %s, in MySQL %v, %v", got, in, err)
	}
	if err := r2.Claim(ctx, shop, "on-mysql"); err != nil {
		t.Fatal(err)
	}
	var claimed int64
	if err := e.db.Open(t).QueryRowContext(ctx, `SELECT claimed FROM inventory_ledger WHERE shop_id = ?`, shop).Scan(&claimed); err != nil || claimed != 1 {
		t.Fatalf("MySQL claimed %d, %v: want the claim in its truth", claimed, err)
	}
}

// Receive with an adjustment id applies once in both systems, however
// often it is repeated.
func TestReceiveOnceIsIdempotent(t *testing.T) {
	ctx := context.Background()
	const shop = 19
	e := setup(t, Config{}, testenv.PersistenceNone, 0)
	for range 3 {
		if err := e.r.ReceiveOnce(ctx, reservation.StockParams{ItemKey: key(shop), Quantity: 7, AdjustmentID: "po-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.r.ReceiveOnce(ctx, reservation.StockParams{ItemKey: key(shop), Quantity: 2, AdjustmentID: "po-2"}); err != nil {
		t.Fatal(err)
	}
	if ra, rh, ma, mh := e.figures(t, shop); ra != 9 || rh != 0 || ma != 9 || mh != 0 {
		t.Fatalf("redis %d/%d mysql %d/%d: want 9 available in both", ra, rh, ma, mh)
	}
}

// itemDriftSeries returns holdtime_migration_item_drift as gathered from
// reg: value by its labels (shop, item, group, figure).
func itemDriftSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "holdtime_migration_item_drift" {
			continue
		}
		if mf.GetType() != dto.MetricType_GAUGE {
			t.Fatalf("holdtime_migration_item_drift is a %v, want a gauge", mf.GetType())
		}
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "shop", "item", "group", "figure":
					parts = append(parts, l.GetName()+"="+l.GetValue())
				}
			}
			out[strings.Join(parts, ",")] = m.GetGauge().GetValue()
		}
	}
	return out
}
