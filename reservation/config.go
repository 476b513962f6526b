package reservation

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Strategy selects how Reserve takes units. Only StrategySkipLocked is meant
// for production; the other two exist so that benchmarks and the flash-sale
// harness can compare against the designs it replaces.
type Strategy string

const (
	// StrategySkipLocked locks pooled unit rows with FOR UPDATE SKIP LOCKED:
	// concurrent checkouts of one item lock different rows and never wait.
	StrategySkipLocked Strategy = "skip_locked"
	// StrategyForUpdate locks pooled unit rows with a plain FOR UPDATE:
	// concurrent checkouts of one item queue on the same first rows.
	StrategyForUpdate Strategy = "for_update"
	// StrategyCounter decrements one quantity row per item/group
	// (UPDATE … SET available = available - ?): every checkout of an item
	// queues on that row for the whole transaction.
	StrategyCounter Strategy = "counter"
)

// Tags are the conntag tags the engine's statements carry, one per business
// process, so that connection hold time is attributed per process.
type Tags struct {
	Reserve string // default "inventory_reserve"
	Claim   string // default "inventory_claim"
	Release string // default "inventory_release"
	Refill  string // default "inventory_refill"
	Expire  string // default "inventory_expire"
	Stock   string // Receive, Adjust, Available, Migrate; default "inventory_stock"
}

// Config configures an Engine. The zero value is ready to use: every field
// documents its default.
type Config struct {
	// Strategy is how Reserve takes units. Default StrategySkipLocked.
	Strategy Strategy
	// PoolSize bounds the available unit rows per item/location group:
	// refills top a pool up to it, and releases and expiries return units
	// to a pool only as far as it has room (the rest stay sellable in the
	// ledger). Only a cart line larger than PoolSize takes a pool beyond
	// it, until that line is reserved. Default 1,000.
	PoolSize int
	// TTL is the hold time of a reservation whose ReserveParams.TTL is zero.
	// Default 15 minutes.
	TTL time.Duration
	// RetryBudget bounds how long an operation retries deadlocks, lock wait
	// timeouts, lost connections and contention before it returns an error
	// that matches ErrRetryable. Default 5 s.
	RetryBudget time.Duration
	// MaxLines bounds the lines of one cart. Default 100.
	MaxLines int
	// RefillInterval is how often Run's background refiller tops up the
	// pools of its working set that are below half full (as this engine
	// knows them) or were not counted for 10 intervals. A reserve that
	// leaves a pool below half also wakes the refiller at once. Default 1 s.
	RefillInterval time.Duration
	// RefillIdle is how long an item/group stays in the refiller's working
	// set after its last reserve, release, expiry or receipt: the refiller
	// then forgets it (a later reserve refills inline and brings it back),
	// so its work is bounded by the items in use, not all items ever sold.
	// The set is also capped at 10,000 items. Default 10 minutes.
	RefillIdle time.Duration
	// ExpiryInterval is how often Run's sweeper returns expired holds to the
	// pool. Default 1 s.
	ExpiryInterval time.Duration
	// ExpiryBatch is how many reservations one sweeper transaction expires,
	// and a tenth of how many one pruning transaction deletes. Default 100.
	ExpiryBatch int
	// Retention is how long a reservation row is kept after its hold ended
	// (claimed, released or expired) and after its expiry time, so that a
	// retry with the same reservation id gets the same answer, and how long
	// a stock change's AdjustmentID is remembered. Run deletes older rows; a
	// retry after that gets ErrNotFound from Claim and Release, a new
	// reservation from Reserve, and a stock change applied again. Default
	// 24 hours.
	Retention time.Duration
	// PruneInterval is how often Run deletes ended reservations older than
	// Retention. Default 1 minute.
	PruneInterval time.Duration
	// MigrateLockWait is how long Migrate waits for the server-wide
	// migration lock another Migrate holds (several instances starting at
	// once) before it returns ErrMigrateLocked. GET_LOCK counts whole
	// seconds: the wait is rounded up. Default 60 s.
	MigrateLockWait time.Duration
	// Tags are the conntag tags of the engine's statements. Empty fields
	// take their defaults.
	Tags Tags
	// MeterProvider receives the engine's metrics (see the package doc).
	// Default: none; the global provider is never used.
	MeterProvider metric.MeterProvider
	// Logger receives errors of the background work in Run. Default: none.
	Logger *slog.Logger
}

const (
	maxPoolSize    = 1_000_000
	defaultMaxTTL  = 24 * time.Hour * 365
	maxReserveLine = 10_000
)

// withDefaults returns c with every zero field set to its default, or an
// error naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	c.Strategy = cmp.Or(c.Strategy, StrategySkipLocked)
	c.PoolSize = cmp.Or(c.PoolSize, 1000)
	c.TTL = cmp.Or(c.TTL, 15*time.Minute)
	c.RetryBudget = cmp.Or(c.RetryBudget, 5*time.Second)
	c.MaxLines = cmp.Or(c.MaxLines, 100)
	c.RefillInterval = cmp.Or(c.RefillInterval, time.Second)
	c.ExpiryInterval = cmp.Or(c.ExpiryInterval, time.Second)
	c.ExpiryBatch = cmp.Or(c.ExpiryBatch, 100)
	c.RefillIdle = cmp.Or(c.RefillIdle, 10*time.Minute)
	c.Retention = cmp.Or(c.Retention, 24*time.Hour)
	c.PruneInterval = cmp.Or(c.PruneInterval, time.Minute)
	c.MigrateLockWait = cmp.Or(c.MigrateLockWait, time.Minute)
	c.Tags.Reserve = cmp.Or(c.Tags.Reserve, "inventory_reserve")
	c.Tags.Claim = cmp.Or(c.Tags.Claim, "inventory_claim")
	c.Tags.Release = cmp.Or(c.Tags.Release, "inventory_release")
	c.Tags.Refill = cmp.Or(c.Tags.Refill, "inventory_refill")
	c.Tags.Expire = cmp.Or(c.Tags.Expire, "inventory_expire")
	c.Tags.Stock = cmp.Or(c.Tags.Stock, "inventory_stock")
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}

	switch c.Strategy {
	case StrategySkipLocked, StrategyForUpdate, StrategyCounter:
	default:
		return c, fmt.Errorf("reservation: Config.Strategy %q is unknown: use %q, %q or %q",
			c.Strategy, StrategySkipLocked, StrategyForUpdate, StrategyCounter)
	}
	if c.PoolSize < 1 || c.PoolSize > maxPoolSize {
		return c, fmt.Errorf("reservation: Config.PoolSize %d is out of range: use 1 to %d (0 means 1,000)", c.PoolSize, maxPoolSize)
	}
	if c.MaxLines < 1 || c.MaxLines > maxReserveLine {
		return c, fmt.Errorf("reservation: Config.MaxLines %d is out of range: use 1 to %d (0 means 100)", c.MaxLines, maxReserveLine)
	}
	if c.ExpiryBatch < 1 {
		return c, fmt.Errorf("reservation: Config.ExpiryBatch %d must be positive (0 means 100)", c.ExpiryBatch)
	}
	for name, d := range map[string]time.Duration{
		"TTL": c.TTL, "RetryBudget": c.RetryBudget, "RefillInterval": c.RefillInterval, "ExpiryInterval": c.ExpiryInterval,
		"RefillIdle": c.RefillIdle, "Retention": c.Retention, "PruneInterval": c.PruneInterval,
		"MigrateLockWait": c.MigrateLockWait,
	} {
		if d < 0 {
			return c, fmt.Errorf("reservation: Config.%s %v is negative: use a positive duration, or 0 for the default", name, d)
		}
	}
	if c.TTL > defaultMaxTTL {
		return c, fmt.Errorf("reservation: Config.TTL %v is longer than a year: holds that long are stock taken off sale", c.TTL)
	}
	return c, nil
}
