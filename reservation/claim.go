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

// Claim turns a hold into a sale after payment: it decrements the ledger and
// deletes the hold in one transaction. It is idempotent: claiming a claimed
// reservation returns nil.
//
// Concurrent claims of one shop are grouped: those that arrive while a
// claim transaction is in flight are claimed together by the next one (at
// most 100), which updates each ledger row they touch once, as its last
// statement before COMMIT (see Claims and releases in groups in the
// package doc).
//
// Claim against expiry has one winner, decided by the database clock under
// the reservation's row lock: a claim that locks the reservation before
// expires_at wins, even if the sweeper is due (the sweeper skips rows a
// claim holds and finds them claimed). A claim at or after expires_at loses
// with ErrExpired, and returns the units to the pool itself if the sweeper
// has not yet done so.
func (e *Engine) Claim(ctx context.Context, shopID uint64, reservationID string) error {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Claim)
	start := time.Now()
	token := newToken()
	err := e.retry(ctx, opClaim, true, token, func(r *retrier) error {
		_, err := e.groupAttempt(ctx, r, opClaim, shopID, reservationID, token)
		if errors.Is(err, errDue) {
			return e.claimOnce(ctx, r, shopID, reservationID, token)
		}
		return err
	})
	e.metrics.op(ctx, opClaim, start, err)
	if err != nil {
		return fmt.Errorf("reservation: claim %s: %w", reservationID, err)
	}
	return nil
}

func (e *Engine) claimOnce(ctx context.Context, r *retrier, shopID uint64, id string, token uint64) error {
	tx, err := e.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	state, due, err := lockState(ctx, tx, r, shopID, id, token)
	if err != nil {
		return err
	}
	switch {
	case state == StateClaimed:
		return nil
	case state == StateReleased:
		return ErrReleased
	case state == StateExpired:
		return ErrExpired
	case due:
		lines, err := endHold(ctx, tx, shopID, id, StateExpired, token)
		if err != nil {
			return err
		}
		pooled, err := e.returnUnits(ctx, tx, lines)
		if err != nil {
			return err
		}
		if err := r.commit(ctx, tx, func() { e.expiredHolds(ctx, 1, pooled) }); err != nil {
			return err
		}
		return ErrExpired
	}
	lines, err := readHeld(ctx, tx, shopID, id)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, deleteReserved, shopID, id); err != nil {
		return classify(err)
	}
	for _, l := range lines { // sorted by item, group: claims lock ledger rows in one order
		if _, err := tx.ExecContext(ctx, claimLedger, l.qty, l.qty, shopID, l.key.ItemID, l.key.GroupID); err != nil {
			return classify(err)
		}
	}
	if _, err := tx.ExecContext(ctx, setState, StateClaimed, token, shopID, id); err != nil {
		return classify(err)
	}
	return r.commit(ctx, tx, func() { e.stats.claims.Add(1) })
}

// Release cancels a held reservation and returns its units to the pool
// (those that do not fit under Config.PoolSize to the ledger, still
// sellable). It is idempotent: releasing a released or expired reservation
// returns nil. Releasing a claimed one returns ErrClaimed. Concurrent
// releases of one shop are grouped like claims.
func (e *Engine) Release(ctx context.Context, shopID uint64, reservationID string) error {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Release)
	start := time.Now()
	token := newToken()
	err := e.retry(ctx, opRelease, true, token, func(r *retrier) error {
		_, err := e.groupAttempt(ctx, r, opRelease, shopID, reservationID, token)
		return err
	})
	e.metrics.op(ctx, opRelease, start, err)
	if err != nil {
		return fmt.Errorf("reservation: release %s: %w", reservationID, err)
	}
	return nil
}

// lockState locks a reservation row and reports its state and whether it
// is past expires_at by the database clock. The lock waits for any
// transaction that changed the row to end, so the row also says whether
// this call's own lost COMMIT (token) ended the hold: that resolves r.
func lockState(ctx context.Context, tx *sql.Tx, r *retrier, shopID uint64, id string, token uint64) (State, bool, error) {
	var state string
	var due bool
	var ended uint64
	err := tx.QueryRowContext(ctx, lockReservation, shopID, id).Scan(&state, &due, &ended)
	if errors.Is(err, sql.ErrNoRows) {
		r.resolved(false)
		return "", false, ErrNotFound
	}
	if err != nil {
		return "", false, classify(err)
	}
	r.resolved(State(state) != StateHeld && ended == token)
	if State(state) != StateHeld && ended != token {
		r.e.settle(ended) // an earlier call of this engine that could not learn its outcome
	}
	return State(state), due, nil
}

// readHeld returns what a reservation holds, in (item, group) order.
func readHeld(ctx context.Context, tx *sql.Tx, shopID uint64, id string) ([]keyQty, error) {
	rows, err := tx.QueryContext(ctx, selectReserved, shopID, id)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var lines []keyQty
	for rows.Next() {
		l := keyQty{key: ItemKey{ShopID: shopID}}
		if err := rows.Scan(&l.key.ItemID, &l.key.GroupID, &l.qty); err != nil {
			return nil, classify(err)
		}
		lines = append(lines, l)
	}
	return lines, classify(rows.Err())
}

// endHold ends a locked, held reservation: it deletes its reserved
// quantities and sets its final state, marked with the token of the
// operation, and returns what it held for returnUnits.
func endHold(ctx context.Context, tx *sql.Tx, shopID uint64, id string, state State, token uint64) ([]keyQty, error) {
	lines, err := readHeld(ctx, tx, shopID, id)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, deleteReserved, shopID, id); err != nil {
		return nil, classify(err)
	}
	if _, err := tx.ExecContext(ctx, setState, state, token, shopID, id); err != nil {
		return nil, classify(err)
	}
	return lines, nil
}

// returned records units a committed release or expiry put back in pools.
func (e *Engine) returned(pooled []keyQty) {
	for _, l := range pooled {
		e.touch(l.key, l.qty)
	}
}

// expiredHolds records n committed expiries that pooled units.
func (e *Engine) expiredHolds(ctx context.Context, n int, pooled []keyQty) {
	e.returned(pooled)
	e.stats.expired.Add(int64(n))
	e.metrics.expired(ctx, n)
}

// ExpireDue ends every hold past its expiry, in batches of
// Config.ExpiryBatch, and returns how many it expired: their units go back
// to the pool as far as it has room under Config.PoolSize, the others to
// the ledger. Holds that a claim or release is deciding are skipped (SKIP
// LOCKED). A batch whose COMMIT reply is lost is counted once it is known
// to have committed. Run calls it every Config.ExpiryInterval.
func (e *Engine) ExpireDue(ctx context.Context) (int, error) {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Expire)
	total := 0
	for {
		var n int
		var lost []reservationKey // the batch whose COMMIT reply was lost
		token := newToken()
		err := e.retry(ctx, opExpire, true, 0, func(r *retrier) (err error) {
			if r.doubt != nil {
				if n, err = e.resolveExpiry(ctx, r, lost, token); err != nil || n > 0 {
					return err
				}
			}
			n, lost, err = e.expireBatch(ctx, r, token)
			return err
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("reservation: expire: %w", err)
		}
		if n < e.cfg.ExpiryBatch {
			return total, nil
		}
	}
}

// reservationKey names a reservation.
type reservationKey struct {
	shopID uint64
	id     string
}

// expireBatch expires one batch of due holds, marked with token. On a lost
// COMMIT reply it returns the batch with the error, for resolveExpiry.
func (e *Engine) expireBatch(ctx context.Context, r *retrier, token uint64) (int, []reservationKey, error) {
	tx, err := e.begin(ctx)
	if err != nil {
		return 0, nil, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, selectDue, e.cfg.ExpiryBatch)
	if err != nil {
		return 0, nil, classify(err)
	}
	var batch []reservationKey
	for rows.Next() {
		var d reservationKey
		if err := rows.Scan(&d.shopID, &d.id); err != nil {
			rows.Close()
			return 0, nil, classify(err)
		}
		batch = append(batch, d)
	}
	if err := rows.Close(); err != nil {
		return 0, nil, classify(err)
	}
	if len(batch) == 0 {
		return 0, nil, nil
	}
	var held []keyQty
	for _, d := range batch {
		lines, err := endHold(ctx, tx, d.shopID, d.id, StateExpired, token)
		if err != nil {
			return 0, nil, err
		}
		held = append(held, lines...)
	}
	pooled, err := e.returnUnits(ctx, tx, held)
	if err != nil {
		return 0, nil, err
	}
	if err := r.commit(ctx, tx, func() { e.expiredHolds(ctx, len(batch), pooled) }); err != nil {
		return 0, batch, err
	}
	return len(batch), nil, nil
}

// resolveExpiry learns whether the batch whose COMMIT reply was lost
// committed: it locks the batch's reservation rows (waiting for that
// transaction to end on the server) and counts those it ended. It returns
// that count (the whole batch or none).
func (e *Engine) resolveExpiry(ctx context.Context, r *retrier, batch []reservationKey, token uint64) (int, error) {
	tx, err := e.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var q strings.Builder
	q.WriteString(lockEndTokensPrefix)
	args := make([]any, 0, 2*len(batch))
	for i, d := range batch {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(deleteReservationsRow)
		args = append(args, d.shopID, d.id)
	}
	q.WriteString(lockEndTokensSuffix)
	rows, err := tx.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return 0, classify(err)
	}
	n := 0
	for rows.Next() {
		var got uint64
		if err := rows.Scan(&got); err != nil {
			rows.Close()
			return 0, classify(err)
		}
		if got == token {
			n++
		}
	}
	if err := rows.Close(); err != nil {
		return 0, classify(err)
	}
	r.resolved(n > 0)
	return n, nil
}
