package migration

import (
	"cmp"
	"context"
	"database/sql"
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

// Plan admits shops to a stage: every shop of the allow-list, and the
// lowest-volume Percent of Config.ShopsByVolume.
type Plan struct {
	Shops   []uint64
	Percent float64 // 0 to 100
}

// Rollout is the stage of every shop: StageMySQL for the shops MySQL
// admits, else StageShadow for those Shadow admits, else StageRedis.
type Rollout struct {
	Shadow Plan
	MySQL  Plan
}

// Config configures a Router. Redis, Engine and DB are required.
type Config struct {
	Redis  *redisstock.Store
	Engine *reservation.Engine
	// DB is the engine's database (the route table lives there).
	DB *sql.DB
	// ShopsByVolume ranks shops, lowest volume first: a Plan's Percent
	// takes from its start. Shops not in it are admitted by allow-lists
	// only.
	ShopsByVolume []uint64
	// Rollout is the initial rollout (every shop on Redis by default).
	Rollout Rollout
	// ShadowTimeout bounds a shadow call: the customer's call takes at
	// most this much longer than the source of truth's. Default 50 ms.
	ShadowTimeout time.Duration
	// Logger receives mismatch samples: at most one per kind per
	// SampleInterval. Default: no samples.
	Logger         *slog.Logger
	SampleInterval time.Duration // default 1 s
	// OnMismatch, when set, is called for every mismatch (tests, audits).
	OnMismatch func(Mismatch)
	// MeterProvider receives the metrics (see the package documentation).
	MeterProvider metric.MeterProvider
}

// Kind is a kind of mismatch between the source of truth and the shadow.
type Kind string

const (
	// KindShadowRefused: the truth reserved, the shadow refused (sold out).
	KindShadowRefused Kind = "shadow_refused"
	// KindTruthRefused: the truth refused, the shadow reserved (and the
	// shadow's hold was released again).
	KindTruthRefused Kind = "truth_refused"
	// KindLines: both reserved, different quantities or location groups.
	KindLines Kind = "lines"
	// KindShadowError: the shadow failed or timed out (the customer's call
	// went on).
	KindShadowError Kind = "shadow_error"
	// KindClaim, KindRelease: the truth and the shadow ended a hold
	// differently (one claimed and the other found it expired, missing...).
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

// Router sends every call to the system of its shop's stage. It is safe for
// concurrent use.
type Router struct {
	cfg     Config
	rollout atomic.Pointer[rolloutState]
	kill    atomic.Bool
	metrics *metrics

	everMoved sync.Map // shop -> true: left StageRedis since New

	mu         sync.Mutex
	lastSample map[Kind]time.Time
	mismatches map[Kind]int64
}

// rolloutState is a Rollout resolved to sets.
type rolloutState struct {
	r      Rollout
	shadow map[uint64]bool
	mysql  map[uint64]bool
}

// New validates cfg and returns a Router.
func New(cfg Config) (*Router, error) {
	if cfg.Redis == nil || cfg.Engine == nil || cfg.DB == nil {
		return nil, errors.New("migration: Config.Redis, Config.Engine and Config.DB are required")
	}
	cfg.ShadowTimeout = cmp.Or(cfg.ShadowTimeout, 50*time.Millisecond)
	cfg.SampleInterval = cmp.Or(cfg.SampleInterval, time.Second)
	if cfg.ShadowTimeout < 0 || cfg.SampleInterval < 0 {
		return nil, errors.New("migration: ShadowTimeout and SampleInterval must not be negative")
	}
	r := &Router{cfg: cfg, lastSample: map[Kind]time.Time{}, mismatches: map[Kind]int64{}}
	if err := r.SetRollout(cfg.Rollout); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.MeterProvider, r)
	if err != nil {
		return nil, err
	}
	r.metrics = m
	return r, nil
}

// SetRollout changes the stage of shops at once (new reservations only:
// in-flight ones stay with the system that made them).
func (r *Router) SetRollout(ro Rollout) error {
	for _, p := range []Plan{ro.Shadow, ro.MySQL} {
		if p.Percent < 0 || p.Percent > 100 {
			return fmt.Errorf("migration: rollout percent %v must be within [0, 100]", p.Percent)
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
	r.rollout.Store(&rolloutState{r: ro, shadow: admit(ro.Shadow), mysql: admit(ro.MySQL)})
	return nil
}

// Rollout returns the current rollout.
func (r *Router) Rollout() Rollout { return r.rollout.Load().r }

// SetKillSwitch turns the kill switch on (new reservations of StageMySQL
// shops go back to Redis as the source of truth) or off.
func (r *Router) SetKillSwitch(on bool) { r.kill.Store(on) }

// KillSwitch reports whether the kill switch is on.
func (r *Router) KillSwitch() bool { return r.kill.Load() }

// Stage is the stage new reservations of shop get now, the kill switch
// applied.
func (r *Router) Stage(shop uint64) Stage {
	st := r.rollout.Load()
	switch {
	case st.mysql[shop] && !r.kill.Load():
		return StageMySQL
	case st.mysql[shop], st.shadow[shop]:
		return StageShadow
	}
	return StageRedis
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

const routeDDL = `CREATE TABLE IF NOT EXISTS migration_routes (
    shop_id        BIGINT UNSIGNED NOT NULL,
    reservation_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    truth          VARCHAR(5) CHARACTER SET ascii NOT NULL,
    created_at     DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (shop_id, reservation_id),
    KEY migration_routes_created (created_at)
) ENGINE=InnoDB`

// Migrate creates both systems' tables and the route table.
func (r *Router) Migrate(ctx context.Context) error {
	if err := r.cfg.Engine.Migrate(ctx); err != nil {
		return err
	}
	if err := r.cfg.Redis.Migrate(ctx); err != nil {
		return err
	}
	if _, err := r.cfg.DB.ExecContext(conntag.WithTag(ctx, r.cfg.Engine.Config().Tags.Stock), routeDDL); err != nil {
		return fmt.Errorf("migration: create migration_routes: %w", err)
	}
	return nil
}

// Receive stocks an item/group in both systems (the engine first, then
// Redis; a failure of either is returned).
func (r *Router) Receive(ctx context.Context, k reservation.ItemKey, quantity int64) error {
	if err := r.cfg.Engine.Receive(ctx, reservation.StockParams{ItemKey: k, Quantity: quantity}); err != nil {
		return err
	}
	if _, err := r.cfg.Engine.Refill(ctx, k); err != nil {
		return err
	}
	return r.cfg.Redis.Receive(ctx, k, quantity)
}
