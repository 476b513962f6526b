package reservation

import (
	"context"
	"fmt"
	"strings"

	"github.com/holdtime/holdtime/conntag"
)

// PruneEnded deletes reservation rows whose hold ended (claimed, released
// or expired) and whose expiry and last change are both older than
// Config.Retention, in batches of ten times Config.ExpiryBatch, and returns
// how many it deleted. Rows a claim or release retry is reading are skipped
// (SKIP LOCKED) and pruned next time. It also deletes the records of stock
// changes (the AdjustmentID window) and the receipts older than
// Config.Retention. Run calls it every Config.PruneInterval; without it the
// table grows by one row per checkout.
func (e *Engine) PruneEnded(ctx context.Context) (int, error) {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Expire)
	total := 0
	for {
		var n, lost int // lost: the size of the batch whose COMMIT reply was lost
		token := newToken()
		err := e.retry(ctx, opPrune, true, 0, func(r *retrier) (err error) {
			if r.doubt != nil {
				committed, err := e.receipt(ctx, r, token)
				if err != nil {
					return err
				}
				if committed {
					n = lost
					return nil
				}
			}
			n, err = e.pruneBatch(ctx, r, token)
			if lost = n; err != nil {
				n = 0
			}
			return err
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("reservation: prune ended reservations: %w", err)
		}
		if n < e.pruneBatchSize() {
			break
		}
	}
	retention := e.cfg.Retention.Microseconds()
	for _, q := range []string{pruneAdjustments, pruneReceipts} {
		for {
			var n int64
			err := e.retry(ctx, opPrune, true, 0, func(*retrier) error {
				res, err := e.db.ExecContext(ctx, q, retention, e.pruneBatchSize())
				if err != nil {
					return classify(err)
				}
				n, err = res.RowsAffected()
				return classify(err)
			})
			if err != nil {
				return total, fmt.Errorf("reservation: prune old stock changes and receipts: %w", err)
			}
			if n < int64(e.pruneBatchSize()) {
				break
			}
		}
	}
	return total, nil
}

func (e *Engine) pruneBatchSize() int { return 10 * e.cfg.ExpiryBatch }

// pruneBatch deletes one batch with a receipt of token, so that a retry
// after a lost COMMIT reply can tell whether it was deleted (receipt). It
// returns the size of the batch, also when the reply was lost.
func (e *Engine) pruneBatch(ctx context.Context, r *retrier, token uint64) (int, error) {
	tx, err := e.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	retention := e.cfg.Retention.Microseconds()
	rows, err := tx.QueryContext(ctx, selectPrunable, retention, retention, e.pruneBatchSize())
	if err != nil {
		return 0, classify(err)
	}
	var q strings.Builder
	q.WriteString(deleteReservationsPrefix)
	var args []any
	for rows.Next() {
		var shopID uint64
		var id string
		if err := rows.Scan(&shopID, &id); err != nil {
			rows.Close()
			return 0, classify(err)
		}
		if len(args) > 0 {
			q.WriteString(", ")
		}
		q.WriteString(deleteReservationsRow)
		args = append(args, shopID, id)
	}
	if err := rows.Close(); err != nil {
		return 0, classify(err)
	}
	if len(args) == 0 {
		return 0, nil
	}
	q.WriteByte(')')
	if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
		return 0, classify(err)
	}
	if _, err := tx.ExecContext(ctx, insertReceipt, token); err != nil {
		return 0, classify(err)
	}
	n := len(args) / 2
	return n, r.commit(ctx, tx, func() { e.metrics.pruned(ctx, n) })
}

// receipt learns whether the transaction of token, whose COMMIT reply was
// lost, committed: the locking read of its receipt waits for it to end on
// the server. It resolves r.
func (e *Engine) receipt(ctx context.Context, r *retrier, token uint64) (bool, error) {
	tx, err := e.begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, lockReceipt, token).Scan(&n); err != nil {
		return false, classify(err)
	}
	r.resolved(n > 0)
	return n > 0, nil
}
