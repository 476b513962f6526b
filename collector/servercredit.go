package collector

import (
	"cmp"
	"slices"
	"time"
)

// serverPoll is what one poll of the server says, shared by apply's steps.
type serverPoll struct {
	at     time.Time
	prevAt time.Time // the poll before; zero at the first
	// timerNow is the server's timer (picoseconds) at stmtAt: our own
	// running statement's TIMER_END; 0 when it was not seen.
	timerNow uint64
	stmtAt   time.Time
	listed   map[int64]*serverRow // sessions listed now, without our own
	// sampled are the sessions held at the last poll and listed now: their
	// statements since are inside that sampled time, up to the end of a
	// COMMIT.
	sampled    map[int64]bool
	wins       map[int64]*trxWindow
	runningNow map[int64]bool    // timed by their running statement (outside a transaction)
	runningIn  map[int64]float64 // elapsed of a statement running inside a transaction
}

// wall maps the server's timer to the collector's clock.
func (p *serverPoll) wall(timer uint64) (time.Time, bool) {
	if p.timerNow == 0 || timer > p.timerNow {
		return time.Time{}, false
	}
	return p.stmtAt.Add(-time.Duration((p.timerNow - timer) / 1000)), true
}

// apply turns one poll into hold, statements and gauges:
//
//   - a session in a transaction holds its connection: from the end of its
//     BEGIN (performance_schema's timer) or, without it, the first poll
//     that lists the transaction, to the end of its COMMIT or the last poll
//     that lists it; the time between two polls that both list it is
//     credited (idle or active, as the earlier poll saw it) to the tag of
//     its statements;
//   - a statement outside a transaction holds it while it runs: each poll
//     credits the time it ran since the last (performance_schema's elapsed
//     time), and its completion the rest of its exact TIMER_WAIT; one that
//     started and ended between two polls is credited its TIMER_WAIT;
//   - a session that is gone (disconnected, or the server restarted) earns
//     nothing after the last poll that listed it.
func (m *mysqlTarget) apply(at time.Time, rows []serverRow, stmts []stmtRow, waits [][2]int64) {
	p := m.newServerPoll(at, rows, stmts)
	p.wins = m.completed(stmts, p.sampled, p.timerNow != 0)
	m.publishJoin(at, p.listed)
	m.creditRunning(p, stmts)
	if !m.prevAt.IsZero() {
		for _, h := range m.held {
			m.creditHeld(p, h)
		}
	}
	m.resolvePending(at)
	for k, rs := range m.running {
		if at.Sub(rs.seen) > time.Minute {
			delete(m.running, k) // its completion was never seen: what was credited stays
		}
	}
	m.prevAt = at
	m.held = m.held[:0]
	now := m.holdNow(p)
	m.publish(now, waits)
}

// newServerPoll reads the server's timer and which sessions count.
func (m *mysqlTarget) newServerPoll(at time.Time, rows []serverRow, stmts []stmtRow) *serverPoll {
	p := &serverPoll{at: at, prevAt: m.prevAt, stmtAt: m.stmtAt, listed: make(map[int64]*serverRow, len(rows)),
		sampled: map[int64]bool{}, runningNow: map[int64]bool{}, runningIn: map[int64]float64{}}
	// Our own running statement's TIMER_END is the server's timer at
	// m.stmtAt; a timer behind what was read before means the server
	// restarted (or, after months, the timer wrapped).
	for i := range stmts {
		if st := &stmts[i]; st.running && st.own {
			p.timerNow = st.end
		}
	}
	if p.timerNow != 0 && p.timerNow < m.watermark {
		m.restarted("performance_schema timer", -1)
	} else if p.timerNow != 0 && timerRestarted(m.timerPrev, m.timerPrevDone, p.timerNow, m.stmtAt) {
		m.restarted("performance_schema timer rate", -1)
	}
	if p.timerNow != 0 {
		m.timerPrev, m.timerPrevDone = p.timerNow, m.stmtDone
	}
	for i := range rows {
		if r := &rows[i]; !(r.info.Valid && isCollectorStatement(r.info.String)) && !m.excluded[r.id] {
			p.listed[r.id] = r
		}
	}
	if !m.prevAt.IsZero() {
		for _, h := range m.held {
			if p.listed[h.id] != nil {
				p.sampled[h.id] = true
			}
		}
	}
	return p
}

// inTrx reports whether a listed session is in a transaction now. MariaDB
// serves INNODB_TRX from a cache up to 100 ms old: a session idle since its
// COMMIT may still show its transaction.
func (m *mysqlTarget) inTrx(r *serverRow) bool {
	s := m.sessions[r.id]
	return r.inTrx && (r.command != "Sleep" || s == nil || !s.ended)
}

// creditRunning credits the statements running outside a transaction with
// the time they ran since the last poll. (One that ended between the two
// parts of the statements query was settled by its completed row; its
// running row is then older than its completion and is skipped.)
func (m *mysqlTarget) creditRunning(p *serverPoll, stmts []stmtRow) {
	for i := range stmts {
		st := &stmts[i]
		if !st.running || st.own || !st.wait.Valid {
			continue
		}
		r := p.listed[st.pid]
		if r == nil {
			continue
		}
		elapsed := float64(st.wait.Int64) / 1e12
		if m.inTrx(r) {
			p.runningIn[st.pid] = elapsed
			continue
		}
		text := st.text
		if text == "" && r.info.Valid {
			text = r.info.String // a prepared statement's execution: its text is in the processlist
		}
		if text == "" {
			continue
		}
		tag, ok := m.tagOfStatement(text)
		if !ok {
			continue
		}
		if _, done := m.seenStmts[st.key]; done {
			continue
		}
		p.runningNow[st.pid] = true
		rs := m.running[st.key]
		if rs == nil {
			rs = &runningStmt{tag: tag}
			m.running[st.key] = rs
			if p.prevAt.IsZero() || p.sampled[st.pid] && !p.wins[st.pid].ended() {
				// Before the first poll, or inside time already sampled (a
				// statement after a COMMIT since the last poll is not: the
				// sampled time ends there).
				rs.credited = elapsed
			}
		}
		m.credit(rs.tag, elapsed-rs.credited)
		rs.credited = max(rs.credited, elapsed)
		rs.seen = p.at
	}
}

// creditHeld credits the sampled hold of a session held at the last poll,
// to the end of its COMMIT when it came before this poll. A session gone
// since earns nothing after it was last seen.
func (m *mysqlTarget) creditHeld(p *serverPoll, h heldRow) {
	if !p.sampled[h.id] {
		return
	}
	end := p.at
	if w := p.wins[h.id]; w.ended() {
		if e, ok := p.wall(w.commitEnd); ok && e.Before(end) {
			end = e
		}
	}
	tag := h.tag
	if tag == UnknownTag {
		tag = m.heldTag(p, h.id)
	}
	sec := min(max(end.Sub(p.prevAt), 0), m.maxGap).Seconds()
	f := h.carry
	f.Hold += sec
	if h.idle {
		f.Idle += sec
	} else {
		f.Active += sec
	}
	if tag == UnknownTag && m.hints != nil {
		// An app span naming this connection (conntag's
		// holdtime.session_id is CONNECTION_ID()) may come.
		m.pendingHold = append(m.pendingHold, serverPending{id: h.id, from: p.prevAt, to: end, f: f})
		return
	}
	m.delta(tag).Add(&f)
}

// heldTag names a session held without a known tag at the last poll (a
// transaction that had only begun): its first statement since, else the
// statement it runs now in that transaction, else its last tag.
func (m *mysqlTarget) heldTag(p *serverPoll, id int64) string {
	tag := UnknownTag
	w := p.wins[id]
	switch r := p.listed[id]; {
	case w != nil && w.firstTag != "":
		tag = w.firstTag
	case !w.ended() && r.command != "Sleep" && r.info.Valid:
		if t, ok := m.tagOfStatement(r.info.String); ok {
			tag = t
		}
	}
	if s := m.sessions[id]; tag == UnknownTag && s != nil && s.tag != "" {
		tag = s.tag
	}
	return tag
}

// serverNow is what the sessions hold now: the poll's gauges.
type serverNow struct {
	sessions map[string]int
	trx      map[string]trxFigures
	tagOf    map[int64]string
}

// holdNow notes the sessions that hold a connection now (m.held, the next
// poll credits them) and the gauges, and forgets disconnected sessions.
func (m *mysqlTarget) holdNow(p *serverPoll) serverNow {
	for _, s := range m.sessions {
		s.seen = false
	}
	now := serverNow{sessions: map[string]int{}, trx: map[string]trxFigures{}, tagOf: map[int64]string{}}
	for _, r := range p.listed {
		sess := m.session(r.id)
		sess.seen = true
		active := r.command != "Sleep"
		t := m.inTrx(r)
		sess.inTrx = t
		carry := m.carryOf(p, r, sess, t)
		if !active && !t {
			continue
		}
		tag := m.sessionTag(r)
		now.tagOf[r.id] = tag
		now.sessions[tag]++
		// A statement outside a transaction is timed by performance_schema
		// (creditRunning); without its elapsed time it is sampled like a
		// transaction.
		if t || !p.runningNow[r.id] && !m.setup.running {
			if tag != UnknownTag {
				m.delta(tag).Add(&carry)
				carry = figures{}
			}
			m.held = append(m.held, heldRow{id: r.id, tag: tag, idle: !active, inTrx: t, carry: carry})
		}
		if t {
			f := now.trx[tag]
			f.count++
			f.maxAge = max(f.maxAge, r.trxAge, 0) // a clock step can make TIMESTAMPDIFF negative
			f.rowsLocked += r.rowsLocked
			now.trx[tag] = f
		}
	}
	for id, s := range m.sessions {
		if !s.seen && !s.touched {
			delete(m.sessions, id) // disconnected: ids are not reused soon
		}
		s.touched = false
	}
	return now
}

// carryOf is the hold of a transaction first held at this poll: held since
// its BEGIN (or the last poll), its statements inside that time. A session
// the server does not list as in a transaction after all has its pending
// statements credited on their own.
func (m *mysqlTarget) carryOf(p *serverPoll, r *serverRow, sess *serverSession, inTrx bool) figures {
	var carry figures
	w := p.wins[r.id]
	b, timed := p.wall(sess.openBegin)
	if inTrx && timed && sess.openBegin != 0 && !p.prevAt.IsZero() && (!p.sampled[r.id] || w.ended()) {
		from := b
		if from.Before(p.prevAt) {
			from = p.prevAt
		}
		carry.Hold = max(p.at.Sub(from).Seconds(), 0)
		if w != nil {
			for _, ps := range w.pending {
				carry.Active += ps.sec
			}
		}
		carry.Active = min(carry.Active+p.runningIn[r.id], carry.Hold)
		carry.Idle = carry.Hold - carry.Active
	} else if w != nil {
		for _, ps := range w.pending {
			m.credit(ps.tag, ps.sec)
		}
	}
	return carry
}

// publish writes the poll's hold and gauges to the store.
func (m *mysqlTarget) publish(now serverNow, waits [][2]int64) {
	lw := map[[2]string]int{}
	for _, w := range waits {
		wt, bt := now.tagOf[w[0]], now.tagOf[w[1]]
		lw[[2]string{cmpOr(wt, UnknownTag), cmpOr(bt, UnknownTag)}]++
	}
	m.st.add(m.cfg.Name, SourceMySQL, m.batch)
	clear(m.batch)
	m.st.setGauges(m.cfg.Name, SourceMySQL, func(sr *series, g *gauges) {
		g.sessions = map[string]int{}
		for tag, n := range now.sessions {
			g.sessions[m.st.capTag(sr, tag)] += n
		}
		g.trx = map[string]trxFigures{}
		for tag, f := range now.trx {
			ct := m.st.capTag(sr, tag)
			o := g.trx[ct]
			o.count += f.count
			o.maxAge = max(o.maxAge, f.maxAge)
			o.rowsLocked += f.rowsLocked
			g.trx[ct] = o
		}
		g.waits = map[[2]string]int{}
		for k, n := range lw {
			g.waits[[2]string{m.st.capTag(sr, k[0]), m.st.capTag(sr, k[1])}] += n
		}
	})
}

// stmtStart is a completed statement's start on the server's timer.
func stmtStart(st *stmtRow) uint64 { return st.end - min(uint64(st.wait.Int64), st.end) }

// completedRead is what one read of completed statements saw, for the
// watermark.
type completedRead struct {
	maxEnd     uint64
	maxKey     stmtKey
	read       bool // it listed at least one completed statement
	sawLastMax bool // the newest statement of the last read is still listed
}

// completed reads the statements that completed since the last read: it
// counts them, credits those outside any sampled or newly begun
// transaction their exact time (less what was credited while they ran),
// notes each session's last tag and transaction boundaries, and returns
// the boundaries per session. The first read only sets the baseline.
// timed says whether the server's timer can be mapped to the collector's
// clock (our own statement was seen running).
func (m *mysqlTarget) completed(stmts []stmtRow, sampled map[int64]bool, timed bool) map[int64]*trxWindow {
	fresh, rd := m.freshStatements(stmts)
	wins := m.windows(fresh)
	latest := map[int64]lastStmt{}
	for _, st := range fresh {
		if tag, ok := m.completedStmt(st, wins, sampled, timed); ok && st.pid != 0 {
			latest[st.pid] = lastStmt{st.key.event, tag}
		}
	}
	m.noteLastTags(latest, wins)
	if m.setup.table == "" {
		return wins
	}
	m.advanceWatermark(rd)
	return wins
}

// freshStatements returns the completed statements not read before, by
// session and event, and notes every completed one as read.
func (m *mysqlTarget) freshStatements(stmts []stmtRow) ([]*stmtRow, completedRead) {
	fresh := m.fresh[:0]
	rd := completedRead{maxEnd: m.watermark, maxKey: m.lastMax}
	for i := range stmts {
		st := &stmts[i]
		if st.running || !st.hasEnd {
			continue
		}
		rd.read = true
		if st.key == m.lastMax {
			rd.sawLastMax = true
		}
		if _, dup := m.seenStmts[st.key]; dup {
			continue
		}
		m.seenStmts[st.key] = st.end
		if st.end > rd.maxEnd {
			rd.maxEnd, rd.maxKey = st.end, st.key
		}
		if isCollectorStatement(st.text) || m.excluded[st.pid] {
			continue
		}
		fresh = append(fresh, st)
	}
	m.fresh = fresh
	slices.SortFunc(fresh, func(a, b *stmtRow) int {
		if c := cmp.Compare(a.pid, b.pid); c != 0 {
			return c
		}
		return cmp.Compare(a.key.event, b.key.event)
	})
	return fresh, rd
}

// windows finds each session's transaction boundaries among the fresh
// statements (and tells the join), and the open BEGIN of each session.
func (m *mysqlTarget) windows(fresh []*stmtRow) map[int64]*trxWindow {
	wins := map[int64]*trxWindow{}
	for _, st := range fresh {
		if st.pid == 0 {
			continue
		}
		w := wins[st.pid]
		if w == nil {
			w = &trxWindow{}
			wins[st.pid] = w
		}
		begin, end := boundary(st.text)
		switch {
		case begin:
			w.beginEvent, w.beginStart = st.key.event, stmtStart(st)
		case end:
			w.commitEvent, w.commitEnd = st.key.event, st.end
		case w.firstTag == "" && w.commitEvent == 0:
			if tag, ok := m.tagOfStatement(st.text); ok {
				w.firstTag = tag
			}
		}
	}
	for pid, w := range wins {
		switch s := m.session(pid); {
		case w.open():
			s.openBegin = w.beginStart
		case w.ended():
			s.openBegin = 0
		}
	}
	return wins
}

// lastStmt is a session's latest statement with a tag in one read.
type lastStmt struct {
	event uint64
	tag   string
}

// completedStmt credits and counts one fresh completed statement and tells
// the join what it says. It returns the statement's tag and whether it has
// one (a driver's statement has none).
func (m *mysqlTarget) completedStmt(st *stmtRow, wins map[int64]*trxWindow, sampled map[int64]bool, timed bool) (string, bool) {
	rs := m.running[st.key]
	delete(m.running, st.key)
	tag, ok := m.completedTag(st, rs, wins[st.pid])
	if !ok && rs == nil {
		return "", false // a driver's statement: no business process's
	}
	if m.primed && st.wait.Valid {
		m.creditCompleted(st, rs, tag, wins, sampled[st.pid], timed)
	}
	if !ok {
		return "", false
	}
	if m.primed {
		d := m.delta(tag)
		d.Stmts++
		if st.errs > 0 {
			d.Errors++
		}
	}
	return tag, true
}

// completedTag is a completed statement's tag, from its text, else from
// its run seen earlier, else its transaction's or session's (a prepared
// statement's execution, recorded without text).
func (m *mysqlTarget) completedTag(st *stmtRow, rs *runningStmt, w *trxWindow) (tag string, ok bool) {
	switch {
	case st.text != "":
		return m.tagOfStatement(st.text)
	case rs != nil:
		return rs.tag, true
	}
	return m.executeTag(st.pid, w), true
}

// creditCompleted credits a completed statement's time: the rest of what
// was credited while it ran; nothing inside the sampled time of its
// session's transaction; pending inside a transaction begun since the last
// poll (its hold counts it, see carryOf); else its exact time.
func (m *mysqlTarget) creditCompleted(st *stmtRow, rs *runningStmt, tag string, wins map[int64]*trxWindow, sampled, timed bool) {
	sec := float64(st.wait.Int64) / 1e12
	w := wins[st.pid]
	inSampled := sampled && (!timed || !w.ended() || stmtStart(st) < w.commitEnd)
	var openBegin uint64
	if s := m.sessions[st.pid]; s != nil && st.pid != 0 {
		openBegin = s.openBegin
	}
	switch {
	case rs != nil:
		m.credit(rs.tag, sec-rs.credited)
	case inSampled:
	case openBegin != 0 && stmtStart(st) >= openBegin:
		if w == nil {
			w = &trxWindow{}
			wins[st.pid] = w
		}
		w.pending = append(w.pending, pendingStmt{tag: tag, sec: sec})
	default:
		m.credit(tag, sec)
	}
}

// noteLastTags sets each session's tag from its latest statement, unless a
// transaction boundary came after it: then its tag is not known until its
// next statement, which names the time held meanwhile (see heldTag).
func (m *mysqlTarget) noteLastTags(latest map[int64]lastStmt, wins map[int64]*trxWindow) {
	for id, h := range latest {
		s := m.session(id)
		w := wins[id]
		if w != nil && max(w.beginEvent, w.commitEvent) > h.event {
			continue // a boundary came after it: handled below
		}
		if h.event >= s.tagEvent {
			s.tag, s.tagEvent, s.ended = h.tag, h.event, false
		}
		s.lastEvent = max(s.lastEvent, h.event)
	}
	for id, w := range wins {
		s := m.session(id)
		if b := max(w.beginEvent, w.commitEvent); b > s.tagEvent {
			s.tag, s.tagEvent, s.ended = "", b, w.ended() && !w.open()
			s.lastEvent = max(s.lastEvent, b)
		}
	}
}

// advanceWatermark moves the read's watermark and forgets statements
// behind it. history_long is a ring: if the newest statement of the last
// read is gone, statements in between were overwritten before this read.
// The other tables keep a few statements per session: always a sample.
func (m *mysqlTarget) advanceWatermark(rd completedRead) {
	lost := m.setup.table != tableHistoryLong || m.lastMax != (stmtKey{}) && !rd.sawLastMax && rd.read
	if m.primed && lost {
		m.st.markLowerBound(m.cfg.Name, SourceMySQL)
	}
	m.watermark, m.lastMax = rd.maxEnd, rd.maxKey
	for k, end := range m.seenStmts {
		if end+timerMargin < m.watermark {
			delete(m.seenStmts, k)
		}
	}
	m.primed = true
}

// timerRestarted reports whether the server's timer ran less between two
// polls than the collector's clock did: a server that restarted in
// between counts from its own start. The Uptime check alone missed such
// restarts: Uptime is whole seconds, so a server that came back within a
// second or two of the last poll can look as old as the one that died, and
// a timer behind the last completed statement's only catches a new server
// younger than the old one was. TestServerRestartForgetsDeadSessions
// failed so in CI: the dead sessions' ids came back and were credited the
// whole capped gap (2 sessions, 2.000 s).
//
// The server read prev before prevDone and now after sentAt, so on one
// server now-prev >= sentAt-prevDone; the slack (100 ms and 0.1 % of the
// gap) absorbs a server timer a little slower than this clock.
func timerRestarted(prev uint64, prevDone time.Time, now uint64, sentAt time.Time) bool {
	if prev == 0 || prevDone.IsZero() {
		return false
	}
	if now < prev {
		return true
	}
	ran := time.Duration((now - prev) / 1000)
	gap := sentAt.Sub(prevDone)
	return ran < gap-100*time.Millisecond-gap/1000
}
