package collector

import (
	"cmp"
	"sync"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
	"github.com/holdtime/holdtime/collector/internal/source"
	"github.com/holdtime/holdtime/collector/internal/trxjoin"
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

// pinReasons are the flags of extended_info that keep an idle session's
// backend, in the order pinReason tries them.
var pinReasons = [...]struct {
	key    attrib.ExtKey
	reason string
}{
	{attrib.ExtLockTables, PinReasonLockTables},
	{attrib.ExtGetLock, PinReasonGetLock},
	{attrib.ExtTemporaryTable, PinReasonTempTable},
	{attrib.ExtUserVariable, PinReasonUserVariable},
	{attrib.ExtPreparedStatement, PinReasonPrepared},
	{attrib.ExtAutoIncrementDelay, PinReasonAutoIncrement},
	{attrib.ExtHasSavepoint, PinReasonSavepoint},
	{attrib.ExtFoundRows, PinReasonFoundRows},
	{attrib.ExtNoMultiplex, PinReasonNoMultiplex},
	{attrib.ExtMultiplexDisabled, PinReasonMultiplexOff},
	{attrib.ExtMultiplexDisabledExt, PinReasonMultiplexOff},
}

// pinReason says why ProxySQL keeps the backend of an idle session, from its
// extended_info as attrib.ParseExtInfo read it (one pass over the several
// KiB of JSON, shared with the sampler).
func pinReason(ext *attrib.ExtInfo) string {
	if n, ok := ext.Int(attrib.ExtActiveTransactions); ok && n > 0 {
		return PinReasonTransaction
	}
	for _, k := range pinReasons {
		if ext.Has(k.key) {
			return k.reason
		}
	}
	return pinReasonUnexplainedIdle
}

// parseExt reads a row's extended_info once, for the sampler and the pin
// reason: only for a row attrib.NeedsExtInfo says is read (nil otherwise),
// reason set for a pinned one (backend, no statement).
func parseExt(r *ProcesslistRow, ext *attrib.ExtInfo) (_ *attrib.ExtInfo, reason string) {
	if !attrib.NeedsExtInfo(r) {
		return nil, ""
	}
	*ext = attrib.ParseExtInfo(r.ExtendedInfo.String)
	if r.SrvHost.Valid && !r.Info.Valid {
		reason = pinReason(ext)
	}
	return ext, reason
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
	// firstSeen is when ProxySQL took the snapshot of first, as well as
	// the collector knows: between sending the query (first) and reading
	// the answer, the middle.
	firstSeen time.Time
	// backend is the backend the run held, borrow its borrow counters: a
	// run never spans two borrows.
	backend attrib.BackendKey
	borrow  [2]int64
	// firstRead is when the answer of first had been read: from then to
	// last (the query of the last sample sent) the session certainly held
	// the backend idle.
	firstRead time.Time
	// lastSeen is when ProxySQL took the snapshot of last (see firstSeen).
	lastSeen time.Time
	// end is when the answer of last had been read: the run's span for
	// the proxy↔server join is first..end.
	end time.Time
	// inTrx is set when a sample of the run showed the session idle in a
	// transaction; joined once the join has answered (exact, inferred or
	// unknown), counted in holdtime_collector_server_join_hold_seconds_total;
	// joinPending while it answers pending (the run then waits up to
	// joinPendingMax, even past the grace period); quality is the join's.
	inTrx, joined, joinPending bool
	quality                    trxjoin.Quality
	// fallback is the carried tag of the run's first sample: what the run
	// gets when no exact source names it within the grace period; ""
	// means unknown.
	fallback string
	// wait is set on a run of samples waiting for a backend: its seconds
	// are wait, not hold.
	wait bool
	// then is the hold run that followed this wait run right after it:
	// whatever names that hold names the statement that waited.
	then *pendingUnknown
	// waits are the wait runs whose statement this hold run is.
	waits []*pendingUnknown
	// named is the tag a wait run got from its hold run, credited at the
	// next sample.
	named string
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
	// waitingNow publishes the sessions waiting for a backend (the
	// processlist source's own family); nil in tests that need none.
	waitingNow *waitingMetrics
	// parseExt is parseExt; the benchmarks swap in the former key by key
	// scans as their baseline.
	parseExt func(r *ProcesslistRow, ext *attrib.ExtInfo) (*attrib.ExtInfo, string)
	// resolvable says whether anything (events log, app spans, the server
	// join) may name an unknown session later; without it unknown hold is
	// reported at once, and a carried tag is taken at once.
	resolvable bool
	// joins returns the proxy↔server joins of the collector's MySQL
	// targets; nil without any. held are the backends of the sample being
	// credited, for the joins to read.
	joins func() []*serverJoin
	held  []attrib.BackendKey

	// reasons of the rows being credited (previous sample) and of the rows
	// just added (current sample), by SessionID.
	prevReasons, curReasons map[int64]string
	pending                 map[int64][]*pendingUnknown // runs in time order
	hints                   map[int64][]sessionHint     // from app spans
	// the sample being credited and the one before it: an unknown sampled
	// hold continues its session's last run if that run reached prevAt.
	lastAt, prevAt time.Time
	lastRead       time.Time // when the sample lastAt had been read by

	batch    map[string]*tagDelta
	sessions map[string]int
	pinned   map[[2]string]int
	events   map[string]*tagDelta // events log holds, flushed per sample
	waiting  int                  // sessions waiting for a backend in the sample credited
	waitLog  map[int64][]waitSample
	overflow int64 // attr.Overflow() already counted in the store
	// runs are the sessions' current runs of samples credited to a tag
	// (one borrow of one backend); done and doneEvents are the holds
	// completed since the last flush, for the tags' longest holds.
	runs             map[int64]*sampledRun
	done, doneEvents []heldSpan
	// onCredit, when set (tests), sees every sampled hold credited to a
	// tag: a session's samples, sent from first and read by end; how is
	// "sample" (the sample showed the tag), "join_exact", "join_inferred",
	// "join_unknown" (the server join's answer) or "other".
	onCredit func(session int64, first, end time.Time, tag string, hold float64, how string)
	// onJoin, when set (tests), sees every answer of the proxy↔server join
	// that decided a run of session (pending answers are asked again).
	onJoin func(session int64, r trxjoin.Result)
}

// sessionHint is what an app hold span says of a session (source.Hint).
type sessionHint = source.Hint

// maxHintsPerSession bounds the spans kept per session: a pooled session
// serves many borrows within the grace period, only recent ones matter.
const maxHintsPerSession = 16

func newProxySQLSessions(target string, st *store, cfg ProcesslistConfig, withEvents, withHints bool, grace time.Duration,
	joins func() []*serverJoin) *proxysqlSessions {
	p := &proxysqlSessions{
		target: target, st: st, grace: grace, resolvable: withEvents || withHints || joins != nil, joins: joins,
		prevReasons: map[int64]string{}, curReasons: map[int64]string{},
		pending: map[int64][]*pendingUnknown{}, hints: map[int64][]sessionHint{},
		batch: map[string]*tagDelta{}, sessions: map[string]int{}, pinned: map[[2]string]int{},
		events: map[string]*tagDelta{}, waitLog: map[int64][]waitSample{}, runs: map[int64]*sampledRun{},
		parseExt: parseExt,
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
	if p.joins != nil && h.Backend.Valid() {
		p.held = append(p.held, h.Backend)
	}
	if h.Waiting {
		p.addWait(h)
		return
	}
	var f figures
	f.Hold = h.Seconds
	if h.Pinned {
		f.Idle = h.Seconds
	} else {
		f.Active = h.Seconds
	}
	reason := ""
	if h.Pinned {
		reason = p.prevReasons[h.SessionID]
		if reason == "" {
			reason = PinReasonNoExtendedInfo
		}
	}
	if (h.Tag == UnknownTag || h.Carried) && p.resolvable {
		// Exact evidence gets the grace period to name the hold first; a
		// carried tag is the last resort.
		fallback := ""
		if h.Carried {
			fallback = h.Tag
		}
		runs := p.pending[h.SessionID]
		var pu *pendingUnknown
		if n := len(runs); n > 0 && runs[n-1].last.Equal(p.prevAt) && runs[n-1].backend == h.Backend && runs[n-1].borrow == h.Borrow &&
			runs[n-1].fallback == fallback && !runs[n-1].joined {
			pu = runs[n-1]
		} else {
			seen, read := h.At, h.At
			if p.lastRead.After(h.At) {
				seen, read = h.At.Add(p.lastRead.Sub(h.At)/2), p.lastRead
			}
			pu = &pendingUnknown{first: h.At, firstSeen: seen, firstRead: read, backend: h.Backend, borrow: h.Borrow, fallback: fallback}
			p.pending[h.SessionID] = append(runs, pu)
		}
		p.linkWaits(h.SessionID, pu)
		pu.last = h.At
		pu.lastSeen, pu.end = h.At, h.At
		if p.lastRead.After(h.At) {
			pu.lastSeen, pu.end = h.At.Add(p.lastRead.Sub(h.At)/2), p.lastRead
		}
		pu.inTrx = pu.inTrx || reason == PinReasonTransaction
		pu.f.Add(&f)
		pu.rows++
		if reason != "" {
			if pu.pinned == nil {
				pu.pinned = map[string]float64{}
			}
			pu.pinned[reason] += h.Seconds
		}
		now := cmp.Or(fallback, UnknownTag)
		p.sessions[now]++
		if reason != "" {
			p.pinned[[2]string{now, reason}]++
		}
		return
	}
	if h.TagFrom == TagFromInfo || h.TagFrom == TagFromEventsLog {
		// The session waited, then ran this statement: the wait was its.
		p.resolveWhere(h.SessionID, h.Tag, func(pu *pendingUnknown) bool { return pu.wait && pu.last.Equal(p.prevAt) })
	}
	d := p.delta(p.batch, h.Tag)
	d.Add(&f)
	d.Obs++
	p.extendRun(h, &f)
	if p.onCredit != nil {
		end := h.At
		if p.lastRead.After(end) {
			end = p.lastRead
		}
		p.onCredit(h.SessionID, h.At, end, h.Tag, f.Hold, "sample")
	}
	p.sessions[h.Tag]++
	if reason != "" {
		if d.PinnedSecs == nil {
			d.PinnedSecs = map[string]float64{}
		}
		d.PinnedSecs[reason] += h.Seconds
		p.pinned[[2]string{h.Tag, reason}]++
	}
}

// addWait receives a sample of a session waiting for a backend. Its tag
// is not shown while it waits: it stays pending until what the session
// did next names it (the statement seen running, its hold resolved, the
// events log, an app span), else it is reported unknown.
func (p *proxysqlSessions) addWait(h *SampledHold) {
	p.waiting++
	runs := p.pending[h.SessionID]
	var pu *pendingUnknown
	if n := len(runs); n > 0 && runs[n-1].wait && runs[n-1].last.Equal(p.prevAt) {
		pu = runs[n-1]
	} else {
		pu = &pendingUnknown{first: h.At, wait: true}
		p.pending[h.SessionID] = append(runs, pu)
	}
	pu.last = h.At
	pu.f.Wait += h.Seconds
	pu.rows++
	if h.Seconds > 0 {
		p.waitLog[h.SessionID] = append(p.waitLog[h.SessionID], waitSample{at: h.At, sec: h.Seconds})
	}
}

// waitSample is one sample of a session waiting for a backend.
type waitSample struct {
	at  time.Time
	sec float64
}

// waitedWithin is the sampled wait of session id between from and to:
// what the events log's time of a statement includes before it got its
// backend (ProxySQL logs a statement from its arrival).
func (p *proxysqlSessions) waitedWithin(id int64, from, to time.Time) float64 {
	var sec float64
	for _, w := range p.waitLog[id] {
		if !w.at.Before(from) && !w.at.After(to) {
			sec += w.sec
		}
	}
	// The latest sample is credited only when the next one is taken: a
	// statement that stopped waiting just after it can be logged first.
	pending := p.sampler.Pending()
	for i := range pending {
		if h := &pending[i]; h.Waiting && h.SessionID == id && !h.At.Before(from) && !h.At.After(to) {
			sec += p.sampleGap().Seconds()
		}
	}
	return sec
}

// linkWaits ties the wait run of session id that ended at the sample
// before to hold run pu: the statement that waited is the one that then
// held the backend.
func (p *proxysqlSessions) linkWaits(id int64, pu *pendingUnknown) {
	for _, w := range p.pending[id] {
		if w.wait && w.then == nil && w.last.Equal(p.prevAt) {
			w.then = pu
			pu.waits = append(pu.waits, w)
		}
	}
}

// resolveWhere moves the pending runs of session id for which match holds
// to tag.
func (p *proxysqlSessions) resolveWhere(id int64, tag string, match func(*pendingUnknown) bool) {
	runs := p.pending[id]
	kept := runs[:0]
	for _, pu := range runs {
		if match(pu) {
			got := p.resolve(pu, tag)
			switch {
			case pu.wait:
			case pu.last.Equal(p.prevAt):
				// Named while still sampled: the session's current run,
				// which the samples credited next continue (one hold, not
				// one per way its samples were named).
				if r := p.runs[id]; r != nil {
					p.closeRun(id, r)
				}
				p.runs[id] = &sampledRun{tag: got, first: pu.first, last: pu.last, backend: pu.backend, borrow: pu.borrow,
					hold: pu.f.Hold, idle: pu.f.Idle}
			case pu.f.Idle > 0:
				p.done = append(p.done, heldSpan{tag: got, hold: DetailHold{SessionID: id, Start: pu.first.Round(0),
					Seconds: pu.f.Hold, IdleSeconds: pu.f.Idle}})
			}
			if p.onCredit != nil {
				how := "other"
				if pu.joined {
					how = "join_" + pu.quality.String()
				}
				p.onCredit(id, pu.first, pu.end, got, pu.f.Hold, how)
			}
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

// resolve moves a pending run to tag; "" is its fallback: the carried
// tag, else unknown. It returns the tag given.
func (p *proxysqlSessions) resolve(pu *pendingUnknown, tag string) string {
	if tag == "" {
		tag = cmp.Or(pu.fallback, UnknownTag)
	}
	for _, w := range pu.waits {
		if w.then == pu {
			w.then = nil
			w.named = tag // credited when its session's runs are next resolved
		}
	}
	d := p.delta(p.batch, tag)
	d.Add(&pu.f)
	d.Obs += pu.rows
	for r, v := range pu.pinned {
		if d.PinnedSecs == nil {
			d.PinnedSecs = map[string]float64{}
		}
		d.PinnedSecs[r] += v
	}
	return tag
}

// addHold receives the events log's holds (under mu).
func (p *proxysqlSessions) addHold(h *Hold) {
	d := p.delta(p.events, h.Tag)
	start, end := time.UnixMicro(h.StartUS), time.UnixMicro(h.EndUS)
	if h.Kind != HoldLocal {
		dur := float64(h.DurationUS()) / 1e6
		active := float64(min(h.ActiveUS, h.DurationUS())) / 1e6
		// ProxySQL times a statement from its arrival: the part spent
		// waiting for a backend (sampled) is wait, not hold.
		wait := min(p.waitedWithin(int64(h.SessionID), start.Add(-p.sampleGap()), end), active)
		dur -= wait
		active -= wait
		d.Wait += wait
		d.Hold += dur
		d.Active += active
		d.Idle += dur - active
		p.doneEvents = append(p.doneEvents, heldSpan{tag: h.Tag, hold: DetailHold{SessionID: int64(h.SessionID),
			Start: start.Add(time.Duration(wait * float64(time.Second))), Seconds: dur, IdleSeconds: dur - active,
			Statements: h.Statements}})
	}
	d.Stmts += float64(h.Statements)
	d.Obs++
	if h.Tag != UnknownTag && h.Kind != HoldLocal {
		// The events log and the samples may come from two clocks: a
		// second of slack, used only when no hold contains the run.
		p.addHintLocked(int64(h.SessionID), sessionHint{Tag: h.Tag, Start: start, End: end, Received: p.lastAt, Slack: time.Second})
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
	h.Slack = p.sampleGap()
	p.addHintLocked(id, h)
}

func (p *proxysqlSessions) addHintLocked(id int64, h sessionHint) {
	hs, ok := p.hints[id]
	if !ok && len(p.hints) >= 1<<16 {
		return
	}
	if len(hs) >= maxHintsPerSession {
		hs = append(hs[:0], hs[1:]...)
	}
	p.hints[id] = append(hs, h)
	p.resolveHints(id)
}

// resolveHints names the pending runs of session id from the holds that
// spans and the events log reported for it. A hold that contains every
// sample of a run names it at once. One that only comes within its slack
// (clocks, sampling) names it once the run is half a grace period old, and
// the nearest such hold wins: a pooled session serves borrows back to
// back, and the hold right before a run is often another tag's, while the
// run's own may not have been reported yet.
func (p *proxysqlSessions) resolveHints(id int64) {
	hs := p.hints[id]
	if len(hs) == 0 {
		return
	}
	named := map[*pendingUnknown]string{}
	for _, pu := range p.pending[id] {
		best, bestDist := "", time.Duration(-1)
		for _, h := range hs {
			var dist time.Duration
			if pu.first.Before(h.Start) {
				dist = h.Start.Sub(pu.first)
			}
			if pu.last.After(h.End) {
				dist = max(dist, pu.last.Sub(h.End))
			}
			if dist > h.Slack {
				continue
			}
			if bestDist < 0 || dist < bestDist {
				best, bestDist = h.Tag, dist
			}
		}
		if bestDist == 0 || bestDist > 0 && p.lastAt.Sub(pu.last) >= p.grace/2 {
			named[pu] = best
		}
	}
	for pu, tag := range named {
		p.resolveWhere(id, tag, func(x *pendingUnknown) bool { return x == pu })
	}
}

// sampleGap is the time between samples, the slack of a span's times.
func (p *proxysqlSessions) sampleGap() time.Duration {
	return p.sampler.SampleGap()
}

// sample processes one processlist snapshot taken at `at`.
func (p *proxysqlSessions) sample(at time.Time, rows []ProcesslistRow) { p.sampleRead(at, at, rows) }

// sampleRead is sample with the time the snapshot had been read by:
// ProxySQL took it between at (the query was sent) and readAt. The join
// asks what a backend ran before the snapshot, so it needs both.
func (p *proxysqlSessions) sampleRead(at, readAt time.Time, rows []ProcesslistRow) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.lastRead = readAt }()
	clear(p.sessions)
	clear(p.pinned)
	p.waiting = 0
	p.prevReasons, p.curReasons = p.curReasons, p.prevReasons
	p.sampler.Sample(at) // credits the previous sample through addSampled
	if p.joins != nil && len(p.held) > 0 {
		for _, j := range p.joins() {
			j.want(at, p.held)
		}
		p.held = p.held[:0]
	}
	if !at.Equal(p.lastAt) {
		p.prevAt, p.lastAt = p.lastAt, at
	}
	clear(p.curReasons)
	var buf attrib.ExtInfo
	for i := range rows {
		r := &rows[i]
		r.SampleTime = at
		ext, reason := p.parseExt(r, &buf)
		if reason != "" {
			p.curReasons[r.SessionID] = reason
		}
		p.sampler.AddExt(r, ext)
	}
	for id, runs := range p.pending {
		if p.attr != nil {
			// The events log's open hold is the session's current one:
			// it names the run still being sampled, not earlier ones.
			if tag, ok := p.attr.TagOf(uint64(id)); ok {
				cur := runs[len(runs)-1]
				p.resolveWhere(id, tag, func(pu *pendingUnknown) bool { return pu == cur && !pu.wait && pu.last.Equal(p.prevAt) })
			}
		}
		if p.joins != nil {
			p.resolveJoined(id)
		}
		p.resolveHints(id)
		p.resolveNamedWaits(id)
		p.expire(id, func(pu *pendingUnknown) bool {
			if pu.joinPending {
				return at.Sub(pu.last) > joinPendingMax
			}
			return at.Sub(pu.first) > p.grace || at.Sub(pu.last) > p.grace
		})
	}
	for id, ws := range p.waitLog {
		i := 0
		for i < len(ws) && at.Sub(ws[i].at) > p.grace+time.Minute {
			i++
		}
		if i == len(ws) {
			delete(p.waitLog, id)
		} else if i > 0 {
			p.waitLog[id] = append(ws[:0], ws[i:]...)
		}
	}
	for id, hs := range p.hints {
		kept := hs[:0]
		for _, h := range hs {
			if at.Sub(h.Received) <= p.grace {
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

// joinPendingMax is how long after its last sample a run the join answers
// pending is asked again; then its hold is unknown.
const joinPendingMax = 5 * time.Second

// resolveJoined names the pending runs of session id idle on a backend of
// one of the collector's MySQL targets from what that backend's server
// thread ran (package trxjoin). What the server's evidence does not name
// stays unknown: the run's carried tag is dropped, never guessed.
func (p *proxysqlSessions) resolveJoined(id int64) {
	var joins []*serverJoin
	named := map[*pendingUnknown]string{}
	for _, pu := range p.pending[id] {
		if pu.wait || pu.joined || !pu.backend.Valid() {
			continue
		}
		// Asked once the run has ended (or is old): the whole span in which
		// the session held the backend idle.
		if pu.last.Equal(p.prevAt) && p.lastAt.Sub(pu.first) < p.grace/2 {
			continue
		}
		if joins == nil {
			joins = p.joins()
		}
		s := trxjoin.Sample{Start: pu.first, End: pu.end, HeldFrom: pu.firstRead, HeldTo: pu.last, InTrx: pu.inTrx}
		for _, j := range joins {
			r, ok := j.decide(pu.backend, s)
			if !ok {
				continue
			}
			if pu.joinPending = r.Pending && p.lastAt.Sub(pu.last) < joinPendingMax; pu.joinPending {
				break // asked again after the next read
			}
			if p.onJoin != nil {
				p.onJoin(id, r)
			}
			q := r.Quality
			if r.Pending {
				q = trxjoin.Unknown
			}
			pu.joined, pu.quality = true, q
			p.st.joined(p.target, SourceProxySQLProcesslist, q.String(), pu.f.Hold)
			if q == trxjoin.Unknown {
				pu.fallback = ""
			} else {
				named[pu] = r.Tag
			}
			break
		}
	}
	for pu, tag := range named {
		p.resolveWhere(id, tag, func(x *pendingUnknown) bool { return x == pu })
	}
}

// resolveNamedWaits credits the wait runs of session id that their hold
// run named.
func (p *proxysqlSessions) resolveNamedWaits(id int64) {
	named := map[*pendingUnknown]string{}
	for _, pu := range p.pending[id] {
		if pu.wait && pu.named != "" {
			named[pu] = pu.named
		}
	}
	for pu, tag := range named {
		p.resolveWhere(id, tag, func(x *pendingUnknown) bool { return x == pu })
	}
}

// expire reports the runs of session id for which match holds: with their
// carried tag when they have one, else as unknown.
func (p *proxysqlSessions) expire(id int64, match func(*pendingUnknown) bool) {
	p.resolveWhere(id, "", match)
}

// flush hands the batch to the store and publishes the session gauges of
// the sample just credited.
func (p *proxysqlSessions) flush() {
	p.st.add(p.target, SourceProxySQLProcesslist, p.batch)
	clear(p.batch)
	p.closeRuns(false)
	p.st.addLongest(p.target, SourceProxySQLProcesslist, p.done)
	clear(p.done)
	p.done = p.done[:0]
	if p.attr != nil {
		p.flushEventsLocked()
	}
	if p.waitingNow != nil {
		p.waitingNow.set(p.waiting)
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

// addEvents runs read with the events log Attributor's Add, under the
// sessions' lock: the sampler asks the same Attributor for open tags
// (TagOf) under it. The tailer feeds events only through here.
func (p *proxysqlSessions) addEvents(read func(add func(*attrib.Event))) {
	p.mu.Lock()
	defer p.mu.Unlock()
	read(p.attr.Add)
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
	p.st.addLongest(p.target, SourceProxySQLEvents, p.doneEvents)
	clear(p.doneEvents)
	p.doneEvents = p.doneEvents[:0]
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
		p.expire(id, func(*pendingUnknown) bool { return true })
	}
	p.closeRuns(true)
	p.flush()
	p.mu.Unlock()
}

// sampledRun is a session's run of consecutive samples credited to one
// tag while it held one borrow of one backend: one hold as sampling sees
// it, its span known to a sample gap. Only runs with an idle sample count
// as holds (closeRun).
type sampledRun struct {
	tag         string
	first, last time.Time
	backend     attrib.BackendKey
	borrow      [2]int64
	hold, idle  float64
}

// extendRun adds a credited sample to its session's run, closing the run
// before it when the sample does not continue it.
func (p *proxysqlSessions) extendRun(h *SampledHold, f *figures) {
	r := p.runs[h.SessionID]
	if r == nil || !r.last.Equal(p.prevAt) || r.tag != h.Tag || r.backend != h.Backend || r.borrow != h.Borrow {
		if r != nil {
			p.closeRun(h.SessionID, r)
		}
		r = &sampledRun{tag: h.Tag, first: h.At, backend: h.Backend, borrow: h.Borrow}
		p.runs[h.SessionID] = r
	}
	r.last = h.At
	r.hold += f.Hold
	r.idle += f.Idle
}

// closeRuns closes the runs the sample just credited (prevAt, after
// sampleRead moved its clock) did not continue, or all of them.
func (p *proxysqlSessions) closeRuns(all bool) {
	for id, r := range p.runs {
		if all || r.last.Before(p.prevAt) {
			p.closeRun(id, r)
			delete(p.runs, id)
		}
	}
}

func (p *proxysqlSessions) closeRun(id int64, r *sampledRun) {
	if r.idle == 0 {
		// Only running samples: back-to-back statements of one tag look
		// like one run, though ProxySQL may have returned the backend
		// between them. An idle sample (a backend kept with nothing
		// running: a transaction or a pin) is a hold that spans samples.
		return
	}
	p.done = append(p.done, heldSpan{tag: r.tag, hold: DetailHold{SessionID: id, Start: r.first.Round(0), Seconds: r.hold, IdleSeconds: r.idle}})
}
