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
}

// Receive adds p.Quantity units to the ledger. They become reservable when a
// refill pools them (inline on the next short reserve, or from Run).
func (e *Engine) Receive(ctx context.Context, p StockParams) error {
	if p.Quantity <= 0 {
		return fmt.Errorf("reservation: Receive quantity %d must be positive (use Adjust to remove stock)", p.Quantity)
	}
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Stock)
	_, err := e.db.ExecContext(ctx, receiveLedger, p.ShopID, p.ItemID, p.GroupID, p.Quantity, p.Quantity)
	if err != nil {
		return fmt.Errorf("reservation: receive %+v: %w", p.ItemKey, classify(err))
	}
	e.touch(p.ItemKey, 0)
	return nil
}

// Adjust changes the ledger by p.Quantity (a count correction, shrinkage).
// A negative adjustment takes ledger-only units first, then pooled ones, and
// never held ones: it fails with ErrInsufficientStock rather than take units
// a buyer holds.
func (e *Engine) Adjust(ctx context.Context, p StockParams) error {
	if p.Quantity >= 0 {
		if p.Quantity == 0 {
			return nil
		}
		return e.Receive(ctx, p)
	}
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Stock)
	r := e.newRetrier("adjust")
	for {
		err := e.adjustDown(ctx, p.ItemKey, -p.Quantity)
		if err == nil {
			return nil
		}
		if err = r.again(ctx, err); err != nil {
			return fmt.Errorf("reservation: adjust %+v by %d: %w", p.ItemKey, p.Quantity, err)
		}
	}
}

func (e *Engine) adjustDown(ctx context.Context, key ItemKey, n int64) error {
	tx, err := e.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	st, err := e.poolState(ctx, tx, key)
	if err != nil {
		return err
	}
	if st.onHand-st.held < n {
		return fmt.Errorf("%w: %d units are not held, cannot remove %d", ErrInsufficientStock, st.onHand-st.held, n)
	}
	fromPool := max(n-max(st.ledgerOnly(), 0), 0)
	if fromPool > 0 {
		if err := e.removePooled(ctx, tx, key, fromPool); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, adjustLedger, -n, key.ShopID, key.ItemID, key.GroupID); err != nil {
		return classify(err)
	}
	if err := tx.Commit(); err != nil {
		return classify(err)
	}
	e.touch(key, -fromPool)
	return nil
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
	return deleteUnits(ctx, tx, ids)
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
