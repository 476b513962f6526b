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
	groups  groups // claims and releases in flight, grouped per shop (group.go)
	// groupHooks are called, when set (tests), when a call joins the queue
	// of op and when a leader is about to run a group of n calls.
	groupQueued func(op string)
	groupLead   func(op string, n int)
	now         func() time.Time // time.Now; tests move it

	// hot is the refiller's working set: the item/groups reserved, released
	// or stocked within Config.RefillIdle, with their live pool depth.
	// Bounded by maxHot; Run forgets idle entries.
	hotMu sync.Mutex
	hot   map[ItemKey]*hotItem
	// wake carries items whose pool fell below half to Run, which refills
	// them at once instead of at the next tick or on a buyer's short read.
	wake chan ItemKey

	// flights are the refills in flight, one per item/group at most
	// (refill.go).
	flightMu sync.Mutex
	flights  map[ItemKey]*refillFlight
	// flightRun and flightWait are called, when set (tests), when a refill
	// starts and when a caller waits for one.
	flightRun, flightWait func(ItemKey)
	// refillAlone turns the engine's single flight off (benchmarks: the
	// convoy it prevents).
	refillAlone bool

	// unsettled are the effects on the counters of calls that returned an
	// *OutcomeUnknownError, by the token their lost COMMIT wrote: a later
	// call that finds the token (the caller's retry) applies them, once.
	// Bounded by maxUnsettled.
	unsettledMu sync.Mutex
	unsettled   map[uint64]func()
}

// maxUnsettled bounds Engine.unsettled: beyond it, the counters miss what
// the calls that could not learn their outcome did.
const maxUnsettled = 1024

// remember keeps the effects of a call whose outcome stayed unknown.
func (e *Engine) remember(token uint64, effects func()) {
	e.unsettledMu.Lock()
	defer e.unsettledMu.Unlock()
	if len(e.unsettled) < maxUnsettled {
		e.unsettled[token] = effects
	}
}

// settle applies the effects of an earlier call of this engine whose
// outcome stayed unknown, when token (read from the row its COMMIT wrote)
// is one.
func (e *Engine) settle(token uint64) {
	e.unsettledMu.Lock()
	effects := e.unsettled[token]
	delete(e.unsettled, token)
	e.unsettledMu.Unlock()
	if effects != nil {
		effects()
	}
}

// hotItem is what the engine knows of one item/group's pool.
type hotItem struct {
	// depth is the pooled units as counted by the last refill (under the
	// ledger lock), adjusted since by this engine's own takes and returns:
	// exact when one engine serves the item, and re-synchronised by every
	// refill when several do. -1 until a refill counted it.
	depth    int64
	counted  time.Time // last refill's count
	lastUsed time.Time
	woken    bool // a wake is pending in Run
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
	e := &Engine{db: db, cfg: cfg, now: time.Now, hot: make(map[ItemKey]*hotItem), wake: make(chan ItemKey, 64),
		unsettled: make(map[uint64]func()), flights: make(map[ItemKey]*refillFlight)}
	if e.metrics, err = newMetrics(cfg.MeterProvider, cfg.Strategy, e.poolDepth); err != nil {
		return nil, err
	}
	return e, nil
}

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// Stats are the engine's cumulative counters since New, for harnesses and
// tests; the same figures are exported as metrics. Reserves, Claims,
// Releases, Expired and RefilledUnits count what this engine committed,
// each once: a write whose COMMIT reply was lost counts when the engine
// finds it committed (see Errors and retries in the package doc); a
// repeated call that finds the work done by an earlier call does not count
// again.
type Stats struct {
	Reserves     int64 // reservations made
	Claims       int64 // reservations claimed
	Releases     int64 // reservations released
	Expired      int64 // holds ended by expiry (the sweeper, or a claim that found them due)
	Retries      int64 // attempts repeated after a retryable error or contention
	ShortReads   int64 // unit fetches that returned fewer units than asked
	UnitsSkipped int64 // units asked for but not returned by those fetches
	// InlineRefills counts the refills a short reserve ran (and waited
	// for), whether or not they added units, like the metric
	// holdtime.reservation.refills{mode=inline}; RefilledUnits counts what
	// refills added.
	InlineRefills int64
	RefilledUnits int64 // units added to pools by any refill
	// RefillWait is the time reserves spent in inline refills, waiting for
	// one included (the metric holdtime.reservation.refill.wait.duration).
	RefillWait time.Duration
}

type counters struct {
	reserves, claims, releases, expired, retries, shortReads, unitsSkipped, inlineRefills, refilledUnits atomic.Int64
	refillWait                                                                                           atomic.Int64 // ns
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	s := &e.stats
	return Stats{
		Reserves: s.reserves.Load(), Claims: s.claims.Load(), Releases: s.releases.Load(),
		Expired: s.expired.Load(), Retries: s.retries.Load(), ShortReads: s.shortReads.Load(),
		UnitsSkipped: s.unitsSkipped.Load(), InlineRefills: s.inlineRefills.Load(),
		RefilledUnits: s.refilledUnits.Load(), RefillWait: time.Duration(s.refillWait.Load()),
	}
}

// touch records that key was used and that this engine changed its pool by
// delta units (negative: taken). When the pool is known to be below half
// of Config.PoolSize it asks Run to refill it now, so that buyers rarely
// find it empty and wait on an inline refill.
func (e *Engine) touch(key ItemKey, delta int64) {
	e.hotMu.Lock()
	h := e.hot[key]
	if h == nil {
		if len(e.hot) >= maxHot {
			e.hotMu.Unlock()
			return // inline refills still serve it
		}
		h = &hotItem{depth: -1}
		e.hot[key] = h
	}
	h.lastUsed = e.now()
	if h.depth >= 0 {
		h.depth = max(h.depth+delta, 0)
	}
	wake := h.depth >= 0 && h.depth < int64(e.cfg.PoolSize)/2 && !h.woken
	if wake {
		select {
		case e.wake <- key:
			h.woken = true
		default: // Run is busy or not running: its tick will do
		}
	}
	e.hotMu.Unlock()
}

// counted records the pool depth a refill counted under the ledger lock.
func (e *Engine) counted(key ItemKey, depth int64) {
	e.hotMu.Lock()
	if h := e.hot[key]; h != nil {
		h.depth, h.counted, h.woken = depth, e.now(), false
	} else if len(e.hot) < maxHot {
		now := e.now()
		e.hot[key] = &hotItem{depth: depth, counted: now, lastUsed: now}
	}
	e.hotMu.Unlock()
}

// poolDepth is the pooled units of the working set, for the gauge: a sum
// over at most maxHot entries, read at collection time.
func (e *Engine) poolDepth() int64 {
	e.hotMu.Lock()
	defer e.hotMu.Unlock()
	var n int64
	for _, h := range e.hot {
		n += max(h.depth, 0)
	}
	return n
}

// refillDue forgets the items idle for Config.RefillIdle and returns those
// whose pool needs a refill: unknown, below half, or not counted for
// recountEvery refill intervals (other engines may have drained it).
func (e *Engine) refillDue() []ItemKey {
	now := e.now()
	e.hotMu.Lock()
	defer e.hotMu.Unlock()
	var due []ItemKey
	for k, h := range e.hot {
		switch {
		case now.Sub(h.lastUsed) >= e.cfg.RefillIdle:
			delete(e.hot, k)
		case h.depth < int64(e.cfg.PoolSize)/2, now.Sub(h.counted) >= recountEvery*e.cfg.RefillInterval:
			due = append(due, k)
		}
	}
	return due
}

// recountEvery is how many refill intervals the refiller trusts a depth it
// kept live before counting the pool again.
const recountEvery = 10

// begin starts a READ COMMITTED transaction: a locking read then takes
// record locks only, so refills can insert next to locked units.
func (e *Engine) begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := e.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, classify(err)
	}
	return tx, nil
}

// retrier paces the retries of one operation within Config.RetryBudget and
// keeps track of a COMMIT whose reply was lost until a retry resolves it.
type retrier struct {
	e        *Engine
	op       string
	safe     bool   // a caller may repeat the operation after an unknown outcome
	token    uint64 // the call's token, when a later call can find it (see Engine.unsettled)
	deadline time.Time
	attempts int

	// doubt is the error of a COMMIT whose reply was lost, until an attempt
	// has read what that COMMIT wrote; lost are its effects on the engine's
	// counters, to apply if it turns out to have taken effect.
	doubt error
	lost  func()
}

// newRetrier returns the retrier of one call. safe says whether the
// caller may repeat the call after an unknown outcome (it has an
// idempotency key).
func (e *Engine) newRetrier(op string, safe bool) *retrier {
	return &retrier{e: e, op: op, safe: safe, deadline: time.Now().Add(e.cfg.RetryBudget), attempts: 1}
}

// commit commits tx and applies effects (the engine's counters and pool
// depths) once the commit is known to have taken effect: now, or when a
// later attempt finds what the lost COMMIT wrote (resolved).
func (r *retrier) commit(ctx context.Context, tx *sql.Tx, effects func()) error {
	err := commit(ctx, tx)
	var d *inDoubtError
	switch {
	case err == nil:
		if effects != nil {
			effects()
		}
	case errors.As(err, &d):
		r.doubt, r.lost = d.err, effects
	}
	return err
}

// resolved records that an attempt read, under the locks the lost COMMIT's
// transaction held (so after it ended on the server), whether it took
// effect. When it did, its effects are applied now, exactly once.
func (r *retrier) resolved(applied bool) {
	if r.doubt != nil && applied && r.lost != nil {
		r.lost()
	}
	r.doubt, r.lost = nil, nil
}

// again reports whether to retry after err (already classified): it sleeps a
// jittered backoff and returns nil, or returns the error to give the caller.
func (r *retrier) again(ctx context.Context, err error) error {
	if !errors.Is(err, ErrRetryable) {
		return r.fail(err)
	}
	if ctx.Err() != nil {
		return r.fail(fmt.Errorf("reservation: %s: %w", r.op, context.Cause(ctx)))
	}
	// Full jitter over an exponential ceiling: 1 ms, 2 ms, ... 64 ms.
	backoff := time.Duration(rand.Int64N(int64(time.Millisecond) << min(r.attempts, 6)))
	if time.Now().Add(backoff).After(r.deadline) {
		return r.fail(&RetryableError{Op: r.op, Attempts: r.attempts, Err: err})
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
		return r.fail(fmt.Errorf("reservation: %s: %w", r.op, context.Cause(ctx)))
	}
}

// fail returns the error that ends the operation: err, or an
// *OutcomeUnknownError while a lost COMMIT is unresolved (whose effects
// the engine then remembers for a later call to settle).
func (r *retrier) fail(err error) error {
	if r.doubt == nil {
		return err
	}
	if r.token != 0 && r.lost != nil {
		r.e.remember(r.token, r.lost)
	}
	r.doubt, r.lost = nil, nil
	return &OutcomeUnknownError{Op: r.op, Retryable: r.safe, Err: err}
}

// retry runs attempt until it succeeds, fails for good, or the retry budget
// runs out. token is the call's token when a later call can find it, or 0.
func (e *Engine) retry(ctx context.Context, op string, safe bool, token uint64, attempt func(r *retrier) error) error {
	r := e.newRetrier(op, safe)
	r.token = token
	for {
		err := attempt(r)
		if err == nil {
			return nil
		}
		if err = r.again(ctx, err); err != nil {
			return err
		}
	}
}

// newToken returns a random nonzero token that marks the rows one
// operation writes, so that a retry can tell its own lost COMMIT from
// anyone else's. It has 63 bits: database/sql refuses a uint64 argument
// with the high bit set unless the driver (and every wrapper of it)
// converts it.
func newToken() uint64 {
	for {
		if t := rand.Uint64() >> 1; t != 0 {
			return t
		}
	}
}
