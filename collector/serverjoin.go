package collector

import (
	"sync"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
	"github.com/holdtime/holdtime/collector/internal/trxjoin"
)

// The proxy↔server join. A ProxySQL session holding a backend names that
// backend exactly: extended_info's backends[].conn.mysql.thread_id is the
// server's connection id (with mysql-show_processlist_extended), and
// l_srv_host:l_srv_port is the HOST the server's processlist shows for it.
// A ProxySQL session idle with a backend (in a transaction, or pinned)
// takes the tag of what that backend's server thread ran in its current
// transaction or pin, by thread and event order (package trxjoin), without
// the events log or spans.
//
// The two sides meet on the board, never through each other: the ProxySQL
// sampler leaves the backends it sees held (want), the MySQL source reads
// their performance_schema evidence each poll (trxjoin.ReadServer) and
// leaves the reads here (addRead), and the sampler decides its samples from
// them (decide).

// joinReadsKept is how long the server's reads are kept: longer than a
// sample may stay pending (joinPendingMax) plus a poll.
const joinReadsKept = 10 * time.Second

// joinWantedFor is how long a backend the sampler saw held stays read: the
// read before a sample must already include its backend, and a pooled
// backend is taken again soon. Every connection from a host ProxySQL
// connects from is read too (a new backend, before its first hold), and,
// until a sample has shown one, every connection up to joinReadAll.
const joinWantedFor = 30 * time.Second

// joinReadAll bounds the connections read before any ProxySQL sample has
// shown the host its backends connect from.
const joinReadAll = 256

// serverJoin is what one MySQL target shares with the ProxySQL targets of
// the same collector, under its own lock.
type serverJoin struct {
	// proxied is set (before Run) when the collector has ProxySQL targets:
	// without, nothing is read.
	proxied bool
	mu      sync.Mutex
	listed  map[int64]listedConn // by processlist id, also gone ones for joinReadsKept
	byHost  map[attrib.HostPort]int64
	wanted  map[int64]time.Time // processlist id -> when a sampler last showed it held
	from    map[string]bool     // the hosts those backends connected from
	reads   []trxjoin.Read      // by Start
}

func newServerJoin() *serverJoin {
	return &serverJoin{listed: map[int64]listedConn{}, byHost: map[attrib.HostPort]int64{}, wanted: map[int64]time.Time{},
		from: map[string]bool{}}
}

// listedConn is a server connection the processlist showed.
type listedConn struct {
	host string // HOST without its port
	seen time.Time
	gone bool // not in the last listing
}

// update records the connection list read at `at`: hosts maps the listed
// connection ids to their HOST. A connection that left the list is kept
// for joinReadsKept: a session's run is decided after it ended, and a
// backend ProxySQL closed at the session's end (a user-variable pin) is
// still this server's.
func (j *serverJoin) update(at time.Time, hosts map[int64]string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for id, c := range j.listed {
		if _, ok := hosts[id]; ok {
			continue
		}
		if at.Sub(c.seen) <= joinReadsKept {
			c.gone = true
			j.listed[id] = c
			continue
		}
		delete(j.listed, id)
		for hp, x := range j.byHost {
			if x == id {
				delete(j.byHost, hp)
			}
		}
	}
	for id, h := range hosts {
		hp := attrib.ParseHostPort(h)
		j.listed[id] = listedConn{host: hp.Host, seen: at}
		if hp != (attrib.HostPort{}) {
			j.byHost[hp] = id
		}
	}
}

// reset forgets everything: the server restarted.
func (j *serverJoin) reset() {
	j.mu.Lock()
	defer j.mu.Unlock()
	clear(j.listed)
	clear(j.byHost)
	clear(j.wanted)
	clear(j.from)
	j.reads = nil
}

// idOf finds the server connection of a backend on this server. With both
// a thread id and a local address, both must agree: a thread id of another
// server behind the same ProxySQL would otherwise match by chance.
func (j *serverJoin) idOf(k attrib.BackendKey) (int64, bool) {
	if k.Local != (attrib.HostPort{}) {
		id, ok := j.byHost[k.Local]
		if !ok || k.Thread != 0 && id != k.Thread {
			return 0, false
		}
		return id, true
	}
	if _, ok := j.listed[k.Thread]; !ok {
		return 0, false
	}
	return k.Thread, true
}

// want records the backends a ProxySQL sample showed held at `at`; those
// on this server are read from then on.
func (j *serverJoin) want(at time.Time, keys []attrib.BackendKey) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, k := range keys {
		if id, ok := j.idOf(k); ok {
			j.wanted[id] = at
			if k.Local.Host != "" {
				j.from[k.Local.Host] = true
			}
		}
	}
}

// wantedIDs lists the processlist ids to read now: the backends shown held
// within joinWantedFor and the connections from their hosts; before any
// host is known, every listed connection (up to joinReadAll).
func (j *serverJoin) wantedIDs(now time.Time) []int64 {
	if !j.proxied {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	ids := make([]int64, 0, len(j.wanted))
	for id, at := range j.wanted {
		if now.Sub(at) > joinWantedFor {
			delete(j.wanted, id)
			continue
		}
		ids = append(ids, id)
	}
	for id, c := range j.listed {
		if !c.gone && (len(j.from) == 0 && len(ids) < joinReadAll || j.from[c.host]) && j.wanted[id].IsZero() {
			ids = append(ids, id)
		}
	}
	return ids
}

// addRead keeps a read of the server and drops those older than
// joinReadsKept.
func (j *serverJoin) addRead(r trxjoin.Read) {
	j.mu.Lock()
	defer j.mu.Unlock()
	i := 0
	for i < len(j.reads) && r.Start.Sub(j.reads[i].End) > joinReadsKept {
		i++
	}
	j.reads = append(j.reads[i:], r)
}

// decide names the holder of backend k sampled idle over s.Start..s.End
// from this server's reads. ok is false when the backend is not this
// server's.
func (j *serverJoin) decide(k attrib.BackendKey, s trxjoin.Sample) (_ trxjoin.Result, ok bool) {
	j.mu.Lock()
	id, ok := j.idOf(k)
	// Reads are never changed once added: the slice header is enough.
	reads := j.reads
	j.mu.Unlock()
	if !ok {
		return trxjoin.Result{}, false
	}
	s.Backend = id
	return trxjoin.Decide(reads, s), true
}
