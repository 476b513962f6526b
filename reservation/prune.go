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
// (SKIP LOCKED) and pruned next time. Run calls it every
// Config.PruneInterval; without it the table grows by one row per checkout.
func (e *Engine) PruneEnded(ctx context.Context) (int, error) {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Expire)
	total := 0
	for {
		var n int
		err := e.retry(ctx, opPrune, func() (err error) { n, err = e.pruneBatch(ctx); return err })
		total += n
		if err != nil {
			return total, fmt.Errorf("reservation: prune ended reservations: %w", err)
		}
		if n < e.pruneBatchSize() {
			return total, nil
		}
	}
}

func (e *Engine) pruneBatchSize() int { return 10 * e.cfg.ExpiryBatch }

func (e *Engine) pruneBatch(ctx context.Context) (int, error) {
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
	if err := tx.Commit(); err != nil {
		return 0, classify(err)
	}
	n := len(args) / 2
	e.metrics.pruned(ctx, n)
	return n, nil
}
