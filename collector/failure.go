package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Failure says what kind of failure took a source down (SourceStatus.Failure),
// so that a front end can say what to fix and whether waiting can help.
type Failure string

// The kinds of failure. FailureTimeout, FailureClosed and FailureOther may
// pass by waiting; the others need the address, the credentials or the
// grants fixed.
const (
	FailureRefused      Failure = "connection_refused" // nothing listens at the address
	FailureUnknownHost  Failure = "unknown_host"       // the host name does not resolve
	FailureNoSocket     Failure = "no_socket"          // no unix socket at the path
	FailureTimeout      Failure = "timeout"            // no answer in time
	FailureNotMySQL     Failure = "not_mysql"          // the peer does not speak the MySQL protocol
	FailureClosed       Failure = "connection_closed"  // the peer hung up mid-protocol
	FailureAccessDenied Failure = "access_denied"      // wrong user or password
	FailureUnknownDB    Failure = "unknown_database"   // the DSN names a database that does not exist
	FailurePrivilege    Failure = "missing_privilege"  // logged in, but may not read what the source needs
	FailureOther        Failure = "other"
)

// Permanent reports whether waiting cannot fix the failure.
func (f Failure) Permanent() bool {
	return f != FailureTimeout && f != FailureClosed && f != FailureOther && f != ""
}

// FailureOf classifies a source's (or any MySQL connection's) error from
// its type, never from its text.
func FailureOf(err error) Failure {
	if err == nil {
		return ""
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1045, 1698: // ER_ACCESS_DENIED_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR
			return FailureAccessDenied
		case 1049: // ER_BAD_DB_ERROR
			return FailureUnknownDB
		case 1044, 1142, 1143, 1227: // database, table, column access denied; PROCESS needed
			return FailurePrivilege
		}
		return FailureOther
	}
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return FailureRefused
	case errors.As(err, &dns) && dns.IsNotFound:
		return FailureUnknownHost
	case errors.Is(err, syscall.ENOENT):
		return FailureNoSocket
	case errors.Is(err, mysql.ErrMalformPkt), errors.Is(err, mysql.ErrPktSync), errors.Is(err, mysql.ErrPktSyncMul):
		return FailureNotMySQL
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return FailureTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return FailureClosed
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return FailureTimeout
	}
	return FailureOther
}

// causeLogger receives go-sql-driver's log lines. The driver answers a
// broken read with "invalid connection" and logs the network error behind
// it (a timeout, the peer hanging up): the last one is kept so that a failed
// poll can say, and classify, what happened.
type causeLogger struct {
	mu  sync.Mutex
	err error
	at  time.Time
}

func (l *causeLogger) Print(v ...any) {
	for _, x := range v {
		if err, ok := x.(error); ok {
			l.mu.Lock()
			l.err, l.at = err, time.Now()
			l.mu.Unlock()
		}
	}
}

// explain adds to err the network error the driver logged since start,
// when err is the driver's "invalid connection" that hides it.
func (l *causeLogger) explain(err error, start time.Time) error {
	if l == nil || !errors.Is(err, mysql.ErrInvalidConn) {
		return err
	}
	l.mu.Lock()
	cause, at := l.err, l.at
	l.mu.Unlock()
	if cause == nil || at.Before(start) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, cause)
}
