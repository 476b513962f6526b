package collector

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/locks"
)

// SourceMySQLLocks is the MySQL source's lock and thread reader
// (MySQLConfig.LocksInterval): locks per tag and kind, deadlocks, thread
// saturation. It has no per-tag hold figures.
const SourceMySQLLocks Source = "mysql_locks"

// lockFigures are what the last lock read of a server showed.
type lockFigures struct {
	// locks counts held and waited-for locks: (tag, kind, state) -> rows
	// (record kinds) or tables (table kinds).
	locks map[[3]string]int
	// deadlocks counts each deadlock once, by victim and other tag;
	// cumulative.
	deadlocks map[[2]string]float64
}

// locksReader reads a server's locks on its own connection. Its statements
// start with CollectorMarker (markedConnector: package locks cannot import
// this one), and the MySQL source also leaves the connection out by id.
type locksReader struct {
	m         *mysqlTarget
	db        *sql.DB
	reader    *locks.Reader
	deadlocks *locks.Deadlocks

	sat *saturationMetrics // the source's own figures without a tag

	mu         sync.Mutex
	cumulative map[[2]string]float64
	// waits are the (waiter, blocker) sessions of the last read, each
	// blocker found from the locks (locks.Snapshot.Waits).
	waits [][2]int64
}

// blockers returns the blockers the last lock read found for a waiting
// session: the MySQL source names a blocker by trx id only when that id is
// unique, and asks here otherwise.
func (l *locksReader) blockers(waiter int64) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int64
	for _, w := range l.waits {
		if w[0] == waiter {
			out = append(out, w[1])
		}
	}
	return out
}

func newLocksReader(m *mysqlTarget, dsn string, timeout time.Duration) (*locksReader, error) {
	mc, err := parseDSN(dsn, timeout)
	if err != nil {
		return nil, err
	}
	// Arguments inlined: a server-side prepared statement's execution has
	// no text on MariaDB, so no marker either.
	mc.InterpolateParams = true
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, errors.New("the DSN's options are not valid for go-sql-driver/mysql: check them")
	}
	// One connection, kept: its id is what the MySQL source leaves out.
	db := sql.OpenDB(markedConnector{conn})
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(10 * time.Minute)
	r, err := locks.New(db, locks.Config{ParseTag: ParseTag, SessionTag: m.transactionTag})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &locksReader{m: m, db: db, reader: r, deadlocks: locks.NewDeadlocks(64), cumulative: map[[2]string]float64{},
		sat: newSaturationMetrics(m.cfg.Name)}, nil
}

// transactionTag is the MySQL source's record of a session's current
// transaction's tag (from every statement it read, history_long included):
// what the lock reader uses when the server's last-10 history does not
// name a transaction.
func (m *mysqlTarget) transactionTag(id int64) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[id]
	if s == nil || s.tag == "" || s.ended || !s.inTrx {
		return "", false
	}
	return s.tag, true
}

// own records the reader's connection id with the MySQL source, which
// then never credits it. SELECT CONNECTION_ID() is a driver statement the
// source ignores.
func (l *locksReader) own(ctx context.Context) error {
	var id int64
	if err := l.db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		return fmt.Errorf("locks reader: connect: %w", err)
	}
	l.m.exclude(id)
	return nil
}

func (l *locksReader) poll(ctx context.Context) error {
	if err := l.own(ctx); err != nil {
		return err
	}
	snap, err := l.reader.Read(ctx)
	if err != nil {
		return err
	}
	if err := l.own(ctx); err != nil { // a reconnect during the read has another id
		return err
	}
	fresh, unnamed := l.deadlocks.Observe(snap)
	l.mu.Lock()
	l.waits = l.waits[:0]
	for _, w := range snap.Waits {
		if w.Waiting.ThreadID > 0 && w.Blocking.ThreadID > 0 {
			l.waits = append(l.waits, [2]int64{w.Waiting.ThreadID, w.Blocking.ThreadID})
		}
	}
	for _, d := range fresh {
		// Once per deadlock, however many transactions it had.
		l.cumulative[[2]string{d.VictimTag(), d.OtherTag()}]++
	}
	if unnamed > 0 {
		// Deadlocks the server counted whose detail was overwritten
		// before this read: counted, their tags unknown.
		l.cumulative[[2]string{UnknownTag, UnknownTag}] += float64(unnamed)
	}
	deadlocks := make(map[[2]string]float64, len(l.cumulative))
	for k, v := range l.cumulative {
		deadlocks[k] = v
	}
	l.mu.Unlock()
	l.sat.set(snap.Saturation, !snap.LockOutput.Needed || snap.LockOutput.Enabled)
	f := &lockFigures{locks: map[[3]string]int{}}
	st := l.m.st
	target := l.m.cfg.Name
	st.setGauges(target, SourceMySQLLocks, func(_ *series, g *gauges) {
		// Tags are capped against the server's own tag set: one bounded
		// set per target.
		sr := st.get(target, SourceMySQL)
		for _, c := range snap.LocksByTagKind() {
			tag := st.capTag(sr, cmpOr(c.Tag, UnknownTag))
			if c.Locks > 0 {
				f.locks[[3]string{tag, string(c.Kind), "held"}] += c.Locks
			}
			if c.Waiting > 0 {
				f.locks[[3]string{tag, string(c.Kind), "waiting"}] += c.Waiting
			}
		}
		f.deadlocks = map[[2]string]float64{}
		for k, v := range deadlocks {
			f.deadlocks[[2]string{st.capTag(sr, k[0]), st.capTag(sr, k[1])}] += v
		}
		g.locks = f
	})
	// Lock output off (MariaDB's default) is not a degradation: it is the
	// DBA's choice, shown by holdtime_mysql_lock_output_enabled 0, with
	// the statement that turns it on in `holdtime locks`.
	return nil
}

func (l *locksReader) close() error { return l.db.Close() }
