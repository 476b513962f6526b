package reservation

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/holdtime/holdtime/conntag"
)

// StockParams changes the stock of one item/location group.
type StockParams struct {
	ItemKey
	// Quantity is the number of units: positive for Receive, signed for
	// Adjust.
	Quantity int64
	// AdjustmentID is the change's idempotency key, unique per shop
	// (optional; at most 64 printable ASCII bytes, such as a receipt or
	// stock-count number). A change whose id was already applied is not
	// applied again: the call returns nil, so it is safe to repeat after any
	// error. The same id with another item or quantity is
	// ErrAdjustmentConflict. Ids are remembered for Config.Retention.
	AdjustmentID string
}

func (p StockParams) validate() error {
	if p.AdjustmentID == "" {
		return nil
	}
	return validID("AdjustmentID", p.AdjustmentID)
}

// Receive adds p.Quantity units to the ledger. They become reservable when a
// refill pools them (inline on the next short reserve, or from Run). See
// Adjust for what a lost connection does.
func (e *Engine) Receive(ctx context.Context, p StockParams) error {
	if p.Quantity <= 0 {
		return fmt.Errorf("reservation: Receive quantity %d must be positive (use Adjust to remove stock)", p.Quantity)
	}
	return e.changeStock(ctx, "receive", p)
}

// Adjust changes the ledger by p.Quantity (a count correction, shrinkage).
// A negative adjustment takes ledger-only units first, then pooled ones, and
// never held ones: it fails with ErrInsufficientStock rather than take units
// a buyer holds.
//
// Every stock change is applied at most once, even when the connection
// breaks after its COMMIT reached the server: the engine records the
// change with the ledger in one transaction and, when the reply is lost,
// reads that record (after the lost transaction has ended on the server)
// before it tries again. It returns nil once the change is applied,
// exactly once. When the database stays unreachable through
// Config.RetryBudget (or ctx ends) while a COMMIT's outcome is unknown, it
// returns an *OutcomeUnknownError (ErrOutcomeUnknown): with an
// AdjustmentID it also matches ErrRetryable and the same call is a safe
// retry; without one a second call may apply the change twice, so read the
// ledger first. Every other error means nothing was changed.
func (e *Engine) Adjust(ctx context.Context, p StockParams) error {
	if p.Quantity == 0 {
		return p.validate()
	}
	return e.changeStock(ctx, "adjust", p)
}

func (e *Engine) changeStock(ctx context.Context, op string, p StockParams) error {
	if err := p.validate(); err != nil {
		return err
	}
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Stock)
	token := newToken()
	findable := uint64(0) // a later call finds this one's record by its AdjustmentID only
	if p.AdjustmentID != "" {
		findable = token
	}
	err := e.retry(ctx, op, p.AdjustmentID != "", findable, func(r *retrier) error { return e.changeOnce(ctx, r, p, token) })
	if err != nil {
		return fmt.Errorf("reservation: %s %+v by %d: %w", op, p.ItemKey, p.Quantity, err)
	}
	return nil
}

// changeOnce is one attempt at a stock change, recorded with token.
func (e *Engine) changeOnce(ctx context.Context, r *retrier, p StockParams, token uint64) error {
	tx, err := e.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	key := p.ItemKey
	var st poolState
	if p.Quantity < 0 {
		st, err = e.poolState(ctx, tx, key, false)
	} else if err = tx.QueryRowContext(ctx, lockLedger, key.ShopID, key.ItemID, key.GroupID).Scan(&st.onHand); errors.Is(err, sql.ErrNoRows) {
		err = nil
	} else {
		err = classify(err)
	}
	if err != nil {
		return err
	}
	// The ledger lock waited for this call's lost COMMIT, if any, to end on
	// the server (so did the read of a new ledger row that it inserted):
	// the change's record now says whether it committed.
	if p.AdjustmentID != "" || r.doubt != nil {
		rec, found, err := readAdjustment(ctx, tx, p, token)
		if err != nil {
			return err
		}
		r.resolved(found && rec.token == token)
		if found && rec.token != token {
			e.settle(rec.token)
		}
		if found {
			if rec.token != token && (rec.key != key || rec.qty != p.Quantity) {
				return fmt.Errorf("%w: %q changed item %d group %d by %d", ErrAdjustmentConflict,
					p.AdjustmentID, rec.key.ItemID, rec.key.GroupID, rec.qty)
			}
			return nil // applied, by this call or an earlier one
		}
	}
	var fromPool int64
	if p.Quantity > 0 {
		if _, err := tx.ExecContext(ctx, receiveLedger, key.ShopID, key.ItemID, key.GroupID, p.Quantity, p.Quantity); err != nil {
			return classify(err)
		}
	} else {
		n := -p.Quantity
		if st.onHand-st.held < n {
			return fmt.Errorf("%w: %d units are not held, cannot remove %d", ErrInsufficientStock, st.onHand-st.held, n)
		}
		fromPool = max(n-max(st.ledgerOnly(), 0), 0)
		if fromPool > 0 {
			if err := e.removePooled(ctx, tx, key, fromPool); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, adjustLedger, -n, key.ShopID, key.ItemID, key.GroupID); err != nil {
			return classify(err)
		}
	}
	var id any // NULL without an AdjustmentID
	if p.AdjustmentID != "" {
		id = p.AdjustmentID
	}
	if _, err := tx.ExecContext(ctx, insertAdjustment, key.ShopID, token, id, key.ItemID, key.GroupID, p.Quantity); err != nil {
		if err = classify(err); errors.Is(err, errDuplicate) {
			return errAdjustmentRaced // another call with this id committed first: the retry compares
		}
		return err
	}
	return r.commit(ctx, tx, func() { e.touch(key, -fromPool) })
}

// adjustment is a recorded stock change.
type adjustment struct {
	token uint64
	key   ItemKey
	qty   int64
}

// readAdjustment finds the record of p: by its AdjustmentID, or by this
// call's token when it has none.
func readAdjustment(ctx context.Context, tx *sql.Tx, p StockParams, token uint64) (adjustment, bool, error) {
	a := adjustment{key: ItemKey{ShopID: p.ShopID}}
	q, arg := selectAdjustmentByToken, any(token)
	if p.AdjustmentID != "" {
		q, arg = selectAdjustmentByID, p.AdjustmentID
	}
	err := tx.QueryRowContext(ctx, q, p.ShopID, arg).Scan(&a.token, &a.key.ItemID, &a.key.GroupID, &a.qty)
	if errors.Is(err, sql.ErrNoRows) {
		return a, false, nil
	}
	if err != nil {
		return a, false, classify(err)
	}
	return a, true, nil
}

// removePooled deletes n pooled units; units that in-flight reserves lock
// are skipped, and a shortfall is contention, retried.
func (e *Engine) removePooled(ctx context.Context, tx *sql.Tx, key ItemKey, n int64) error {
	if e.cfg.Strategy == StrategyCounter {
		res, err := tx.ExecContext(ctx, removeCounter, n, key.ShopID, key.ItemID, key.GroupID, n)
		if err != nil {
			return classify(err)
		}
		if k, _ := res.RowsAffected(); k != 1 {
			return errContention
		}
		return nil
	}
	rows, err := tx.QueryContext(ctx, removeUnitsSelect, key.ShopID, key.ItemID, key.GroupID, n)
	if err != nil {
		return classify(err)
	}
	ids, err := scanIDs(rows)
	if err != nil {
		return err
	}
	if int64(len(ids)) < n {
		return errContention
	}
	return deleteUnits(ctx, tx, []keyUnits{{key, ids}})
}

// Available returns the sellable units of an item/location group per the
// ledger: on hand minus held. It never looks at the pool.
func (e *Engine) Available(ctx context.Context, key ItemKey) (int64, error) {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Stock)
	var n int64
	err := e.db.QueryRowContext(ctx, selectAvailable, key.ShopID, key.ItemID, key.GroupID).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reservation: available %+v: %w", key, classify(err))
	}
	return n, nil
}

func scanIDs(rows *sql.Rows) ([]uint64, error) {
	defer rows.Close()
	var ids []uint64
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			return nil, classify(err)
		}
		ids = append(ids, id)
	}
	return ids, classify(rows.Err())
}
