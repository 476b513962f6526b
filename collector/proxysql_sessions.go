package collector

import (
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

// pendingUnknown is sampled hold of a session whose tag the processlist
// could not tell, kept a short while for the events log or an app span to
// name it.
type pendingUnknown struct {
	first  time.Time
	last   time.Time
	f      figures
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
	pending                 map[int64]*pendingUnknown
	hints                   map[int64]sessionHint // from app spans

	batch    map[string]*tagDelta
	sessions map[string]int
	pinned   map[[2]string]int
	events   map[string]*tagDelta // events log holds, flushed per sample
}

type sessionHint struct {
	tag string
	at  time.Time
}

func newProxySQLSessions(target string, st *store, cfg ProcesslistConfig, withEvents, withHints bool, grace time.Duration) *proxysqlSessions {
	p := &proxysqlSessions{
		target: target, st: st, grace: grace, resolvable: withEvents || withHints,
		prevReasons: map[int64]string{}, curReasons: map[int64]string{},
		pending: map[int64]*pendingUnknown{}, hints: map[int64]sessionHint{},
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
		pu := p.pending[h.SessionID]
		if pu == nil {
			pu = &pendingUnknown{first: h.At}
			p.pending[h.SessionID] = pu
		}
		pu.last = h.At
		pu.f.add(&f)
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
	p.sessions[h.Tag]++
	if reason != "" {
		if d.pinnedSecs == nil {
			d.pinnedSecs = map[string]float64{}
		}
		d.pinnedSecs[reason] += h.Seconds
		p.pinned[[2]string{h.Tag, reason}]++
	}
}

// resolve moves a session's pending unknown hold to tag.
func (p *proxysqlSessions) resolve(id int64, tag string) {
	pu := p.pending[id]
	if pu == nil {
		return
	}
	delete(p.pending, id)
	d := p.delta(p.batch, tag)
	d.add(&pu.f)
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
	if h.Tag != UnknownTag {
		if pu := p.pending[int64(h.SessionID)]; pu != nil && pu.first.UnixMicro() >= h.StartUS-int64(time.Second/time.Microsecond) {
			p.resolve(int64(h.SessionID), h.Tag)
		}
	}
}

// AddEvent feeds one events log event.
func (p *proxysqlSessions) addEvent(e *Event) {
	p.mu.Lock()
	p.attr.Add(e)
	p.mu.Unlock()
}

// hint records the tag an app span gave a session (holdtime.session_id).
func (p *proxysqlSessions) hint(id int64, tag string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.pending[id]; ok {
		p.resolve(id, tag)
	}
	if len(p.hints) < 1<<16 {
		p.hints[id] = sessionHint{tag, at}
	}
}

// sample processes one processlist snapshot taken at `at`.
func (p *proxysqlSessions) sample(at time.Time, rows []ProcesslistRow) {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.sessions)
	clear(p.pinned)
	p.prevReasons, p.curReasons = p.curReasons, p.prevReasons
	p.sampler.Sample(at) // credits the previous sample through addSampled
	clear(p.curReasons)
	for i := range rows {
		r := &rows[i]
		r.SampleTime = at
		if r.SrvHost.Valid && !r.Info.Valid && r.ExtendedInfo.Valid {
			p.curReasons[r.SessionID] = pinReason(r.ExtendedInfo.String)
		}
		p.sampler.Add(r)
	}
	for id, pu := range p.pending {
		if p.attr != nil {
			if tag, ok := p.attr.TagOf(uint64(id)); ok {
				p.resolve(id, tag)
				continue
			}
		}
		if h, ok := p.hints[id]; ok && !h.at.Before(pu.first.Add(-p.grace)) {
			p.resolve(id, h.tag)
			continue
		}
		if at.Sub(pu.first) > p.grace || at.Sub(pu.last) > p.grace {
			p.resolve(id, UnknownTag)
		}
	}
	for id, h := range p.hints {
		if at.Sub(h.at) > p.grace {
			delete(p.hints, id)
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
		p.st.add(p.target, SourceProxySQLEvents, p.events)
		clear(p.events)
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
	p.st.add(p.target, SourceProxySQLEvents, p.events)
	clear(p.events)
}

// finish credits the last sample and closes every open hold: the end of a
// replay.
func (p *proxysqlSessions) finish() {
	p.mu.Lock()
	p.sampler.Flush()
	if p.attr != nil {
		p.attr.Flush()
	}
	for id := range p.pending {
		if p.attr != nil {
			if tag, ok := p.attr.TagOf(uint64(id)); ok {
				p.resolve(id, tag)
				continue
			}
		}
		p.resolve(id, UnknownTag)
	}
	p.flush()
	p.mu.Unlock()
}
