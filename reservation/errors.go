package reservation

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"

	"github.com/go-sql-driver/mysql"
)

var (
	// ErrInsufficientStock means the ledger cannot cover a cart line: the
	// item is sold out (or has fewer units than asked) in every eligible
	// location group. It is never returned because of contention.
	ErrInsufficientStock = errors.New("reservation: insufficient stock")
	// ErrNotFound means no reservation has the given id in the shop.
	ErrNotFound = errors.New("reservation: not found")
	// ErrExpired means the hold expired before the claim: its units went
	// back to the pool. Reserve again to buy.
	ErrExpired = errors.New("reservation: expired")
	// ErrReleased means the reservation was released (cancelled) before the
	// claim.
	ErrReleased = errors.New("reservation: released")
	// ErrClaimed means Release was called on a reservation already claimed.
	ErrClaimed = errors.New("reservation: already claimed")
	// ErrRetryable matches errors worth retrying later with the same
	// reservation id (or StockParams.AdjustmentID): deadlocks, lock wait
	// timeouts, lost connections and contention that outlasted
	// Config.RetryBudget, and outcomes left unknown that a retry resolves.
	ErrRetryable = errors.New("reservation: retryable")
	// ErrOutcomeUnknown means a COMMIT was sent and its reply never came
	// (the connection broke, or ctx ended, while it was in flight), and the
	// engine could not learn within Config.RetryBudget whether it took
	// effect. The error is an *OutcomeUnknownError; it also matches
	// ErrRetryable when a retry is safe (see OutcomeUnknownError.Retryable).
	ErrOutcomeUnknown = errors.New("reservation: outcome unknown")
	// ErrAdjustmentConflict means a StockParams.AdjustmentID was already used
	// for a different change (another item or quantity): nothing was
	// changed. Use a new id for a new change.
	ErrAdjustmentConflict = errors.New("reservation: adjustment id already used for a different change")

	// ErrMigrateLocked means Migrate waited Config.MigrateLockWait for the
	// migration lock and another Migrate (another instance starting) still
	// held it. Retry once that one has finished.
	ErrMigrateLocked = errors.New("reservation: migrate: the migration lock is taken")

	// ErrDeadlock is MySQL error 1213; it matches ErrRetryable.
	ErrDeadlock = &retryableSentinel{"reservation: deadlock (MySQL 1213)"}
	// ErrLockWaitTimeout is MySQL error 1205; it matches ErrRetryable.
	ErrLockWaitTimeout = &retryableSentinel{"reservation: lock wait timeout (MySQL 1205)"}
	// ErrConnectionLost means the connection broke mid-operation (killed,
	// server restart, network). Whether the last COMMIT landed is unknown,
	// which is why every operation is idempotent. It matches ErrRetryable.
	ErrConnectionLost = &retryableSentinel{"reservation: connection lost"}

	// errContention is a short read whose units exist per the ledger but
	// are locked by in-flight transactions.
	errContention = &retryableSentinel{"reservation: units are locked by in-flight reservations"}
	// errUnitsMismatch means a reserve deleted fewer units than it locked:
	// a bug (a unit handed out twice). The transaction rolls back.
	errUnitsMismatch = errors.New("reservation: internal error: units locked and units deleted differ " +
		"(nothing was reserved; please report this)")
	// errAdjustmentRaced is a stock change that lost the race for its
	// AdjustmentID to a concurrent call: the retry reads the winner's record.
	errAdjustmentRaced = &retryableSentinel{"reservation: another call applied the same AdjustmentID first"}
	// errDuplicate is MySQL error 1062 on the reservation id: a retry.
	errDuplicate = errors.New("reservation: duplicate reservation id")
)

// retryableSentinel is a sentinel that also matches ErrRetryable.
type retryableSentinel struct{ msg string }

func (e *retryableSentinel) Error() string        { return e.msg }
func (e *retryableSentinel) Is(target error) bool { return target == ErrRetryable }

// RetryableError is returned when an operation kept failing with retryable
// errors until Config.RetryBudget ran out. It matches ErrRetryable and
// unwraps to the last error.
type RetryableError struct {
	Op       string // "reserve", "claim", "release", "receive", "adjust", "refill", "expire", "prune"
	Attempts int
	Err      error
}

func (e *RetryableError) Error() string {
	return fmt.Sprintf("reservation: %s gave up after %d attempts within Config.RetryBudget: %v "+
		"(call again later with the same reservation id or AdjustmentID, or raise Config.RetryBudget)", e.Op, e.Attempts, e.Err)
}

func (e *RetryableError) Unwrap() error        { return e.Err }
func (e *RetryableError) Is(target error) bool { return target == ErrRetryable }

// OutcomeUnknownError is returned when the reply to an operation's COMMIT
// was lost and the engine could not find out within Config.RetryBudget (or
// before ctx ended) whether the COMMIT took effect. It matches
// ErrOutcomeUnknown, and ErrRetryable when Retryable is true.
type OutcomeUnknownError struct {
	Op string // "reserve", "claim", "release", "adjust", "receive", "expire", "refill", "prune"
	// Retryable reports whether calling again with the same arguments is
	// safe, that is applies the change at most once and returns its
	// outcome: true for Reserve, Claim and Release (same reservation id),
	// for Receive and Adjust with a StockParams.AdjustmentID, and for the
	// background work. False for Receive and Adjust without one: read the
	// ledger (Available) before changing it again.
	Retryable bool
	// Err is the last error the engine saw: the lost connection, the end of
	// ctx, or a *RetryableError.
	Err error
}

func (e *OutcomeUnknownError) Error() string {
	hint := "call again with the same id: a retry applies it at most once and returns its outcome"
	if !e.Retryable {
		hint = "read the ledger before you change it again: without StockParams.AdjustmentID a retry may apply the change twice"
	}
	return fmt.Sprintf("reservation: %s: outcome unknown: the reply to COMMIT was lost and the database did not say "+
		"within Config.RetryBudget whether it took effect (%v); %s", e.Op, e.Err, hint)
}

func (e *OutcomeUnknownError) Is(target error) bool {
	return target == ErrOutcomeUnknown || e.Retryable && target == ErrRetryable
}

// Unwrap returns Err, except an Err that matches ErrRetryable when a retry
// is not safe: errors.Is must not find ErrRetryable through it.
func (e *OutcomeUnknownError) Unwrap() error {
	if !e.Retryable && errors.Is(e.Err, ErrRetryable) {
		return nil
	}
	return e.Err
}

// inDoubtError is a COMMIT whose reply never came: it may or may not have
// taken effect. It never leaves the package: the retry that follows reads
// what the attempt wrote (waiting for it to end on the server) and learns
// which, or the operation returns an *OutcomeUnknownError.
type inDoubtError struct{ err error }

func (e *inDoubtError) Error() string        { return "reply to COMMIT lost: " + e.err.Error() }
func (e *inDoubtError) Unwrap() error        { return classify(e.err) }
func (e *inDoubtError) Is(target error) bool { return target == ErrRetryable }

// commit commits tx. A COMMIT that was sent and got no answer (the
// connection broke, or ctx ended while it was in flight) returns an
// *inDoubtError; one the server refused, or one never sent because ctx
// had already ended (database/sql then rolls back), is an ordinary error.
func commit(ctx context.Context, tx *sql.Tx) error {
	if err := ctx.Err(); err != nil {
		tx.Rollback()
		return err
	}
	err := tx.Commit()
	if err == nil || errors.Is(err, sql.ErrTxDone) {
		return err
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) && !errors.Is(classify(err), ErrConnectionLost) {
		return classify(err) // the server answered: not committed
	}
	return &inDoubtError{err: err}
}

// dbError joins a sentinel to the driver error it was mapped from, so that
// errors.Is sees the sentinel and errors.As still finds *mysql.MySQLError.
type dbError struct {
	sentinel error
	err      error
}

func (e *dbError) Error() string   { return e.sentinel.Error() + ": " + e.err.Error() }
func (e *dbError) Unwrap() []error { return []error{e.sentinel, e.err} }

// MySQL and MariaDB error numbers the engine acts on.
const (
	errNumLockWaitTimeout  = 1205
	errNumDeadlock         = 1213
	errNumDuplicate        = 1062
	errNumQueryInterrupted = 1317 // KILL QUERY
	errNumServerShutdown   = 1053
	errNumConnKilled       = 1927 // MariaDB ER_CONNECTION_KILLED
	errNumServerGone       = 2006
	errNumServerLost       = 2013
)

// classify maps database errors to the package's sentinels. It is the only
// place that knows MySQL error numbers. Unknown errors are returned as is.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var sentinel error
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me):
		switch me.Number {
		case errNumDeadlock:
			sentinel = ErrDeadlock
		case errNumLockWaitTimeout:
			sentinel = ErrLockWaitTimeout
		case errNumDuplicate:
			sentinel = errDuplicate
		case errNumQueryInterrupted, errNumServerShutdown, errNumConnKilled, errNumServerGone, errNumServerLost:
			sentinel = ErrConnectionLost
		}
	case errors.Is(err, mysql.ErrInvalidConn), errors.Is(err, driver.ErrBadConn),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		sentinel = ErrConnectionLost
	}
	if sentinel == nil {
		return err
	}
	return &dbError{sentinel: sentinel, err: err}
}
