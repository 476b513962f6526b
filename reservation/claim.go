package reservation

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/holdtime/holdtime/conntag"
)

// Claim turns a hold into a sale after payment: it decrements the ledger and
// deletes the hold in one transaction. It is idempotent: claiming a claimed
// reservation returns nil.
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
	err := e.retry(ctx, opClaim, func() error { return e.claimOnce(ctx, shopID, reservationID) })
	e.metrics.op(ctx, opClaim, start, err)
	if err != nil {
		return fmt.Errorf("reservation: claim %s: %w", reservationID, err)
	}
	return nil
}

func (e *Engine) claimOnce(ctx context.Context, shopID uint64, id string) error {
	tx, err := e.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	state, due, err := lockState(ctx, tx, shopID, id)
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
		lines, err := e.endHold(ctx, tx, shopID, id, StateExpired)
		if err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return classify(err)
		}
		e.returned(shopID, lines)
		e.stats.expired.Add(1)
		e.metrics.expired(ctx, 1)
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
		if _, err := tx.ExecContext(ctx, claimLedger, l.Quantity, l.Quantity, shopID, l.ItemID, l.GroupID); err != nil {
			return classify(err)
		}
	}
	if _, err := tx.ExecContext(ctx, setState, StateClaimed, shopID, id); err != nil {
		return classify(err)
	}
	if err := tx.Commit(); err != nil {
		return classify(err)
	}
	e.stats.claims.Add(1)
	return nil
}

// Release cancels a held reservation and returns its units to the pool. It
// is idempotent: releasing a released or expired reservation returns nil.
// Releasing a claimed one returns ErrClaimed.
func (e *Engine) Release(ctx context.Context, shopID uint64, reservationID string) error {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Release)
	start := time.Now()
	err := e.retry(ctx, opRelease, func() error { return e.releaseOnce(ctx, shopID, reservationID) })
	e.metrics.op(ctx, opRelease, start, err)
	if err != nil {
		return fmt.Errorf("reservation: release %s: %w", reservationID, err)
	}
	return nil
}

func (e *Engine) releaseOnce(ctx context.Context, shopID uint64, id string) error {
	tx, err := e.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	state, _, err := lockState(ctx, tx, shopID, id)
	if err != nil {
		return err
	}
	switch state {
	case StateClaimed:
		return ErrClaimed
	case StateReleased, StateExpired:
		return nil
	}
	lines, err := e.endHold(ctx, tx, shopID, id, StateReleased)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return classify(err)
	}
	e.returned(shopID, lines)
	e.stats.releases.Add(1)
	return nil
}

// lockState locks a reservation row and reports its state and whether it
// is past expires_at by the database clock.
func lockState(ctx context.Context, tx *sql.Tx, shopID uint64, id string) (State, bool, error) {
	var state string
	var due bool
	err := tx.QueryRowContext(ctx, lockReservation, shopID, id).Scan(&state, &due)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, ErrNotFound
	}
	if err != nil {
		return "", false, classify(err)
	}
	return State(state), due, nil
}

func readHeld(ctx context.Context, tx *sql.Tx, shopID uint64, id string) ([]ReservedLine, error) {
	rows, err := tx.QueryContext(ctx, selectReserved, shopID, id)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var lines []ReservedLine
	for rows.Next() {
		var l ReservedLine
		if err := rows.Scan(&l.ItemID, &l.GroupID, &l.Quantity); err != nil {
			return nil, classify(err)
		}
		lines = append(lines, l)
	}
	return lines, classify(rows.Err())
}

// endHold returns the units of a locked, held reservation to the pool and
// sets its final state, returning the lines it returned. The pool inserts
// are fresh rows that wait on no lock, so taking them after the
// reservation lock keeps the lock order (units, reserved quantities,
// ledger) free of cycles.
func (e *Engine) endHold(ctx context.Context, tx *sql.Tx, shopID uint64, id string, state State) ([]ReservedLine, error) {
	lines, err := readHeld(ctx, tx, shopID, id)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, deleteReserved, shopID, id); err != nil {
		return nil, classify(err)
	}
	for _, l := range lines {
		if err := e.addToPool(ctx, tx, ItemKey{shopID, l.ItemID, l.GroupID}, l.Quantity); err != nil {
			return nil, err
		}
	}
	_, err = tx.ExecContext(ctx, setState, state, shopID, id)
	return lines, classify(err)
}

// returned records units a committed release or expiry put back in pools.
func (e *Engine) returned(shopID uint64, lines []ReservedLine) {
	for _, l := range lines {
		e.touch(ItemKey{shopID, l.ItemID, l.GroupID}, l.Quantity)
	}
}

// ExpireDue returns every hold past its expiry to the pool, in batches of
// Config.ExpiryBatch, and returns how many it expired. Holds that a claim or
// release is deciding are skipped (SKIP LOCKED). Run calls it every
// Config.ExpiryInterval.
func (e *Engine) ExpireDue(ctx context.Context) (int, error) {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Expire)
	total := 0
	for {
		var n int
		err := e.retry(ctx, opExpire, func() (err error) { n, err = e.expireBatch(ctx); return err })
		total += n
		if err != nil {
			return total, fmt.Errorf("reservation: expire: %w", err)
		}
		if n < e.cfg.ExpiryBatch {
			return total, nil
		}
	}
}

func (e *Engine) expireBatch(ctx context.Context) (int, error) {
	tx, err := e.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, selectDue, e.cfg.ExpiryBatch)
	if err != nil {
		return 0, classify(err)
	}
	type due struct {
		shopID uint64
		id     string
	}
	var batch []due
	for rows.Next() {
		var d due
		if err := rows.Scan(&d.shopID, &d.id); err != nil {
			rows.Close()
			return 0, classify(err)
		}
		batch = append(batch, d)
	}
	if err := rows.Close(); err != nil {
		return 0, classify(err)
	}
	var ended [][]ReservedLine
	for _, d := range batch {
		lines, err := e.endHold(ctx, tx, d.shopID, d.id, StateExpired)
		if err != nil {
			return 0, err
		}
		ended = append(ended, lines)
	}
	if err := tx.Commit(); err != nil {
		return 0, classify(err)
	}
	for i, d := range batch {
		e.returned(d.shopID, ended[i])
	}
	e.stats.expired.Add(int64(len(batch)))
	e.metrics.expired(ctx, len(batch))
	return len(batch), nil
}

// retry runs attempt until it succeeds, fails for good, or the retry budget
// runs out.
func (e *Engine) retry(ctx context.Context, op string, attempt func() error) error {
	r := e.newRetrier(op)
	for {
		err := attempt()
		if err == nil {
			return nil
		}
		if err = r.again(ctx, err); err != nil {
			return err
		}
	}
}
