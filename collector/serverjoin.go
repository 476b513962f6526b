package collector

import (
	"slices"
	"sync"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
)

// The proxy↔server join. A ProxySQL session holding a backend names that
// backend exactly: extended_info's backends[].conn.mysql.thread_id is the
// server's connection id (with mysql-show_processlist_extended), and
// l_srv_host:l_srv_port is the HOST the server's processlist shows for it.
// The MySQL source records, per server connection, the statements it saw
// complete with their start and end on the collector's clock; a ProxySQL
// session idle with a backend (in a transaction, or pinned) then takes the
// tag of what its backend ran: exact, without the events log or spans.

// joinStmtKind says what a server statement says about a transaction.
type joinStmtKind uint8

const (
	joinStatement joinStmtKind = iota // names its tag
	joinBegin                         // BEGIN / START TRANSACTION
	joinEnd                           // COMMIT / ROLLBACK
)

// joinStmt is one completed statement of a server connection.
type joinStmt struct {
	kind       joinStmtKind
	tag        string // joinStatement only
	start, end time.Time
}

// maxJoinStmts bounds the statements kept per server connection: a
// ProxySQL sample needs the last few before it.
const maxJoinStmts = 64

// takeSlack is how long after a sample a borrow's first statement may
// reach the server and still be the borrow the sample showed: ProxySQL
// attaches the backend before forwarding (measured: 2-10 ms on loopback),
// plus the error of mapping the server's timer to the collector's clock.
const takeSlack = 25 * time.Millisecond

// joinStmtsKept is how long statements are kept: longer than any tag grace.
const joinStmtsKept = 2 * time.Minute

type joinConn struct {
	host  string
	stmts []joinStmt // by start
	seen  time.Time
}

// serverJoin is what one MySQL target publishes for the join. It is read by
// the ProxySQL sessions of the same collector, under its own lock.
type serverJoin struct {
	mu     sync.Mutex
	conns  map[int64]*joinConn
	byHost map[attrib.HostPort]int64
	// through is the collector time up to which completed statements have
	// been read: a statement that started before it and has ended is known.
	through time.Time
}

func newServerJoin() *serverJoin {
	return &serverJoin{conns: map[int64]*joinConn{}, byHost: map[attrib.HostPort]int64{}}
}

// update replaces the connection list and appends the statements completed
// since the last poll. hosts maps listed connection ids to their HOST.
func (j *serverJoin) update(at, through time.Time, hosts map[int64]string, stmts map[int64][]joinStmt) {
	j.mu.Lock()
	defer j.mu.Unlock()
	clear(j.byHost)
	for id, h := range hosts {
		c := j.conns[id]
		if c == nil {
			c = &joinConn{}
			j.conns[id] = c
		}
		if c.host != h {
			c.host, c.stmts = h, c.stmts[:0] // another connection with a reused id
		}
		c.seen = at
		if hp := attrib.ParseHostPort(h); hp != (attrib.HostPort{}) {
			j.byHost[hp] = id
		}
	}
	for id, ss := range stmts {
		c := j.conns[id]
		if c == nil {
			continue // ended before it was listed: no ProxySQL session holds it
		}
		c.stmts = append(c.stmts, ss...)
		slices.SortStableFunc(c.stmts, func(a, b joinStmt) int { return a.start.Compare(b.start) })
		if n := len(c.stmts); n > maxJoinStmts {
			c.stmts = append(c.stmts[:0], c.stmts[n-maxJoinStmts:]...)
		}
	}
	for id, c := range j.conns {
		if at.Sub(c.seen) > joinStmtsKept {
			delete(j.conns, id)
			continue
		}
		i := 0
		for i < len(c.stmts) && at.Sub(c.stmts[i].end) > joinStmtsKept {
			i++
		}
		if i > 0 {
			c.stmts = append(c.stmts[:0], c.stmts[i:]...)
		}
	}
	if through.After(j.through) {
		j.through = through
	}
}

// reset forgets everything: the server restarted.
func (j *serverJoin) reset() {
	j.mu.Lock()
	defer j.mu.Unlock()
	clear(j.conns)
	clear(j.byHost)
}

// conn finds the server connection of a backend. With both a thread id and
// a local address, both must agree: a thread id of another server behind
// the same ProxySQL would otherwise match by chance.
func (j *serverJoin) conn(k attrib.BackendKey) *joinConn {
	if k.Local != (attrib.HostPort{}) {
		id, ok := j.byHost[k.Local]
		if !ok || k.Thread != 0 && id != k.Thread {
			return nil
		}
		return j.conns[id]
	}
	return j.conns[k.Thread]
}

// joinResult is what the join says of a run of idle samples.
type joinResult uint8

const (
	joinNotYet  joinResult = iota // the server has not read far enough: ask again
	joinTagged                    // tag found
	joinNothing                   // the server knows this backend and saw nothing that names it
	joinNoConn                    // no server connection of this collector matches
)

// tagOfIdle names the hold of a backend sampled idle from first to last:
// the tag of the last statement the backend started before first (what the
// session did on it just before it went idle), or, when that statement was
// a BEGIN, the first statement of that transaction. A COMMIT before first
// means the session kept the backend after its transaction (a pin): the
// statement before the COMMIT names it.
func (j *serverJoin) tagOfIdle(k attrib.BackendKey, first, last time.Time) (string, joinResult) {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := j.conn(k)
	if c == nil {
		return "", joinNoConn
	}
	if j.through.Before(first) {
		return "", joinNotYet
	}
	i := -1 // the last statement started at or before first
	for n := range c.stmts {
		if c.stmts[n].start.After(first) {
			break
		}
		i = n
	}
	// ProxySQL shows a backend attached a few milliseconds before the
	// session's BEGIN (or its settings) reaches the server: a borrow that
	// starts right after first is the one sampled, not the statement of
	// the previous borrower before it.
	if n := i + 1; n < len(c.stmts) && c.stmts[n].kind == joinBegin && c.stmts[n].start.Sub(first) <= takeSlack &&
		(i < 0 || c.stmts[i].kind != joinBegin) {
		i = n
	}
	switch {
	case i >= 0 && c.stmts[i].kind == joinStatement:
		return c.stmts[i].tag, joinTagged
	case i >= 0 && c.stmts[i].kind == joinEnd:
		for n := i - 1; n >= 0 && c.stmts[n].kind != joinBegin; n-- {
			if c.stmts[n].kind == joinStatement {
				return c.stmts[n].tag, joinTagged
			}
		}
		return "", joinNothing
	}
	// A BEGIN (or nothing yet) before the run: the transaction's first
	// statement names it, once the server has read it.
	for n := i + 1; n < len(c.stmts); n++ {
		switch c.stmts[n].kind {
		case joinStatement:
			return c.stmts[n].tag, joinTagged
		case joinEnd, joinBegin:
			return "", joinNothing
		}
	}
	// The transaction's first statement has not been read yet (or is
	// still running): the sampler keeps the run pending and asks again.
	return "", joinNotYet
}
