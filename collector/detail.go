package collector

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
	"github.com/holdtime/holdtime/collector/internal/trxjoin"
)

// TagDetail is GET /api/v1/tag?tag=NAME: what one tag holds now, beyond
// its row of /api/v1/top (which has its figures per layer and per source):
// the sessions holding a connection for it in the latest sample, why
// ProxySQL keeps their backends, its open transactions, the locks they
// hold or wait for, who blocks whom, and its deadlocks. Every list is per
// target, never summed over sources. Unknown lists what this collector
// cannot tell about the tag yet, and why.
type TagDetail struct {
	Tag string    `json:"tag"`
	At  time.Time `json:"at"`
	// Sessions are the ProxySQL sessions holding (or waiting for) a
	// backend for the tag in each target's latest sample.
	Sessions []DetailSession `json:"sessions"`
	// Pins counts the tag's sessions idle with a backend attached, per
	// target and the reason multiplexing is off (extended_info).
	Pins []DetailPin `json:"pins"`
	// Transactions are the tag's open InnoDB transactions per server.
	Transactions []DetailTransactions `json:"transactions"`
	// Locks are the InnoDB locks the tag's transactions hold or wait for,
	// per server, kind and state (rows for record kinds, tables for table
	// kinds).
	Locks []DetailLocks `json:"locks"`
	// LockWaits are the lock waits the tag is in, as the waiter or as the
	// blocker.
	LockWaits []DetailLockWait `json:"lock_waits"`
	// Deadlocks are the deadlocks the tag was in since the collector
	// started, as the victim or the other.
	Deadlocks []DetailDeadlock `json:"deadlocks"`
	// LongestHolds are the tag's longest completed holds that ended in
	// the last 5 minutes, up to 5 per target and source, longest first:
	// the events log's exact holds, and the processlist's runs of samples
	// of one borrow with the backend idle in one of them at least (their
	// span, known to a sample gap).
	LongestHolds []DetailHold `json:"longest_holds"`
	// Statements are the tag's statements (ProxySQL's digests) with the
	// most time in the last 5 minutes, up to 8 per target and source, most
	// first.
	Statements []DetailStatement `json:"statements"`
	// Frames is never filled (so never in the JSON): the tag's hottest
	// frames are in the apps' hold profiles, which the collector does not
	// read. Unknown says where they are.
	//
	// Deprecated: read the frames from the apps: holdtime top
	// --hold-profile URL, or go tool pprof on an app's
	// /debug/holdtime/profile (conntag.WithHoldProfile).
	Frames  []DetailFrame `json:"frames,omitempty"`
	Unknown []string      `json:"unknown,omitempty"`
}

// DetailSession is one ProxySQL session holding a backend (or waiting for
// one) in the latest sample.
type DetailSession struct {
	Target    string `json:"target"`
	SessionID int64  `json:"session_id"`
	// State is running (a statement), idle (a backend attached, nothing
	// running: pinned) or waiting (for a backend).
	State string `json:"state"`
	// PinReason says why ProxySQL keeps an idle session's backend.
	PinReason string `json:"pin_reason,omitempty"`
	// BackendThread is the server's connection id of the backend (0
	// without mysql-show_processlist_extended).
	BackendThread int64  `json:"backend_thread,omitempty"`
	User          string `json:"user,omitempty"`
	Hostgroup     int    `json:"hostgroup"`
	// TagFrom says how the session's tag is known: info (its running
	// statement), events_log, server_join (the statements of its backend's
	// open transaction on the MySQL server), carried (the last statement
	// seen in the same borrow), unknown.
	TagFrom string `json:"tag_from"`
}

// DetailPin counts pinned sessions of one reason.
type DetailPin struct {
	Target   string `json:"target"`
	Reason   string `json:"reason"`
	Sessions int    `json:"sessions"`
}

// DetailTransactions are a tag's open transactions on one server.
type DetailTransactions struct {
	Target        string  `json:"target"`
	Open          int     `json:"open"`
	OldestSeconds float64 `json:"oldest_seconds"`
	RowsLocked    int64   `json:"rows_locked"`
}

// DetailLocks counts a tag's locks of one kind and state on one server.
type DetailLocks struct {
	Target string `json:"target"`
	Kind   string `json:"kind"`
	State  string `json:"state"` // held, waiting
	Count  int    `json:"count"`
}

// DetailLockWait is a lock wait between two tags on one server.
type DetailLockWait struct {
	Target     string `json:"target"`
	WaiterTag  string `json:"waiter_tag"`
	BlockerTag string `json:"blocker_tag"`
	Waits      int    `json:"waits"`
}

// DetailDeadlock counts deadlocks between two tags on one server.
type DetailDeadlock struct {
	Target    string  `json:"target"`
	VictimTag string  `json:"victim_tag"`
	OtherTag  string  `json:"other_tag"`
	Count     float64 `json:"count"`
}

// DetailHold is one of a tag's longest holds in the window. Start is when
// the backend was attached (a sampled run: its first sample); SessionID is
// ProxySQL's session (the events log's thread_id).
type DetailHold struct {
	Target      string    `json:"target"`
	Source      Source    `json:"source"`
	SessionID   int64     `json:"session_id"`
	Start       time.Time `json:"start"`
	Seconds     float64   `json:"seconds"`
	IdleSeconds float64   `json:"idle_seconds"`
	Statements  int       `json:"statements"`
	// LastStatement is the hold's last statement, cut short.
	LastStatement string `json:"last_statement,omitempty"`
}

// DetailStatement is one of a tag's statements (a digest) by time in the
// window. HoldSeconds is the time its executions held a backend running it
// (ProxySQL's sum_time): the active part of the tag's hold, not the idle
// time between statements.
type DetailStatement struct {
	Target      string  `json:"target"`
	Source      Source  `json:"source"`
	Digest      string  `json:"digest"`
	Text        string  `json:"text"`
	Count       float64 `json:"count"`
	HoldSeconds float64 `json:"hold_seconds"`
}

// DetailFrame was meant for one of a tag's hottest frames from an app's
// hold profile.
//
// Deprecated: TagDetail.Frames is never filled; see there.
type DetailFrame struct {
	Function    string  `json:"function"`
	File        string  `json:"file"`
	Line        int     `json:"line"`
	HoldSeconds float64 `json:"hold_seconds"`
}

// detailFramesNote is what TagDetail.Unknown says of the tag's hottest
// frames: where an API user finds them. holdtime top drops it by its
// "frames:" prefix when it reads the profiles itself.
const detailFramesNote = "frames: the tag's hottest frames are in its apps' hold profiles (conntag.WithHoldProfile, " +
	"served at /debug/holdtime/profile), which the collector does not read: holdtime top --hold-profile URL " +
	"(one per app instance) reads them in its drill-down, or go tool pprof -http=: URL"

// serveTagDetail answers /api/v1/tag?tag=NAME.
func (c *Collector) serveTagDetail(w http.ResponseWriter, r *http.Request) {
	tag := r.URL.Query().Get("tag")
	if tag == "" {
		writeAPIError(w, http.StatusBadRequest, apiError{Error: "tag: give the tag to detail, ?tag=NAME", Parameter: "tag"})
		return
	}
	writeJSON(w, c.TagDetail(tag))
}

// TagDetail gathers what the collector knows of tag now.
func (c *Collector) TagDetail(tag string) TagDetail {
	d := TagDetail{Tag: tag, At: c.st.now().UTC(), Sessions: []DetailSession{}, Pins: []DetailPin{},
		Transactions: []DetailTransactions{}, Locks: []DetailLocks{}, LockWaits: []DetailLockWait{},
		Deadlocks: []DetailDeadlock{}, LongestHolds: []DetailHold{}, Statements: []DetailStatement{}, Unknown: []string{detailFramesNote}}
	for _, p := range c.proxies {
		d.Sessions = append(d.Sessions, p.sessions.detail(tag)...)
	}
	s := c.st
	s.mu.Lock()
	for k, sr := range s.series {
		g := sr.gauges
		if g == nil {
			continue
		}
		for tr, n := range g.pinned {
			if tr[0] == tag && n > 0 {
				d.Pins = append(d.Pins, DetailPin{Target: k.target, Reason: tr[1], Sessions: n})
			}
		}
		if f, ok := g.trx[tag]; ok && f.count > 0 {
			d.Transactions = append(d.Transactions, DetailTransactions{Target: k.target, Open: f.count, OldestSeconds: f.maxAge, RowsLocked: f.rowsLocked})
		}
		for wb, n := range g.waits {
			if (wb[0] == tag || wb[1] == tag) && n > 0 {
				d.LockWaits = append(d.LockWaits, DetailLockWait{Target: k.target, WaiterTag: wb[0], BlockerTag: wb[1], Waits: n})
			}
		}
		if lf := g.locks; lf != nil {
			for key, n := range lf.locks {
				if key[0] == tag && n > 0 {
					d.Locks = append(d.Locks, DetailLocks{Target: k.target, Kind: key[1], State: key[2], Count: n})
				}
			}
			for key, n := range lf.deadlocks {
				if (key[0] == tag || key[1] == tag) && n > 0 {
					d.Deadlocks = append(d.Deadlocks, DetailDeadlock{Target: k.target, VictimTag: key[0], OtherTag: key[1], Count: n})
				}
			}
		}
	}
	d.LongestHolds = s.longestOf(tag)
	d.Statements = s.statementsOf(tag)
	s.mu.Unlock()
	slices.SortFunc(d.Sessions, func(a, b DetailSession) int {
		return cmp.Or(strings.Compare(a.Target, b.Target), cmp.Compare(a.SessionID, b.SessionID))
	})
	slices.SortFunc(d.Pins, func(a, b DetailPin) int {
		return cmp.Or(cmp.Compare(b.Sessions, a.Sessions), strings.Compare(a.Target+a.Reason, b.Target+b.Reason))
	})
	slices.SortFunc(d.Transactions, func(a, b DetailTransactions) int { return cmp.Compare(b.OldestSeconds, a.OldestSeconds) })
	slices.SortFunc(d.Locks, func(a, b DetailLocks) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Target+a.Kind+a.State, b.Target+b.Kind+b.State))
	})
	slices.SortFunc(d.LockWaits, func(a, b DetailLockWait) int { return cmp.Compare(b.Waits, a.Waits) })
	slices.SortFunc(d.Deadlocks, func(a, b DetailDeadlock) int { return cmp.Compare(b.Count, a.Count) })
	return d
}

// detail lists the sessions of tag in the latest sample: the sampler's
// rows still waiting for the next sample to be credited.
func (p *proxysqlSessions) detail(tag string) []DetailSession {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []DetailSession
	var joins []*serverJoin
	if p.joins != nil {
		joins = p.joins()
	}
	for _, h := range p.sampler.Pending() {
		from := tagFromName(h.TagFrom)
		if h.Tag == UnknownTag && h.Backend.Valid() {
			if t, ok := p.joinedNow(joins, h.SessionID, h.Backend); ok {
				h.Tag, from = t, "server_join"
			}
		}
		if h.Tag != tag {
			continue
		}
		s := DetailSession{Target: p.target, SessionID: h.SessionID, State: "running", BackendThread: h.Backend.Thread,
			User: h.User, Hostgroup: h.Hostgroup, TagFrom: from}
		switch {
		case h.Waiting:
			s.State = "waiting"
		case h.Pinned:
			s.State, s.PinReason = "idle", p.curReasons[h.SessionID]
		}
		out = append(out, s)
	}
	return out
}

// joinedNow asks the proxy↔server join whose transaction the session's
// current run of idle samples is in, from the run's first sample (a run
// never spans two borrows), where the daemon waits for the run to end
// before it credits the hold. A run younger than the server's last read
// is not named yet.
func (p *proxysqlSessions) joinedNow(joins []*serverJoin, id int64, backend attrib.BackendKey) (string, bool) {
	runs := p.pending[id]
	if len(runs) == 0 {
		return "", false
	}
	cur := runs[len(runs)-1]
	if cur.wait || cur.backend != backend {
		return "", false
	}
	// The first sample's answer was read about as long after firstSeen as
	// firstSeen is after the query was sent.
	s := trxjoin.Sample{Start: cur.first, End: cur.firstSeen.Add(cur.firstSeen.Sub(cur.first)), InTrx: cur.inTrx}
	for _, j := range joins {
		r, ok := j.decide(backend, s)
		if !ok {
			continue
		}
		if r.Pending || r.Quality == trxjoin.Unknown {
			return "", false
		}
		return r.Tag, true
	}
	return "", false
}

func tagFromName(f attrib.TagFrom) string {
	switch f {
	case attrib.TagFromInfo:
		return "info"
	case attrib.TagFromEventsLog:
		return "events_log"
	case attrib.TagFromCarried:
		return "carried"
	}
	return "unknown"
}

// ErrNoTagDetail means the collector does not serve /api/v1/tag (an older
// holdtime): the drill-down shows /api/v1/top's figures alone.
var ErrNoTagDetail = errors.New("the collector does not serve /api/v1/tag")

// TagDetail asks the collector what it knows of tag now.
func (c *Client) TagDetail(ctx context.Context, tag string) (TagDetail, error) {
	var d TagDetail
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/tag?"+url.Values{"tag": {tag}}.Encode(), nil)
	if err != nil {
		return d, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return d, ctx.Err()
		}
		return d, fmt.Errorf("cannot reach the collector at %s: is `holdtime collect` running there? (%v)", c.shown, unwrapURLError(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return d, ErrNoTagDetail
	case resp.StatusCode != http.StatusOK:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg := strings.TrimSpace(string(body))
		var apiErr apiError
		if json.Unmarshal(body, &apiErr) == nil && apiErr.Error != "" {
			msg = apiErr.Error
		}
		return d, fmt.Errorf("collector at %s answered %s: %s", c.shown, resp.Status, msg)
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return d, fmt.Errorf("collector at %s sent something that is not holdtime's /api/v1/tag JSON: %v", c.shown, err)
	}
	return d, nil
}
