package reservation

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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

// poolState locks the ledger row (the per-item/group lock) and reads the
// pool and the holds in one statement, so that both come from one snapshot.
func (e *Engine) poolState(ctx context.Context, tx *sql.Tx, key ItemKey) (poolState, error) {
	var st poolState
	err := tx.QueryRowContext(ctx, lockLedger, key.ShopID, key.ItemID, key.GroupID).Scan(&st.onHand)
	if errors.Is(err, sql.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, classify(err)
	}
	st.found = true
	q := countUnits
	if e.cfg.Strategy == StrategyCounter {
		q = countCounter
	}
	err = tx.QueryRowContext(ctx, q, key.ShopID, key.ItemID, key.GroupID, key.ShopID, key.ItemID, key.GroupID).
		Scan(&st.pooled, &st.held)
	return st, classify(err)
}

// refill tops up the pool of key to Config.PoolSize from ledger-only units
// when it holds fewer than need units or is below half full. It is single
// flight per item/group: concurrent callers queue on the ledger row lock and
// find the pool already refilled. It returns the state after the refill.
func (e *Engine) refill(ctx context.Context, key ItemKey, need int64) (poolState, int64, error) {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Refill)
	tx, err := e.begin(ctx)
	if err != nil {
		return poolState{}, 0, err
	}
	defer tx.Rollback()
	st, err := e.poolState(ctx, tx, key)
	if err != nil || !st.found {
		return st, 0, err
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
	}
	if err := tx.Commit(); err != nil {
		return st, 0, classify(err)
	}
	st.pooled += max(add, 0)
	e.counted(key, st.pooled)
	if add > 0 {
		e.stats.refilledUnits.Add(add)
		e.metrics.refilledUnits(ctx, add)
		return st, add, nil
	}
	return st, 0, nil
}

// addToPool makes n units reservable: unit rows, or the counter.
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

// Refill tops up the pool of one item/group now, returning the units added.
// Run does this in the background; call it to warm a pool before a sale.
func (e *Engine) Refill(ctx context.Context, key ItemKey) (int64, error) {
	r := e.newRetrier("refill")
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
func (e *Engine) Run(ctx context.Context) error {
	refill := time.NewTicker(e.cfg.RefillInterval)
	defer refill.Stop()
	expire := time.NewTicker(e.cfg.ExpiryInterval)
	defer expire.Stop()
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

// deleteUnits deletes units the transaction has locked. Every one of them
// must go: a unit deleted fewer times than listed is a unit held twice, so a
// count that does not match fails the transaction instead of committing a
// hold on units nobody took.
func deleteUnits(ctx context.Context, tx *sql.Tx, ids []uint64) error {
	var b strings.Builder
	b.WriteString(deleteUnitsPrefix)
	args := make([]any, len(ids))
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('?')
		args[i] = id
	}
	b.WriteByte(')')
	res, err := tx.ExecContext(ctx, b.String(), args...)
	if err != nil {
		return classify(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return classify(err)
	}
	if n != int64(len(ids)) {
		return fmt.Errorf("%w: deleted %d of the %d units it locked", errUnitsMismatch, n, len(ids))
	}
	return nil
}
