package reservation

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/holdtime/holdtime/conntag"
)

// poolState is one item/group's accounting, read under its ledger lock.
type poolState struct {
	onHand int64 // stocked, not claimed (ledger)
	pooled int64 // unit rows (or the counter) available to reserve
	held   int64 // reserved quantities
	found  bool  // the ledger row exists
}

// ledgerOnly is the units neither pooled nor held: what a refill may pool.
func (s poolState) ledgerOnly() int64 { return s.onHand - s.pooled - s.held }

// sellable is what the ledger says can still be reserved.
func (s poolState) sellable() int64 { return s.onHand - s.held }

// poolState locks the ledger row (the per-item/group lock of refills and
// adjustments) and reads the pool and the holds in one statement, so that
// both come from one snapshot. With lockPool it also locks the pool row
// (refills, which add units), after the ledger row.
func (e *Engine) poolState(ctx context.Context, tx *sql.Tx, key ItemKey, lockPool bool) (poolState, error) {
	var st poolState
	err := tx.QueryRowContext(ctx, lockLedger, key.ShopID, key.ItemID, key.GroupID).Scan(&st.onHand)
	if errors.Is(err, sql.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, classify(err)
	}
	st.found = true
	if lockPool {
		q := lockPoolUnitsHeld
		if e.cfg.Strategy == StrategyCounter {
			q = lockPoolCounterHeld
		}
		err = e.lockPool(ctx, tx, key, q, &st.pooled, &st.held)
		return st, err
	}
	q := countUnits
	if e.cfg.Strategy == StrategyCounter {
		q = countCounter
	}
	err = tx.QueryRowContext(ctx, q, key.ShopID, key.ItemID, key.GroupID, key.ShopID, key.ItemID, key.GroupID).
		Scan(&st.pooled, &st.held)
	return st, classify(err)
}

// lockPool locks the pool row of key, creating it the first time, and scans
// what q (one of the lockPool statements) counts under that lock.
func (e *Engine) lockPool(ctx context.Context, tx *sql.Tx, key ItemKey, q string, dest ...any) error {
	for range 2 {
		err := tx.QueryRowContext(ctx, q, key.ShopID, key.ItemID, key.GroupID).Scan(dest...)
		if !errors.Is(err, sql.ErrNoRows) {
			return classify(err)
		}
		// The first writer of this pool: the insert locks the new row (a
		// concurrent one waits on it and then finds it).
		if _, err := tx.ExecContext(ctx, insertPool, key.ShopID, key.ItemID, key.GroupID); err != nil {
			return classify(err)
		}
	}
	return fmt.Errorf("reservation: internal error: the pool row of %+v vanished inside a transaction", key)
}

// refill tops up the pool of key to Config.PoolSize from ledger-only units
// when it holds fewer than need units or is below half full. It is single
// flight per item/group: concurrent refills of other engines queue on the
// ledger row lock and find the pool already refilled. It returns the state after the refill and
// the units it added.
//
// A refill whose COMMIT reply is lost retries here, at once: the retry's
// ledger lock waits for the lost transaction to end on the server, and its
// receipt says whether it committed, so that its units are counted once.
// Other errors are returned for the caller to retry.
//
// Single flight is kept in the engine first: while one refill of key runs,
// the engine's other callers wait for its result in memory, not for the
// ledger row lock on a connection of their own. Without it every short
// reserve of a hot item opened a transaction that queued on the ledger
// row, holding a pooled connection and a server thread for the wait, and
// then ran a refill that found the pool full (a convoy). A caller takes
// the result of a refill that started after it asked, so what the caller
// learns of the ledger (sold out or not) was read during its own call; a
// refill that started earlier it takes only when that refill added units
// and found enough sellable (the caller retries at once); otherwise, or
// when the refill failed, the caller runs or joins the next one.
func (e *Engine) refill(ctx context.Context, key ItemKey, need int64) (poolState, int64, error) {
	if e.refillAlone {
		return e.refillTx(ctx, key, need)
	}
	asked := time.Now()
	for {
		e.flightMu.Lock()
		f := e.flights[key]
		if f == nil {
			f = &refillFlight{done: make(chan struct{}), start: time.Now(), need: need}
			e.flights[key] = f
			e.flightMu.Unlock()
			if e.flightRun != nil {
				e.flightRun(key)
			}
			f.st, f.added, f.err = e.refillTx(ctx, key, need)
			e.flightMu.Lock()
			delete(e.flights, key)
			e.flightMu.Unlock()
			close(f.done)
			return f.st, f.added, f.err
		}
		e.flightMu.Unlock()
		if e.flightWait != nil {
			e.flightWait(key)
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return poolState{}, 0, context.Cause(ctx)
		}
		if f.err == nil && f.need >= need && (!f.start.Before(asked) || f.added > 0 && f.st.sellable() >= need) {
			// A refill that started after this call asked read the ledger
			// during the call: its answer stands. One that started before
			// but committed units (after this call's short fetch) and found
			// enough sellable is worth a retry at once; it can never make
			// this call report sold out from a read older than the call.
			return f.st, f.added, nil
		}
	}
}

// refillFlight is a refill in flight, and then its result.
type refillFlight struct {
	done  chan struct{} // closed when the result is set
	start time.Time
	need  int64
	st    poolState
	added int64
	err   error
}

// refillTx is one refill: its transaction, retried at once while a lost
// COMMIT reply is unresolved.
func (e *Engine) refillTx(ctx context.Context, key ItemKey, need int64) (poolState, int64, error) {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Refill)
	r := e.newRetrier(opRefill, true)
	token := newToken()
	var lostAdd int64
	for {
		st, add, err := e.refillOnce(ctx, r, key, need, token, &lostAdd)
		var d *inDoubtError
		if err == nil || !errors.As(err, &d) && r.doubt == nil {
			return st, add, err
		}
		if err = r.again(ctx, err); err != nil {
			return st, 0, err
		}
	}
}

func (e *Engine) refillOnce(ctx context.Context, r *retrier, key ItemKey, need int64, token uint64, lostAdd *int64) (poolState, int64, error) {
	tx, err := e.begin(ctx)
	if err != nil {
		return poolState{}, 0, err
	}
	defer tx.Rollback()
	st, err := e.poolState(ctx, tx, key, true)
	if err != nil {
		return st, 0, err
	}
	if !st.found {
		r.resolved(false) // no ledger row: no refill can have committed
		return st, 0, nil
	}
	if r.doubt != nil {
		var n int
		if err := tx.QueryRowContext(ctx, lockReceipt, token).Scan(&n); err != nil {
			return st, 0, classify(err)
		}
		r.resolved(n > 0)
		if n > 0 { // committed: st already counts its units
			e.counted(key, st.pooled)
			return st, *lostAdd, nil
		}
	}
	var add int64
	if st.pooled < need || st.pooled < int64(e.cfg.PoolSize)/2 {
		// A line bigger than the pool gets a pool big enough for it.
		add = min(st.ledgerOnly(), max(int64(e.cfg.PoolSize), need)-st.pooled)
	}
	if add > 0 {
		if err := e.addToPool(ctx, tx, key, add); err != nil {
			return st, 0, err
		}
		if _, err := tx.ExecContext(ctx, insertReceipt, token); err != nil {
			return st, 0, classify(err)
		}
	}
	add = max(add, 0)
	*lostAdd = add
	err = r.commit(ctx, tx, func() {
		if add > 0 {
			e.stats.refilledUnits.Add(add)
			e.metrics.refilledUnits(ctx, add)
		}
	})
	if err != nil {
		return st, 0, err
	}
	st.pooled += add
	e.counted(key, st.pooled)
	return st, add, nil
}

// addToPool makes n units reservable: unit rows, or the counter. The caller
// holds the pool row lock.
func (e *Engine) addToPool(ctx context.Context, tx *sql.Tx, key ItemKey, n int64) error {
	if e.cfg.Strategy == StrategyCounter {
		_, err := tx.ExecContext(ctx, addCounter, key.ShopID, key.ItemID, key.GroupID, n, n)
		return classify(err)
	}
	// Fresh auto-increment rows: under READ COMMITTED the insert waits for
	// no lock a reserve holds (no gap locks), whatever it is doing. A
	// multi-row INSERT … VALUES is a "simple insert": with
	// innodb_autoinc_lock_mode=1 it takes the auto-increment mutex only,
	// where an INSERT … SELECT would hold the table's AUTO-INC lock to the
	// end of the statement and serialise the refills of every item.
	for n > 0 {
		k := min(n, insertUnitsMax)
		var q strings.Builder
		q.Grow(len(insertUnitsPrefix) + int(k)*(len(insertUnitsRow)+2))
		q.WriteString(insertUnitsPrefix)
		args := make([]any, 0, 3*k)
		for i := range k {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString(insertUnitsRow)
			args = append(args, key.ShopID, key.ItemID, key.GroupID)
		}
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return classify(err)
		}
		n -= k
	}
	return nil
}

// returnUnits puts the units of ended holds back in their pools, as many as
// fit under Config.PoolSize; the others stay in the ledger (ledger-only,
// still sellable) for a refill to pool when the pool runs low. It takes
// each pool row lock in key order, after every other lock of the
// transaction, and waits for nothing once it holds one: the pool locks
// close no cycle. It returns the units pooled per line.
func (e *Engine) returnUnits(ctx context.Context, tx *sql.Tx, lines []keyQty) ([]keyQty, error) {
	lines = mergeKeyQty(lines)
	q := lockPoolUnits
	if e.cfg.Strategy == StrategyCounter {
		q = lockPoolCounter
	}
	pooled := make([]keyQty, 0, len(lines))
	for _, l := range lines {
		var depth int64
		if err := e.lockPool(ctx, tx, l.key, q, &depth); err != nil {
			return nil, err
		}
		put := min(l.qty, max(int64(e.cfg.PoolSize)-depth, 0))
		if put > 0 {
			if err := e.addToPool(ctx, tx, l.key, put); err != nil {
				return nil, err
			}
		}
		pooled = append(pooled, keyQty{l.key, put})
	}
	return pooled, nil
}

// keyQty is a quantity of units of one item/group.
type keyQty struct {
	key ItemKey
	qty int64
}

// mergeKeyQty sums lines per key, in key order (the pool lock order).
func mergeKeyQty(lines []keyQty) []keyQty {
	slices.SortFunc(lines, func(a, b keyQty) int { return compareKeys(a.key, b.key) })
	out := lines[:0:0]
	for _, l := range lines {
		if n := len(out); n > 0 && out[n-1].key == l.key {
			out[n-1].qty += l.qty
			continue
		}
		out = append(out, l)
	}
	return out
}

// Refill tops up the pool of one item/group now, returning the units added.
// Run does this in the background; call it to warm a pool before a sale.
func (e *Engine) Refill(ctx context.Context, key ItemKey) (int64, error) {
	r := e.newRetrier(opRefill, true)
	for {
		_, added, err := e.refill(ctx, key, int64(e.cfg.PoolSize))
		if err == nil {
			return added, nil
		}
		if err = r.again(ctx, err); err != nil {
			return 0, err
		}
	}
}

// Run does the engine's background work until ctx is done: it tops up the
// pools of the items in its working set (used within Config.RefillIdle)
// every Config.RefillInterval, and at once when a reserve leaves a pool
// below half; it returns expired holds to the pool every
// Config.ExpiryInterval and deletes ended reservations older than
// Config.Retention every Config.PruneInterval. Errors are logged to
// Config.Logger and retried next interval. Run returns nil when ctx is
// cancelled.
func (e *Engine) Run(ctx context.Context) error { return e.run(ctx, true) }

// RunRefill is Run without the expiry sweep, for a caller that calls
// ExpireDue itself at times it chooses (package migration fences its sweeps
// against a shop's cutover from one system to the other).
func (e *Engine) RunRefill(ctx context.Context) error { return e.run(ctx, false) }

func (e *Engine) run(ctx context.Context, sweep bool) error {
	refill := time.NewTicker(e.cfg.RefillInterval)
	defer refill.Stop()
	expire := time.NewTicker(e.cfg.ExpiryInterval)
	defer expire.Stop()
	if !sweep {
		expire.Stop()
	}
	prune := time.NewTicker(e.cfg.PruneInterval)
	defer prune.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case key := <-e.wake:
			e.backgroundRefill(ctx, key)
		case <-refill.C:
			e.refillHot(ctx)
		case <-expire.C:
			if _, err := e.ExpireDue(ctx); err != nil && ctx.Err() == nil {
				e.cfg.Logger.ErrorContext(ctx, "reservation: expiry sweep failed", "error", err)
			}
		case <-prune.C:
			if _, err := e.PruneEnded(ctx); err != nil && ctx.Err() == nil {
				e.cfg.Logger.ErrorContext(ctx, "reservation: pruning ended reservations failed", "error", err)
			}
		}
	}
}

// refillHot forgets idle items and refills the pools of the working set
// that are low or not counted recently.
func (e *Engine) refillHot(ctx context.Context) {
	for _, k := range e.refillDue() {
		if ctx.Err() != nil {
			return
		}
		e.backgroundRefill(ctx, k)
	}
}

func (e *Engine) backgroundRefill(ctx context.Context, key ItemKey) {
	if _, err := e.Refill(ctx, key); err != nil && ctx.Err() == nil {
		e.cfg.Logger.ErrorContext(ctx, "reservation: background refill failed", "item", key, "error", err)
	}
	e.metrics.backgroundRefill(ctx)
}

// keyUnits are unit ids of one item/group.
type keyUnits struct {
	key ItemKey
	ids []uint64
}

// deleteUnits deletes units the transaction has locked. Every one of them
// must go: a unit deleted fewer times than listed is a unit held twice, so a
// count that does not match fails the transaction instead of committing a
// hold on units nobody took.
//
// It deletes by the full primary key, through the primary key (FORCE
// INDEX: by id alone, or even with the whole key, the optimizer reads the
// id index), so it locks the unit records the locking read already holds
// and nothing else: one record lock per unit.
func deleteUnits(ctx context.Context, tx *sql.Tx, units []keyUnits) error {
	var b strings.Builder
	b.WriteString(deleteUnitsPrefix)
	args := make([]any, 0, 8)
	n := 0
	for i, u := range units {
		if len(u.ids) == 0 {
			continue
		}
		if n > 0 {
			b.WriteString(deleteUnitsOr)
		}
		b.WriteString(deleteUnitsKey)
		args = append(args, u.key.ShopID, u.key.ItemID, u.key.GroupID)
		for j, id := range u.ids {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('?')
			args = append(args, id)
		}
		b.WriteString("))")
		n += len(units[i].ids)
	}
	if n == 0 {
		return nil
	}
	res, err := tx.ExecContext(ctx, b.String(), args...)
	if err != nil {
		return classify(err)
	}
	got, err := res.RowsAffected()
	if err != nil {
		return classify(err)
	}
	if got != int64(n) {
		return fmt.Errorf("%w: deleted %d of the %d units it locked", errUnitsMismatch, got, n)
	}
	return nil
}
