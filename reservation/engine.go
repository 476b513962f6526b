package reservation

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// ItemKey names one ledger row: an item in a location group of a shop.
type ItemKey struct {
	ShopID  uint64
	ItemID  uint64
	GroupID uint64
}

// Engine reserves, claims and releases inventory. It is safe for concurrent
// use. Create it with New.
type Engine struct {
	db      *sql.DB
	cfg     Config
	metrics *metrics
	stats   counters

	// hot holds the item/groups reserved or stocked since the background
	// refiller last ran, with the pool depth last seen. Bounded by maxHot.
	hotMu sync.Mutex
	hot   map[ItemKey]int64
	depth atomic.Int64 // sum of the last pool depths seen, for the gauge
}

const maxHot = 10_000

// New returns an engine on db. db should be opened with conntag.Open so that
// the engine's tags reach the statements; any *sql.DB works. The engine does
// not close db. Call Migrate once before use and Run for the background work.
func New(db *sql.DB, cfg Config) (*Engine, error) {
	if db == nil {
		return nil, errors.New("reservation: New needs a *sql.DB (open one with conntag.Open)")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{db: db, cfg: cfg, hot: make(map[ItemKey]int64)}
	if e.metrics, err = newMetrics(cfg.MeterProvider, cfg.Strategy, e.depth.Load); err != nil {
		return nil, err
	}
	return e, nil
}

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// Stats are the engine's cumulative counters since New, for harnesses and
// tests; the same figures are exported as metrics.
type Stats struct {
	Reserves      int64 // successful reserves
	Claims        int64 // successful claims (first time)
	Releases      int64
	Expired       int64 // holds returned to the pool by expiry
	Retries       int64 // attempts repeated after a retryable error or contention
	ShortReads    int64 // unit fetches that returned fewer units than asked
	UnitsSkipped  int64 // units asked for but not returned by those fetches
	InlineRefills int64 // refills that added units on the reserve path
	RefilledUnits int64 // units added to pools by any refill
}

type counters struct {
	reserves, claims, releases, expired, retries, shortReads, unitsSkipped, inlineRefills, refilledUnits atomic.Int64
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	s := &e.stats
	return Stats{
		Reserves: s.reserves.Load(), Claims: s.claims.Load(), Releases: s.releases.Load(),
		Expired: s.expired.Load(), Retries: s.retries.Load(), ShortReads: s.shortReads.Load(),
		UnitsSkipped: s.unitsSkipped.Load(), InlineRefills: s.inlineRefills.Load(),
		RefilledUnits: s.refilledUnits.Load(),
	}
}

// markHot remembers key for the background refiller.
func (e *Engine) markHot(key ItemKey) {
	e.hotMu.Lock()
	if _, ok := e.hot[key]; !ok && len(e.hot) < maxHot {
		e.hot[key] = -1
	}
	e.hotMu.Unlock()
}

// begin starts a READ COMMITTED transaction: a locking read then takes
// record locks only, so refills can insert next to locked units.
func (e *Engine) begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := e.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, classify(err)
	}
	return tx, nil
}

// retrier paces the retries of one operation within Config.RetryBudget.
type retrier struct {
	e        *Engine
	op       string
	deadline time.Time
	attempts int
}

func (e *Engine) newRetrier(op string) *retrier {
	return &retrier{e: e, op: op, deadline: time.Now().Add(e.cfg.RetryBudget), attempts: 1}
}

// again reports whether to retry after err (already classified): it sleeps a
// jittered backoff and returns nil, or returns the error to give the caller.
func (r *retrier) again(ctx context.Context, err error) error {
	if !errors.Is(err, ErrRetryable) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("reservation: %s: %w", r.op, context.Cause(ctx))
	}
	// Full jitter over an exponential ceiling: 1 ms, 2 ms, ... 64 ms.
	backoff := time.Duration(rand.Int64N(int64(time.Millisecond) << min(r.attempts, 6)))
	if time.Now().Add(backoff).After(r.deadline) {
		return &RetryableError{Op: r.op, Attempts: r.attempts, Err: err}
	}
	r.attempts++
	r.e.stats.retries.Add(1)
	r.e.metrics.retry(ctx, r.op, err)
	t := time.NewTimer(backoff)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("reservation: %s: %w", r.op, context.Cause(ctx))
	}
}
