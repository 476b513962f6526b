package migration

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/redisstock"
)

// Stage is where a shop is in the migration.
type Stage string

const (
	StageRedis  Stage = "redis"
	StageShadow Stage = "shadow"
	StageMySQL  Stage = "mysql"
)

// Backend names a system.
type Backend string

const (
	BackendRedis Backend = "redis"
	BackendMySQL Backend = "mysql"
)

// truthOf is the source of truth of new reservations in a stage.
func truthOf(s Stage) Backend {
	if s == StageMySQL {
		return BackendMySQL
	}
	return BackendRedis
}

// other is the other system.
func other(b Backend) Backend {
	if b == BackendMySQL {
		return BackendRedis
	}
	return BackendMySQL
}

// Plan admits shops to a stage: every shop of the allow-list, and the
// lowest-volume Percent of Config.ShopsByVolume.
type Plan struct {
	Shops   []uint64 `json:"shops,omitempty"`
	Percent float64  `json:"percent,omitempty"` // 0 to 100
}

// Rollout is the stage every shop should be in: StageMySQL for the shops
// MySQL admits, else StageShadow for those Shadow admits, else StageRedis.
// The gate and the kill switches decide when a shop actually gets there.
type Rollout struct {
	Shadow Plan `json:"shadow"`
	MySQL  Plan `json:"mysql"`
}

// Config configures a Router. Redis, Engine and DB are required.
type Config struct {
	Redis  *redisstock.Store
	Engine *reservation.Engine
	// DB is the engine's database (the route and shop tables live there).
	DB *sql.DB
	// ShopsByVolume ranks shops, lowest volume first: a Plan's Percent
	// takes from its start. Shops not in it are admitted by allow-lists
	// only.
	ShopsByVolume []uint64
	// Rollout is the rollout Migrate applies when none was saved by an
	// earlier Router on this database (every shop on Redis by default).
	Rollout Rollout
	// ShadowTimeout bounds a shadow call: the customer's call takes at
	// most this much longer than the source of truth's. Default 100 ms (see
	// the package documentation for the measurement behind it).
	ShadowTimeout time.Duration
	// ShadowGrace is how much longer a shadow hold lasts than its truth's
	// hold. The shadow's expiry follows the truth's (the router ends a
	// shadow hold once the truth's ended); its own sweeper ends it only
	// when that was missed (a fault), ShadowGrace after the truth's
	// deadline. Default 1 minute.
	ShadowGrace time.Duration
	// QuietPeriod is how long a shop stays in StageShadow without a
	// mismatch before the gate lets it move to StageMySQL (and it moves
	// only when Reconcile finds no drift then). Default 10 minutes;
	// negative: no wait (drift still blocks).
	QuietPeriod time.Duration
	// GateInterval is how often Run applies the rollout again, moving the
	// shops whose quiet period has passed. Default 1 s.
	GateInterval time.Duration
	// Logger receives mismatch samples (at most one per kind per
	// SampleInterval), refused cutovers and gated promotions. Default: none.
	Logger         *slog.Logger
	SampleInterval time.Duration // default 1 s
	// OnMismatch, when set, is called for every mismatch (tests, audits).
	OnMismatch func(Mismatch)
	// MeterProvider receives the metrics (see the package documentation).
	MeterProvider metric.MeterProvider

	// onCutover, when set (tests), runs at the end of every cutover, the
	// shop still fenced and the sweeps paused.
	onCutover func(shop uint64, from, to Stage)
}

// Kind is a kind of mismatch between the source of truth and the shadow.
type Kind string

const (
	// KindShadowShort: the truth granted a reservation and the shadow
	// could not record it (too few units: the shadow has drifted).
	KindShadowShort Kind = "shadow_short"
	// KindLines: the shadow recorded other lines than the truth granted
	// (a reservation id the shadow already knew).
	KindLines Kind = "lines"
	// KindShadowError: the shadow failed or timed out (the customer's call
	// went on), or, short, could not catch up with the truth's ended holds
	// in time.
	KindShadowError Kind = "shadow_error"
	// KindClaim, KindRelease: the shadow could not follow the truth's end
	// of a hold (it did not hold it any more, or never did).
	KindClaim   Kind = "claim"
	KindRelease Kind = "release"
)

// Mismatch is one difference between the source of truth and the shadow.
type Mismatch struct {
	Kind          Kind
	Stage         Stage
	ShopID        uint64
	ReservationID string
	At            time.Time
	Truth, Shadow string // what each said: "ok", or the error
}

// ErrDrifted is returned when a cutover would hand the source of truth to
// a system that has drifted from the current truth (see Reconcile); force
// repairs it first.
var ErrDrifted = errors.New("migration: the system that would become the source of truth has drifted")

// Router sends every call to the system of its shop's stage. It is safe for
// concurrent use. One Router per database serves a shop at a time: the
// fence that makes a cutover safe while checkout runs is in the process.
type Router struct {
	cfg     Config
	metrics *metrics

	applyMu sync.Mutex   // one rollout change (cutovers) at a time
	sweepMu sync.RWMutex // expiry sweeps read-lock; a cutover locks

	mu         sync.Mutex
	rollout    rolloutState
	kill       bool
	shops      map[uint64]*shop
	gated      map[uint64]string      // shops the gate holds in shadow, and why
	drifted    map[uint64]bool        // shops whose last reconcile found drift
	driftItems map[uint64][]ItemDrift // per shop, the drifted items of its last reconcile
	lastSample map[Kind]time.Time
	mismatches map[Kind]int64
}

// shop is one shop's routing state.
type shop struct {
	id uint64
	// fence: every call of the shop read-locks it for its whole duration
	// (the truth's call and the shadow's); a cutover locks it, so that it
	// sees both systems with no call of the shop in flight.
	fence        sync.RWMutex
	stage        atomic.Value // Stage
	everLeft     atomic.Bool  // has left StageRedis (persisted): its claims look up their route
	killed       atomic.Bool  // the shop's own kill switch
	shadowSince  atomic.Int64 // unix ns it (last) entered StageShadow
	lastMismatch atomic.Int64 // unix ns

	// Catching up in the reserve path: one catchUp of the shop at a time
	// (the first ends the holds, the next find little to do), and the
	// shadow records in flight, which a short shadow waits for.
	catchMu   sync.Mutex
	catching  chan struct{} // closed when the running catchUp ends; nil when none runs
	mirroring int           // reserves between the truth's grant and the shadow's record
	mirrored  chan struct{} // closed when one ends
}

func (s *shop) Stage() Stage { return s.stage.Load().(Stage) }

// rolloutState is a Rollout resolved to sets.
type rolloutState struct {
	r      Rollout
	shadow map[uint64]bool
	mysql  map[uint64]bool
}

// New validates cfg and returns a Router. Call Migrate before use: it
// creates the tables, loads the saved stages and applies the rollout.
func New(cfg Config) (*Router, error) {
	if cfg.Redis == nil || cfg.Engine == nil || cfg.DB == nil {
		return nil, errors.New("migration: Config.Redis, Config.Engine and Config.DB are required")
	}
	cfg.ShadowTimeout = cmp.Or(cfg.ShadowTimeout, 100*time.Millisecond)
	cfg.ShadowGrace = cmp.Or(cfg.ShadowGrace, time.Minute)
	cfg.QuietPeriod = cmp.Or(cfg.QuietPeriod, 10*time.Minute)
	cfg.GateInterval = cmp.Or(cfg.GateInterval, time.Second)
	cfg.SampleInterval = cmp.Or(cfg.SampleInterval, time.Second)
	if cfg.ShadowTimeout < 0 || cfg.SampleInterval < 0 || cfg.ShadowGrace < 0 || cfg.GateInterval < 0 {
		return nil, errors.New("migration: ShadowTimeout, ShadowGrace, GateInterval and SampleInterval must not be negative")
	}
	r := &Router{cfg: cfg, shops: map[uint64]*shop{}, gated: map[uint64]string{}, drifted: map[uint64]bool{},
		driftItems: map[uint64][]ItemDrift{},
		lastSample: map[Kind]time.Time{}, mismatches: map[Kind]int64{}}
	st, err := r.resolve(cfg.Rollout)
	if err != nil {
		return nil, err
	}
	r.rollout = st
	m, err := newMetrics(cfg.MeterProvider, r)
	if err != nil {
		return nil, err
	}
	r.metrics = m
	return r, nil
}

// resolve validates a rollout and resolves it to sets.
func (r *Router) resolve(ro Rollout) (rolloutState, error) {
	for _, p := range []Plan{ro.Shadow, ro.MySQL} {
		if p.Percent < 0 || p.Percent > 100 {
			return rolloutState{}, fmt.Errorf("migration: rollout percent %v must be within [0, 100]", p.Percent)
		}
	}
	admit := func(p Plan) map[uint64]bool {
		set := map[uint64]bool{}
		for _, s := range p.Shops {
			set[s] = true
		}
		n := int(float64(len(r.cfg.ShopsByVolume))*p.Percent/100 + 0.5)
		for _, s := range r.cfg.ShopsByVolume[:min(n, len(r.cfg.ShopsByVolume))] {
			set[s] = true
		}
		return set
	}
	ro.Shadow.Shops, ro.MySQL.Shops = slices.Clone(ro.Shadow.Shops), slices.Clone(ro.MySQL.Shops)
	return rolloutState{r: ro, shadow: admit(ro.Shadow), mysql: admit(ro.MySQL)}, nil
}

// shop returns the state of a shop (StageRedis until it moves).
func (r *Router) shop(id uint64) *shop {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.shops[id]
	if s == nil {
		s = &shop{id: id}
		s.stage.Store(StageRedis)
		r.shops[id] = s
	}
	return s
}

// SetRollout changes the stage shops should be in and moves them (new
// reservations only: in-flight ones end in the system that made them).
// Each move is a cutover (see the package documentation): a shop entering
// StageShadow is backfilled; one due for StageMySQL moves only through
// the gate (Gated says which wait); one leaving StageMySQL is refused while
// Redis has drifted. The rollout is saved: a Router started later on the
// same database resumes it.
func (r *Router) SetRollout(ctx context.Context, ro Rollout) error {
	st, err := r.resolve(ro)
	if err != nil {
		return err
	}
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	r.mu.Lock()
	r.rollout = st
	r.mu.Unlock()
	if err := r.saveSetting(ctx, "rollout", ro); err != nil {
		return err
	}
	return r.apply(ctx, false)
}

// Rollout returns the current rollout.
func (r *Router) Rollout() Rollout {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rollout.r
}

// SetKillSwitch turns the global kill switch on (every StageMySQL shop goes
// back to StageShadow: Redis the source of truth again, MySQL shadowed) or
// off (the shops go forward again, through the gate). Turning it on hands
// the truth back to Redis only where Redis has not drifted from MySQL;
// with force it repairs Redis first and hands it back anyway. The shops
// refused are named in the error (ErrDrifted); the others moved.
func (r *Router) SetKillSwitch(ctx context.Context, on, force bool) error {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	r.mu.Lock()
	r.kill = on
	r.mu.Unlock()
	if err := r.saveSetting(ctx, "kill_switch", on); err != nil {
		return err
	}
	return r.apply(ctx, force)
}

// SetShopKillSwitch is SetKillSwitch for one shop.
func (r *Router) SetShopKillSwitch(ctx context.Context, shopID uint64, on, force bool) error {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	s := r.shop(shopID)
	s.killed.Store(on)
	if err := r.saveShop(ctx, s); err != nil {
		return err
	}
	return r.apply(ctx, force)
}

// KillSwitch reports whether the global kill switch is on.
func (r *Router) KillSwitch() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kill
}

// KilledShops returns the shops whose own kill switch is on.
func (r *Router) KilledShops() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for id, s := range r.shops {
		if s.killed.Load() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Stage is the stage new reservations of shop get now.
func (r *Router) Stage(shopID uint64) Stage {
	r.mu.Lock()
	s := r.shops[shopID]
	r.mu.Unlock()
	if s == nil {
		return StageRedis
	}
	return s.Stage()
}

// Gated returns the shops the gate holds in StageShadow, with the reason.
func (r *Router) Gated() map[uint64]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[uint64]string, len(r.gated))
	for k, v := range r.gated {
		out[k] = v
	}
	return out
}

// Mismatches returns the mismatches counted so far, by kind.
func (r *Router) Mismatches() map[Kind]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[Kind]int64, len(r.mismatches))
	for k, v := range r.mismatches {
		out[k] = v
	}
	return out
}

// desired is the stage the rollout and the kill switches want for s.
func (r *Router) desired(s *shop) Stage {
	r.mu.Lock()
	st, kill := r.rollout, r.kill
	r.mu.Unlock()
	kill = kill || s.killed.Load()
	switch {
	case st.mysql[s.id] && !kill:
		return StageMySQL
	case st.mysql[s.id], st.shadow[s.id]:
		return StageShadow
	}
	return StageRedis
}

// apply moves every shop whose stage differs from its desired one (the
// caller holds applyMu).
func (r *Router) apply(ctx context.Context, force bool) error {
	r.mu.Lock()
	ids := slices.Clone(r.cfg.ShopsByVolume)
	for _, set := range []map[uint64]bool{r.rollout.shadow, r.rollout.mysql} {
		for id := range set {
			ids = append(ids, id)
		}
	}
	for id := range r.shops {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var errs []error
	for _, id := range ids {
		s := r.shop(id)
		if want := r.desired(s); want != s.Stage() {
			if err := r.cutover(ctx, s, want, force); err != nil {
				errs = append(errs, err)
			}
		} else {
			r.mu.Lock()
			delete(r.gated, id)
			r.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

const shopsDDL = `CREATE TABLE IF NOT EXISTS migration_shops (
    shop_id      BIGINT UNSIGNED NOT NULL,
    stage        VARCHAR(6) CHARACTER SET ascii NOT NULL,
    killed       TINYINT NOT NULL DEFAULT 0,
    shadow_since DATETIME(6) NULL,
    updated_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (shop_id)
) ENGINE=InnoDB`

const settingsDDL = `CREATE TABLE IF NOT EXISTS migration_settings (
    name  VARCHAR(32) CHARACTER SET ascii NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB`

const routeDDL = `CREATE TABLE IF NOT EXISTS migration_routes (
    shop_id        BIGINT UNSIGNED NOT NULL,
    reservation_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    truth          VARCHAR(5) CHARACTER SET ascii NOT NULL,
    created_at     DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (shop_id, reservation_id),
    KEY migration_routes_created (created_at)
) ENGINE=InnoDB`

const receiptsDDL = `CREATE TABLE IF NOT EXISTS migration_receipts (
    shop_id       BIGINT UNSIGNED NOT NULL,
    adjustment_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at    DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (shop_id, adjustment_id)
) ENGINE=InnoDB`

func (r *Router) stockCtx(ctx context.Context) context.Context {
	return conntag.WithTag(ctx, r.cfg.Engine.Config().Tags.Stock)
}

// Migrate creates both systems' tables and the router's (routes, shops,
// settings), loads the stages and kill switches a Router saved on this
// database before, and applies the saved rollout (Config.Rollout when
// none was saved). Call it once at start, before Run and checkout.
func (r *Router) Migrate(ctx context.Context) error {
	if err := r.Load(ctx); err != nil {
		return err
	}
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	return r.apply(ctx, false)
}

// Load creates the tables (both systems' and the router's) and loads the
// saved stages, kill switches and rollout, moving no shop: for a tool
// (reconcile, backfill) beside the app that serves checkout.
func (r *Router) Load(ctx context.Context) error {
	if err := r.cfg.Engine.Migrate(ctx); err != nil {
		return err
	}
	if err := r.cfg.Redis.Migrate(ctx); err != nil {
		return err
	}
	for _, ddl := range []string{routeDDL, shopsDDL, settingsDDL, receiptsDDL} {
		if _, err := r.cfg.DB.ExecContext(r.stockCtx(ctx), ddl); err != nil {
			return fmt.Errorf("migration: create tables: %w", err)
		}
	}
	return r.load(ctx)
}

// Shops returns the shops whose stage was saved (every shop that ever left
// StageRedis, or had its own kill switch flipped), in order.
func (r *Router) Shops() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for id, s := range r.shops {
		if s.everLeft.Load() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// load reads the saved shops and settings.
func (r *Router) load(ctx context.Context) error {
	ctx = r.stockCtx(ctx)
	// UNIX_TIMESTAMP: no need for parseTime in the caller's DSN.
	rows, err := r.cfg.DB.QueryContext(ctx, `SELECT shop_id, stage, killed, COALESCE(UNIX_TIMESTAMP(shadow_since), 0) FROM migration_shops`)
	if err != nil {
		return fmt.Errorf("migration: load shops: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uint64
		var stage string
		var killed bool
		var since float64
		if err := rows.Scan(&id, &stage, &killed, &since); err != nil {
			return fmt.Errorf("migration: load shops: %w", err)
		}
		s := r.shop(id)
		s.stage.Store(Stage(stage))
		s.everLeft.Store(true)
		s.killed.Store(killed)
		s.shadowSince.Store(int64(since * 1e9))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("migration: load shops: %w", err)
	}
	var ro Rollout
	if ok, err := r.loadSetting(ctx, "rollout", &ro); err != nil {
		return err
	} else if ok {
		st, err := r.resolve(ro)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.rollout = st
		r.mu.Unlock()
	}
	var kill bool
	if _, err := r.loadSetting(ctx, "kill_switch", &kill); err != nil {
		return err
	}
	r.mu.Lock()
	r.kill = kill
	r.mu.Unlock()
	return nil
}

func (r *Router) loadSetting(ctx context.Context, name string, v any) (bool, error) {
	var s string
	err := r.cfg.DB.QueryRowContext(r.stockCtx(ctx), `SELECT value FROM migration_settings WHERE name = ?`, name).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err == nil {
		err = json.Unmarshal([]byte(s), v)
	}
	if err != nil {
		return false, fmt.Errorf("migration: load setting %s: %w", name, err)
	}
	return true, nil
}

func (r *Router) saveSetting(ctx context.Context, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := r.execUpsert(r.stockCtx(ctx), `INSERT INTO migration_settings (name, value) VALUES (?, ?)
		ON DUPLICATE KEY UPDATE value = VALUES(value)`, name, string(b)); err != nil {
		return fmt.Errorf("migration: save setting %s: %w", name, err)
	}
	return nil
}

// execUpsert runs an idempotent upsert, again on a fresh connection when the
// pool handed out one that was dead (KILLed or dropped while idle: the
// driver reports "invalid connection" once it has written to it), so a
// stage or kill switch is never lost to a pooled connection's death. A
// repeat writes the same values.
func (r *Router) execUpsert(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var err error
	for range 3 {
		var res sql.Result
		if res, err = r.cfg.DB.ExecContext(ctx, query, args...); err == nil || !redisstock.DeadConn(err) || ctx.Err() != nil {
			return res, err
		}
	}
	return nil, err
}

// saveShop persists a shop's stage and kill switch.
func (r *Router) saveShop(ctx context.Context, s *shop) error {
	s.everLeft.Store(true) // a saved shop's claims look up their route
	var since any
	if ns := s.shadowSince.Load(); ns > 0 {
		since = float64(ns) / 1e9
	}
	if _, err := r.execUpsert(r.stockCtx(ctx), `INSERT INTO migration_shops (shop_id, stage, killed, shadow_since)
		VALUES (?, ?, ?, FROM_UNIXTIME(?)) ON DUPLICATE KEY UPDATE stage = VALUES(stage), killed = VALUES(killed), shadow_since = VALUES(shadow_since)`,
		s.id, string(s.Stage()), s.killed.Load(), since); err != nil {
		return fmt.Errorf("migration: save shop %d: %w", s.id, err)
	}
	return nil
}
