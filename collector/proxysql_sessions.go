package collector

import (
	"cmp"
	"strings"
	"sync"
	"time"
)

// Pin reasons read from stats_mysql_processlist's extended_info, the
// `reason` label of holdtime_collector_pinned_sessions. A session idle with a
// backend attached gets the first reason that applies, in this order, so
// that pinned seconds per reason add up to the pinned total.
const (
	PinReasonTransaction     = "transaction"          // active_transactions > 0 while idle
	PinReasonLockTables      = "lock_tables"          // LOCK TABLES
	PinReasonGetLock         = "get_lock"             // GET_LOCK()
	PinReasonTempTable       = "temporary_table"      // CREATE TEMPORARY TABLE
	PinReasonUserVariable    = "user_variable"        // @var in a statement
	PinReasonPrepared        = "prepared_statement"   // text-protocol PREPARE
	PinReasonAutoIncrement   = "auto_increment_delay" // mysql-auto_increment_delay_multiplex after an insert id
	PinReasonSavepoint       = "savepoint"            // SAVEPOINT
	PinReasonFoundRows       = "found_rows"           // SQL_CALC_FOUND_ROWS
	PinReasonNoMultiplex     = "no_multiplex"         // a query rule or hint turned multiplexing off
	PinReasonMultiplexOff    = "multiplexing_disabled"
	PinReasonNoExtendedInfo  = "unknown" // mysql-show_processlist_extended is off: the reason is not shown
	pinReasonUnexplainedIdle = "none_shown"
)

// pinReason says why ProxySQL keeps the backend of an idle session, from its
// extended_info JSON. It scans for the few keys it needs rather than
// decoding the whole document (several KiB per session).
func pinReason(ext string) string {
	if n, ok := jsonInt(ext, `"active_transactions"`); ok && n > 0 {
		return PinReasonTransaction
	}
	for _, k := range [...]struct{ key, reason string }{
		{`"lock_tables"`, PinReasonLockTables},
		{`"get_lock"`, PinReasonGetLock},
		{`"temporary_table"`, PinReasonTempTable},
		{`"user_variable"`, PinReasonUserVariable},
		{`"prepared_statement"`, PinReasonPrepared},
	} {
		if jsonTrue(ext, k.key) {
			return k.reason
		}
	}
	if autoIncrementDelay(ext) {
		return PinReasonAutoIncrement
	}
	for _, k := range [...]struct{ key, reason string }{
		{`"has_savepoint"`, PinReasonSavepoint},
		{`"found_rows"`, PinReasonFoundRows},
		{`"no_multiplex"`, PinReasonNoMultiplex},
		{`"MultiplexDisabled"`, PinReasonMultiplexOff},
		{`"MultiplexDisabled_ext"`, PinReasonMultiplexOff},
	} {
		if jsonTrue(ext, k.key) {
			return k.reason
		}
	}
	return pinReasonUnexplainedIdle
}

// jsonValue returns the text after `key:` (spaces skipped) for every
// occurrence of key, until fn returns true.
func jsonValue(doc, key string, fn func(v string) bool) bool {
	for {
		i := strings.Index(doc, key)
		if i < 0 {
			return false
		}
		doc = doc[i+len(key):]
		j := 0
		for j < len(doc) && (doc[j] == ' ' || doc[j] == '\n' || doc[j] == '\t' || doc[j] == '\r') {
			j++
		}
		if j < len(doc) && doc[j] == ':' {
			j++
			for j < len(doc) && (doc[j] == ' ' || doc[j] == '\n' || doc[j] == '\t' || doc[j] == '\r') {
				j++
			}
			if fn(doc[j:]) {
				return true
			}
		}
	}
}

func jsonTrue(doc, key string) bool {
	return jsonValue(doc, key, func(v string) bool { return strings.HasPrefix(v, "true") })
}

func jsonInt(doc, key string) (int64, bool) {
	var n int64
	found := jsonValue(doc, key, func(v string) bool {
		i := 0
		for i < len(v) && v[i] >= '0' && v[i] <= '9' && i < 18 {
			n = n*10 + int64(v[i]-'0')
			i++
		}
		return i > 0
	})
	return n, found
}

// pendingUnknown is a run of sampled hold of a session, in consecutive
// samples, whose tag the processlist could not tell, kept a short while for
// the events log or an app span to name it. A session served by an app pool
// has one run per borrow it was seen holding, each with its own tag.
type pendingUnknown struct {
	first  time.Time
	last   time.Time
	f      figures
	rows   float64 // sampled rows in the run
	pinned map[string]float64
}

// proxysqlSessions is the session state machine of one ProxySQL target: it
// turns processlist samples into per-tag backend hold, takes the tag of
// sessions idle in a transaction from the events log (by thread_id =
// SessionID) or from app spans carrying holdtime.session_id, and reports
// what stays unknown as UnknownTag. The daemon and the recording replay
// feed it the same way: rows of one sample with the collector's own sample
// time.
type proxysqlSessions struct {
	mu     sync.Mutex
	target string
	st     *store
	grace  time.Duration

	attr    *Attributor // nil without an events log
	sampler *SampleAttributor
	// resolvable says whether anything (events log, app spans) may name an
	// unknown session later; without it unknown hold is reported at once.
	resolvable bool

	// reasons of the rows being credited (previous sample) and of the rows
	// just added (current sample), by SessionID.
	prevReasons, curReasons map[int64]string
	pending                 map[int64][]*pendingUnknown // runs in time order
	hints                   map[int64][]sessionHint     // from app spans
	// the sample being credited and the one before it: an unknown sampled
	// hold continues its session's last run if that run reached prevAt.
	lastAt, prevAt time.Time

	batch    map[string]*tagDelta
	sessions map[string]int
	pinned   map[[2]string]int
	events   map[string]*tagDelta // events log holds, flushed per sample
	overflow int64                // attr.Overflow() already counted in the store
}

// sessionHint is what an app hold span says: the session held a backend for
// tag from start to end. received is when the span arrived.
type sessionHint struct {
	tag        string
	start, end time.Time
	received   time.Time
}

// maxHintsPerSession bounds the spans kept per session: a pooled session
// serves many borrows within the grace period, only recent ones matter.
const maxHintsPerSession = 16

// covers says whether a pending run lies within [start-gap, end+gap]: its
// samples are the hold the span measured. The slack of one sample gap
// absorbs sampling and clock error; a run that began before the span or
// outlived it belongs (at least partly) to another borrow.
func covers(pu *pendingUnknown, start, end time.Time, gap time.Duration) bool {
	return !pu.first.Before(start.Add(-gap)) && !pu.last.After(end.Add(gap))
}

func newProxySQLSessions(target string, st *store, cfg ProcesslistConfig, withEvents, withHints bool, grace time.Duration) *proxysqlSessions {
	p := &proxysqlSessions{
		target: target, st: st, grace: grace, resolvable: withEvents || withHints,
		prevReasons: map[int64]string{}, curReasons: map[int64]string{},
		pending: map[int64][]*pendingUnknown{}, hints: map[int64][]sessionHint{},
		batch: map[string]*tagDelta{}, sessions: map[string]int{}, pinned: map[[2]string]int{},
		events: map[string]*tagDelta{},
	}
	var tagOf func(uint64) (string, bool)
	if withEvents {
		p.attr = NewAttributor(AttributorConfig{}, p.addHold)
		tagOf = p.attr.TagOf
	}
	p.sampler = NewSampleAttributor(cfg, tagOf, p.addSampled)
	return p
}

func (p *proxysqlSessions) delta(m map[string]*tagDelta, tag string) *tagDelta {
	d := m[tag]
	if d == nil {
		d = &tagDelta{}
		m[tag] = d
	}
	return d
}

// addSampled receives the sampler's holds of the previous sample.
func (p *proxysqlSessions) addSampled(h *SampledHold) {
	var f figures
	f.hold = h.Seconds
	if h.Pinned {
		f.idle = h.Seconds
	} else {
		f.active = h.Seconds
	}
	reason := ""
	if h.Pinned {
		reason = p.prevReasons[h.SessionID]
		if reason == "" {
			reason = PinReasonNoExtendedInfo
		}
	}
	if h.Tag == UnknownTag && p.resolvable {
		runs := p.pending[h.SessionID]
		var pu *pendingUnknown
		if n := len(runs); n > 0 && runs[n-1].last.Equal(p.prevAt) {
			pu = runs[n-1]
		} else {
			pu = &pendingUnknown{first: h.At}
			p.pending[h.SessionID] = append(runs, pu)
		}
		pu.last = h.At
		pu.f.add(&f)
		pu.rows++
		if reason != "" {
			if pu.pinned == nil {
				pu.pinned = map[string]float64{}
			}
			pu.pinned[reason] += h.Seconds
		}
		p.sessions[UnknownTag]++
		if reason != "" {
			p.pinned[[2]string{UnknownTag, reason}]++
		}
		return
	}
	d := p.delta(p.batch, h.Tag)
	d.add(&f)
	d.obs++
	p.sessions[h.Tag]++
	if reason != "" {
		if d.pinnedSecs == nil {
			d.pinnedSecs = map[string]float64{}
		}
		d.pinnedSecs[reason] += h.Seconds
		p.pinned[[2]string{h.Tag, reason}]++
	}
}

// resolveWhere moves the pending runs of session id for which match holds
// to tag.
func (p *proxysqlSessions) resolveWhere(id int64, tag string, match func(*pendingUnknown) bool) {
	runs := p.pending[id]
	kept := runs[:0]
	for _, pu := range runs {
		if match(pu) {
			p.resolve(pu, tag)
		} else {
			kept = append(kept, pu)
		}
	}
	clear(runs[len(kept):])
	if len(kept) == 0 {
		delete(p.pending, id)
	} else {
		p.pending[id] = kept
	}
}

// resolve moves a pending run to tag.
func (p *proxysqlSessions) resolve(pu *pendingUnknown, tag string) {
	d := p.delta(p.batch, tag)
	d.add(&pu.f)
	d.obs += pu.rows
	for r, v := range pu.pinned {
		if d.pinnedSecs == nil {
			d.pinnedSecs = map[string]float64{}
		}
		d.pinnedSecs[r] += v
	}
}

// addHold receives the events log's holds (under mu).
func (p *proxysqlSessions) addHold(h *Hold) {
	d := p.delta(p.events, h.Tag)
	if h.Kind != HoldLocal {
		dur := float64(h.DurationUS()) / 1e6
		active := float64(min(h.ActiveUS, h.DurationUS())) / 1e6
		d.hold += dur
		d.active += active
		d.idle += dur - active
	}
	d.stmts += float64(h.Statements)
	d.obs++
	if h.Tag != UnknownTag && len(p.pending[int64(h.SessionID)]) > 0 {
		// The events log and the samples may come from two clocks: allow
		// a second either side.
		start, end := time.UnixMicro(h.StartUS), time.UnixMicro(h.EndUS)
		p.resolveWhere(int64(h.SessionID), h.Tag, func(pu *pendingUnknown) bool {
			return covers(pu, start, end, time.Second)
		})
	}
}

// AddEvent feeds one events log event.
func (p *proxysqlSessions) addEvent(e *Event) {
	p.mu.Lock()
	p.attr.Add(e)
	p.mu.Unlock()
}

// hint records the tag an app hold span gave a session
// (holdtime.session_id) from h.start to h.end. Spans arrive late and in any
// order, while the pooled session may already serve another borrow: a span
// names only the pending runs within its own times, and is kept for runs
// still being sampled.
func (p *proxysqlSessions) hint(id int64, h sessionHint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gap := p.sampleGap()
	p.resolveWhere(id, h.tag, func(pu *pendingUnknown) bool { return covers(pu, h.start, h.end, gap) })
	hs, ok := p.hints[id]
	if !ok && len(p.hints) >= 1<<16 {
		return
	}
	if len(hs) >= maxHintsPerSession {
		hs = append(hs[:0], hs[1:]...)
	}
	p.hints[id] = append(hs, h)
}

// sampleGap is the time between samples, the slack of a span's times.
func (p *proxysqlSessions) sampleGap() time.Duration {
	return cmp.Or(p.sampler.lastGap, p.sampler.cfg.MaxSampleGap)
}

// sample processes one processlist snapshot taken at `at`.
func (p *proxysqlSessions) sample(at time.Time, rows []ProcesslistRow) {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.sessions)
	clear(p.pinned)
	p.prevReasons, p.curReasons = p.curReasons, p.prevReasons
	p.sampler.Sample(at) // credits the previous sample through addSampled
	if !at.Equal(p.lastAt) {
		p.prevAt, p.lastAt = p.lastAt, at
	}
	clear(p.curReasons)
	for i := range rows {
		r := &rows[i]
		r.SampleTime = at
		if r.SrvHost.Valid && !r.Info.Valid && r.ExtendedInfo.Valid {
			p.curReasons[r.SessionID] = pinReason(r.ExtendedInfo.String)
		}
		p.sampler.Add(r)
	}
	gap := p.sampleGap()
	for id, runs := range p.pending {
		if p.attr != nil {
			// The events log's open hold is the session's current one:
			// it names the run still being sampled, not earlier ones.
			if tag, ok := p.attr.TagOf(uint64(id)); ok {
				cur := runs[len(runs)-1]
				p.resolveWhere(id, tag, func(pu *pendingUnknown) bool { return pu == cur && pu.last.Equal(p.prevAt) })
			}
		}
		for _, h := range p.hints[id] {
			p.resolveWhere(id, h.tag, func(pu *pendingUnknown) bool { return covers(pu, h.start, h.end, gap) })
		}
		p.resolveWhere(id, UnknownTag, func(pu *pendingUnknown) bool {
			return at.Sub(pu.first) > p.grace || at.Sub(pu.last) > p.grace
		})
	}
	for id, hs := range p.hints {
		kept := hs[:0]
		for _, h := range hs {
			if at.Sub(h.received) <= p.grace {
				kept = append(kept, h)
			}
		}
		if len(kept) == 0 {
			delete(p.hints, id)
		} else {
			p.hints[id] = kept
		}
	}
	p.flush()
}

// flush hands the batch to the store and publishes the session gauges of
// the sample just credited.
func (p *proxysqlSessions) flush() {
	p.st.add(p.target, SourceProxySQLProcesslist, p.batch)
	clear(p.batch)
	if p.attr != nil {
		p.flushEventsLocked()
	}
	p.st.setGauges(p.target, SourceProxySQLProcesslist, func(sr *series, g *gauges) {
		g.sessions = make(map[string]int, len(p.sessions))
		for tag, n := range p.sessions {
			g.sessions[p.st.capTag(sr, tag)] += n
		}
		g.pinned = make(map[[2]string]int, len(p.pinned))
		for tr, n := range p.pinned {
			g.pinned[[2]string{p.st.capTag(sr, tr[0]), tr[1]}] += n
		}
	})
}

// flushEvents hands events log holds to the store between samples, for
// when the processlist source is down but the log is still read.
func (p *proxysqlSessions) flushEvents() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushEventsLocked()
}

func (p *proxysqlSessions) flushEventsLocked() {
	p.st.add(p.target, SourceProxySQLEvents, p.events)
	clear(p.events)
	if n := p.attr.Overflow(); n > p.overflow {
		p.st.overflowed(p.target, SourceProxySQLEvents, n-p.overflow)
		p.overflow = n
	}
}

// finish credits the last sample and closes every open hold: the end of a
// replay.
func (p *proxysqlSessions) finish() {
	p.mu.Lock()
	p.sampler.Flush()
	if p.attr != nil {
		p.attr.Flush()
	}
	for id, runs := range p.pending {
		if p.attr != nil {
			if tag, ok := p.attr.TagOf(uint64(id)); ok {
				last := runs[len(runs)-1]
				p.resolveWhere(id, tag, func(pu *pendingUnknown) bool { return pu == last })
			}
		}
		p.resolveWhere(id, UnknownTag, func(*pendingUnknown) bool { return true })
	}
	p.flush()
	p.mu.Unlock()
}
