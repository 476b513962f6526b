package flashsale

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/migration"
	"github.com/holdtime/holdtime/reservation/redisstock"
)

// MigrationBackend sells through a migration.Router: each shop on the
// system of its stage. Its audit asks every reservation's source of truth
// whether it was claimed.
type MigrationBackend struct {
	R      *migration.Router
	Redis  *redisstock.Store
	Engine *reservation.Engine
	DB     *sql.DB // the engine's

	mu   sync.Mutex
	made map[uint64]map[string][]reservation.ReservedLine // shop -> reservation -> lines
}

// MigrationConfig assembles a migration for a sale (or a test of one).
type MigrationConfig struct {
	DB    *sql.DB       // the engine's and the Redis design's ledger (open it with OpenDB)
	Redis *redis.Client // a client of the Store's own
	// Shops are migration.Config.ShopsByVolume, lowest volume first.
	Shops []uint64
	// Rollout is the initial rollout (every shop on Redis by default).
	Rollout  migration.Rollout
	PoolSize int // the engine's (0: its default)
	// ShadowTimeout, ShadowGrace, QuietPeriod and GateInterval are the
	// router's (0: its defaults).
	ShadowTimeout, ShadowGrace, QuietPeriod, GateInterval time.Duration
	MeterProvider                                         metric.MeterProvider
	Logger                                                *slog.Logger
	OnMismatch                                            func(migration.Mismatch)
	// ExpiryInterval is both systems' sweep interval; default 10 ms (a
	// sale's abandoned holds are short).
	ExpiryInterval time.Duration
}

// NewMigration builds the Redis design, the engine and the router between
// them on cfg.DB and cfg.Redis, creates their tables (Router.Migrate), and
// returns the sale's backend.
func NewMigration(ctx context.Context, cfg MigrationConfig) (*MigrationBackend, error) {
	if cfg.DB == nil || cfg.Redis == nil {
		return nil, errors.New("flashsale: MigrationConfig.DB and MigrationConfig.Redis are required")
	}
	every := cfg.ExpiryInterval
	if every == 0 {
		every = 10 * time.Millisecond
	}
	store, err := redisstock.New(redisstock.Config{Redis: cfg.Redis, DB: cfg.DB, MeterProvider: cfg.MeterProvider, ExpiryInterval: every})
	if err != nil {
		return nil, err
	}
	engine, err := reservation.New(cfg.DB, reservation.Config{PoolSize: cfg.PoolSize, MeterProvider: cfg.MeterProvider, ExpiryInterval: every})
	if err != nil {
		return nil, err
	}
	router, err := migration.New(migration.Config{Redis: store, Engine: engine, DB: cfg.DB, ShopsByVolume: cfg.Shops,
		Rollout: cfg.Rollout, ShadowTimeout: cfg.ShadowTimeout, ShadowGrace: cfg.ShadowGrace, QuietPeriod: cfg.QuietPeriod,
		GateInterval: cfg.GateInterval, MeterProvider: cfg.MeterProvider, Logger: cfg.Logger, OnMismatch: cfg.OnMismatch})
	if err != nil {
		return nil, err
	}
	if err := router.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("flashsale: migration tables: %w", err)
	}
	return &MigrationBackend{R: router, Redis: store, Engine: engine, DB: cfg.DB}, nil
}

// MigrationPlan moves every shop through the stages during a sale, the
// lowest-volume shops first, and flips the kill switch on and off twice
// (forced: a sale's Redis may be behind MySQL by a shadow that timed out).
func MigrationPlan(r *migration.Router) []Event {
	stage := func(shadow, mysql float64) func(context.Context) error {
		return func(ctx context.Context) error {
			return r.SetRollout(ctx, migration.Rollout{Shadow: migration.Plan{Percent: shadow}, MySQL: migration.Plan{Percent: mysql}})
		}
	}
	kill := func(on bool) func(context.Context) error {
		return func(ctx context.Context) error { return r.SetKillSwitch(ctx, on, true) }
	}
	return []Event{
		{At: 0.1, Name: "shadow 40%", Do: stage(40, 0)},
		{At: 0.2, Name: "shadow 100%", Do: stage(100, 0)},
		{At: 0.3, Name: "mysql 20%", Do: stage(100, 20)},
		{At: 0.4, Name: "mysql 60%", Do: stage(100, 60)},
		{At: 0.45, Name: "kill switch on", Do: kill(true)},
		{At: 0.6, Name: "kill switch off", Do: kill(false)},
		{At: 0.7, Name: "mysql 100%", Do: stage(100, 100)},
		{At: 0.8, Name: "kill switch on", Do: kill(true)},
		{At: 0.9, Name: "kill switch off", Do: kill(false)},
	}
}

// Name implements Backend.
func (b *MigrationBackend) Name() string { return "migration" }

func (b *MigrationBackend) Receive(ctx context.Context, k reservation.ItemKey, q int64) error {
	return b.R.Receive(ctx, k, q)
}

func (b *MigrationBackend) Reserve(ctx context.Context, p reservation.ReserveParams) (*reservation.Reservation, error) {
	res, err := b.R.Reserve(ctx, p)
	if err == nil {
		b.mu.Lock()
		if b.made == nil {
			b.made = map[uint64]map[string][]reservation.ReservedLine{}
		}
		if b.made[p.ShopID] == nil {
			b.made[p.ShopID] = map[string][]reservation.ReservedLine{}
		}
		b.made[p.ShopID][p.ReservationID] = res.Lines
		b.mu.Unlock()
	}
	return res, err
}

// Claim implements Backend. A killed claim dies after the source of truth
// answered and before the shadow was told (the router's two halves): the
// sale drives it again.
func (b *MigrationBackend) Claim(ctx context.Context, shop uint64, id string) error {
	err := b.R.Claim(ctx, shop, id)
	if err == nil && Killed(ctx) {
		return ErrKilled
	}
	return err
}

func (b *MigrationBackend) ExpireDue(ctx context.Context) (int, error) { return b.R.ExpireDue(ctx) }
func (b *MigrationBackend) Run(ctx context.Context) error              { return b.R.Run(ctx) }

// Counters are the router's mismatches by kind.
func (b *MigrationBackend) Counters() map[string]int64 {
	out := map[string]int64{}
	for k, v := range b.R.Mismatches() {
		out[string(k)] = v
	}
	return out
}

// Sellable asks the system new reservations of the shop go to now.
func (b *MigrationBackend) Sellable(ctx context.Context, k reservation.ItemKey) (int64, int64, error) {
	if b.R.Stage(k.ShopID) == migration.StageMySQL {
		return EngineBackend(b.Engine, b.DB).Sellable(ctx, k)
	}
	bk, err := b.Redis.Books(ctx, k)
	return bk.Available, bk.Held, err
}

// Audit counts, per item/group, the units of every reservation its source
// of truth says it claimed (Claimed), and as leaked the engine's leaks plus
// the units of reservations their source of truth still holds at rest. (A
// shadow's stuck hold is not the truth's: the mismatch counts it.)
func (b *MigrationBackend) Audit(ctx context.Context, k reservation.ItemKey) (Books, error) {
	ctx = conntag.WithTag(ctx, auditTag)
	eb, err := Audit(ctx, b.DB, b.Engine.Config().Strategy, k)
	if err != nil {
		return Books{}, err
	}
	rb, err := b.Redis.Books(ctx, k)
	if err != nil {
		return Books{}, err
	}
	b.mu.Lock()
	made := b.made[k.ShopID]
	ids := make([]string, 0, len(made))
	for id := range made {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	slices.Sort(ids)
	var claimed, stuck int64
	for _, id := range ids {
		var qty int64
		for _, l := range made[id] {
			if l.ItemID == k.ItemID && l.GroupID == k.GroupID {
				qty += l.Quantity
			}
		}
		if qty == 0 {
			continue
		}
		st, err := b.TruthState(ctx, k.ShopID, id)
		if err != nil {
			return Books{}, err
		}
		switch st {
		case reservation.StateClaimed:
			claimed += qty
		case reservation.StateHeld:
			stuck += qty // at rest: its source of truth still holds it
		}
	}
	return Books{OnHand: eb.OnHand, Claimed: claimed, Held: rb.Held, OrphanHeld: eb.Leaked() + stuck, separate: true}, nil
}

// TruthState is what a reservation's source of truth says of it.
func (b *MigrationBackend) TruthState(ctx context.Context, shop uint64, id string) (reservation.State, error) {
	truth, _, err := b.R.Truth(ctx, shop, id)
	if err != nil {
		return "", err
	}
	if truth == migration.BackendRedis {
		res, err := b.Redis.Lookup(ctx, shop, id)
		if errors.Is(err, reservation.ErrNotFound) {
			return "missing", nil
		}
		if err != nil {
			return "", err
		}
		return res.State, nil
	}
	var st string
	err = b.DB.QueryRowContext(ctx, `SELECT state FROM inventory_reservations WHERE shop_id = ? AND reservation_id = ?`,
		shop, id).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "missing", nil
	}
	return reservation.State(st), err
}
