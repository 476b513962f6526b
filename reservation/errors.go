package reservation

import (
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
	// reservation id: deadlocks, lock wait timeouts, lost connections and
	// contention that outlasted Config.RetryBudget.
	ErrRetryable = errors.New("reservation: retryable")

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
	Op       string // "reserve", "claim", "release", "refill", "expire"
	Attempts int
	Err      error
}

func (e *RetryableError) Error() string {
	return fmt.Sprintf("reservation: %s gave up after %d attempts within Config.RetryBudget: %v "+
		"(retry later with the same reservation id, or raise Config.RetryBudget)", e.Op, e.Attempts, e.Err)
}

func (e *RetryableError) Unwrap() error        { return e.Err }
func (e *RetryableError) Is(target error) bool { return target == ErrRetryable }

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
