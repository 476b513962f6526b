package trxjoin

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/holdtime/holdtime/conntag"
)

// Quality says how a Result was reached.
type Quality uint8

const (
	// Unknown: the evidence names no tag.
	Unknown Quality = iota
	// Inferred: the server's evidence left a choice and time made it.
	Inferred
	// Exact: thread identity and event order alone give the tag.
	Exact
)

func (q Quality) String() string {
	switch q {
	case Exact:
		return "exact"
	case Inferred:
		return "inferred"
	}
	return "unknown"
}

// Sample is one ProxySQL observation of a session idle while it holds a
// backend.
type Sample struct {
	// Start and End are the collector's wall clock just before the
	// stats_mysql_processlist query was sent and just after its rows were
	// read.
	Start, End time.Time
	// Backend is the server's processlist id of the backend the session
	// holds: extended_info's backends[].conn.mysql.thread_id.
	Backend int64
	// HeldFrom and HeldTo, when set, are the part of Start..End in which
	// the session certainly held the backend idle: from reading the first
	// sample's answer to sending the last sample's query (ProxySQL took
	// each snapshot somewhere between sending and reading; with one sample
	// the part is empty). A read inside Start..End but not inside this part
	// may have seen the backend before the session took it or after it
	// gave it back (measured: a 50 ms read under load, inside Start..End,
	// showed the next borrower's BEGIN and named its tag, exact and wrong).
	// Zero: Start..End.
	HeldFrom, HeldTo time.Time
	// InTrx: ProxySQL shows the session inside a transaction. Otherwise the
	// backend is pinned (user variable, temporary table, lock, prepared
	// statement, …).
	InTrx bool
}

// Result is what the server says about a Sample.
type Result struct {
	Tag     string
	Quality Quality
	// Pending: no server read started after the sample ended yet, or the
	// sampled transaction has not run a tagged statement yet; ask again
	// after the next read.
	Pending bool
	// Reason says, in a few words, which rule gave the result; it ends
	// in EarlierReadUnlisted when the bracketing reads decided and the
	// earlier one does not list the backend.
	Reason string
}

// EarlierReadUnlisted ends the Reason of a Result the bracketing reads
// gave although the earlier one does not list the backend (one ProxySQL
// opened since): what tells that case from the others in a test.
const EarlierReadUnlisted = "the earlier read does not list the backend"

// Decide names the holder of a sampled backend from reads of the server
// behind it. reads are this server's reads in the order they were made
// (by Start), and must include the last read that ended before the sample
// started and the first that started after it ended; later reads let a
// transaction's first tagged statement be found. Its cost is linear in the
// reads and their statements: pass the reads of a few seconds around the
// sample, not every read ever made. Decide is pure: the same reads and
// sample give the same Result.
func Decide(reads []Read, s Sample) Result {
	if r, ok := inside(reads, s); ok {
		return r
	}
	bi, ai := -1, -1
	for i, r := range reads {
		if r.End.Before(s.Start) {
			bi = i
		}
		if ai < 0 && r.Start.After(s.End) {
			ai = i
		}
	}
	if bi < 0 {
		return Result{Reason: "no server read ended before the sample started"}
	}
	if ai < 0 {
		return Result{Pending: true, Reason: "no server read started after the sample ended yet"}
	}
	tb, ta := reads[bi].Threads[s.Backend], reads[ai].Threads[s.Backend]
	if ta == nil {
		return Result{Reason: "the server does not list the backend's processlist id in the read after the sample"}
	}
	// An earlier read that does not list the backend (a backend ProxySQL
	// opened since, not yet in the processlist the collector listed) is an
	// empty one: the rules use the earlier read only to rule out what the
	// backend ran before it, so without it every transaction or statement
	// the later reads show stays a candidate, a superset of the true one
	// (whether the read covered the host or was capped does not matter).
	// Left unchecked then is reuse of the processlist id between the sample
	// and the later read: MariaDB and MySQL number connections with one
	// increasing counter (MySQL 8 skips ids in use when it wraps), so that
	// takes some 4 billion connects within one poll. Without this, the
	// first idle transaction on a backend ProxySQL opened mid-run was
	// unknown (collector's TestLiveJoinNamesAFreshBackendsFirstIdleTransaction:
	// 8 transactions idle 120 ms, 1.21 and 1.28 s unknown in 2 of 3 runs;
	// with it 0 unknown, all exact, in 3).
	if tb != nil && tb.ThreadID != ta.ThreadID {
		return Result{Reason: "the processlist id belongs to another thread in the later read"}
	}
	j := newJudge(reads, s.Backend, ta.ThreadID)
	var r Result
	ok := false
	if s.InTrx {
		r, ok = j.trx(bi, ai, s)
	}
	if !ok {
		r = j.pin(bi, ai, s)
	}
	if tb == nil {
		r.Reason += "; " + EarlierReadUnlisted
	}
	return r
}

// inside applies the strongest rule: a read made entirely within the
// sample's span saw the backend while the session held it idle, so the
// transaction it shows open, or the last statement it shows completed, is
// the session's. ok is false when no read lies inside the span.
func inside(reads []Read, s Sample) (Result, bool) {
	from, to := s.Start, s.End
	if !s.HeldFrom.IsZero() || !s.HeldTo.IsZero() {
		from, to = s.HeldFrom, s.HeldTo
	}
	for _, r := range reads {
		if r.Start.Before(from) || r.End.After(to) {
			continue
		}
		t := r.Threads[s.Backend]
		if t == nil {
			continue
		}
		j := newJudge(reads, s.Backend, t.ThreadID)
		if s.InTrx {
			trx := recordedTrx(r, t)
			if trx.Active() {
				return j.firstTagged(j.trxMember(trx.EventID), "a read inside the idle span shows the transaction open"), true
			}
			if b := openBegin(t); b != 0 && trx == nil {
				return j.firstTagged(j.beginMember(b), "a read inside the idle span shows its BEGIN open"), true
			}
		}
		var last *Stmt
		for k := range t.Stmts {
			if t.Stmts[k].Done {
				last = &t.Stmts[k]
			}
		}
		if last == nil {
			continue
		}
		tag, q := j.tagOf(*last)
		if q == Unknown {
			return Result{Reason: "a read inside the idle span shows an untagged last statement"}, true
		}
		return Result{Tag: tag, Quality: q, Reason: "a read inside the idle span shows the backend's last statement"}, true
	}
	return Result{}, false
}

// judge holds one backend thread's evidence across the reads.
type judge struct {
	reads []Read
	pid   int64
	tid   int64
	// all are the thread's statements over every read, one per EVENT_ID
	// (the completed copy when one read shows it running and a later one
	// completed), by EVENT_ID.
	all []Stmt
	// seen and done are the first read that shows a statement at all, and
	// completed.
	seen, done map[int64]int
	// parent maps a transaction's EVENT_ID to the statement that started it.
	parent map[int64]int64
}

func newJudge(reads []Read, pid, tid int64) *judge {
	j := &judge{reads: reads, pid: pid, tid: tid, seen: map[int64]int{}, done: map[int64]int{}, parent: map[int64]int64{}}
	idx := map[int64]int{}
	for i := range reads {
		t := j.thread(i)
		if t == nil {
			continue
		}
		if trx := j.trxAt(i); trx != nil {
			j.parent[trx.EventID] = trx.NestingEventID
		}
		for _, st := range t.Stmts {
			k, ok := idx[st.EventID]
			if !ok {
				idx[st.EventID] = len(j.all)
				j.all = append(j.all, st)
				j.seen[st.EventID] = i
				if st.Done {
					j.done[st.EventID] = i
				}
				continue
			}
			if st.Done && !j.all[k].Done {
				j.all[k] = st
				j.done[st.EventID] = i
			}
		}
	}
	slices.SortFunc(j.all, func(a, b Stmt) int { return cmp.Compare(a.EventID, b.EventID) })
	// A transaction no read showed in events_transactions_current (begun
	// and ended between two reads) is known by its statements' nesting
	// only, and the statement that began it implicitly (autocommit=0) is
	// not nested in it. A thread numbers its events one after the other
	// and the transaction event is made as that statement starts, so the
	// statement numbered one below the transaction, not nested in one,
	// began it (measured through ProxySQL on MariaDB 10.11: trx 4 after
	// SELECT 3, trx 7 after SELECT 6, trx 13 after SELECT 12; such a
	// transaction beside another of a different tag was unknown, 1.06 s of
	// 24 s). With stages or waits recorded, events between them leave it
	// unknown as before.
	for _, st := range j.all {
		id := st.NestingTrx
		if id == 0 || j.parent[id] != 0 {
			continue
		}
		if k, ok := slices.BinarySearchFunc(j.all, id-1, func(x Stmt, t int64) int { return cmp.Compare(x.EventID, t) }); ok && j.all[k].NestingTrx == 0 {
			j.parent[id] = id - 1
		}
	}
	return j
}

func (j *judge) thread(i int) *Thread {
	t := j.reads[i].Threads[j.pid]
	if t == nil || t.ThreadID != j.tid {
		return nil
	}
	return t
}

// trxAt is the thread's transaction as read i shows it, nil when the read
// shows none or transactions were not being recorded then.
func (j *judge) trxAt(i int) *Trx {
	t := j.thread(i)
	if t == nil {
		return nil
	}
	return recordedTrx(j.reads[i], t)
}

// recordedTrx is t.Trx when read r found transactions recorded. A server
// whose transaction instrument or consumer was turned off at run time
// keeps each thread's last row in events_transactions_current (measured on
// MariaDB 10.11: COMMITTED rows of transactions long over, beside BEGINs
// in the statement history that no row stands for): such a row is not
// this thread's current transaction. A Read made by hand (Setup.Consumers
// nil) is taken as it is.
func recordedTrx(r Read, t *Thread) *Trx {
	if r.Setup.Consumers != nil && (!r.Setup.TrxInstrument || !r.Setup.Consumers["events_transactions_current"]) {
		return nil
	}
	return t.Trx
}

// wall maps a server timer value to the collector's clock through read i.
func (j *judge) wall(i int, ps uint64) (time.Time, bool) {
	r := j.reads[i]
	if r.ServerNow == 0 || ps == 0 {
		return time.Time{}, false
	}
	return r.Start.Add(time.Duration((int64(ps) - int64(r.ServerNow)) / 1000)), true
}

// trxCand is one transaction the sampled session may have been idle in.
type trxCand struct {
	id int64
	in func(Stmt) bool
	// named names it; nil: firstTagged(in).
	named func() Result
	// from and to, when from is set, are the statements that opened and
	// ended it (to 0: not ended in what the reads show), for the server's
	// timer; otherwise its members and the statement that started it
	// (events_transactions_current) give its span.
	from, to int64
}

func (c trxCand) result(j *judge) Result {
	if c.named != nil {
		return c.named()
	}
	return j.firstTagged(c.in, "")
}

// trx applies the causal rule. A transaction ACTIVE with the same EVENT_ID
// in a read that ended before the sample started and in one that started
// after it ended was open throughout the sample, so the session ProxySQL
// showed idle in a transaction on that backend owns it. More generally the
// session's transaction is one of those the backend had open between the
// two reads: the one open in the earlier read and those the later reads
// show begun since. When they all name one tag that tag is exact; when
// they do not, the server's timer picks the one open at the middle of the
// sample and the result is inferred. ok is false when no transaction is
// known (the caller falls back to the pin rule).
func (j *judge) trx(bi, ai int, s Sample) (Result, bool) {
	tb, ta := j.trxAt(bi), j.trxAt(ai)
	if tb.Active() && ta.Active() && tb.EventID == ta.EventID {
		return j.firstTagged(j.trxMember(tb.EventID), "transaction open in both bracketing reads (events_transactions_current)"), true
	}
	cands := j.candidates(bi, ai)
	if len(cands) == 0 {
		return Result{}, false
	}
	if len(cands) == 1 {
		r := cands[0].result(j)
		r.Reason = "the only transaction the backend had open between the bracketing reads" + r.Reason
		return r, true
	}
	rs := make([]Result, len(cands))
	same := true
	for k, c := range cands {
		rs[k] = c.result(j)
		same = same && rs[k].Quality == Exact && rs[k].Tag == rs[0].Tag
	}
	if same {
		return Result{Tag: rs[0].Tag, Quality: Exact,
			Reason: "every transaction the backend had open between the bracketing reads names the same tag"}, true
	}
	// Time breaks the tie: the candidate whose span, on the collector's
	// clock, holds the middle of the sample (else the last one begun
	// before it).
	mid := s.Start.Add(s.End.Sub(s.Start) / 2)
	pick := -1
	for k, c := range cands {
		var first, end uint64
		for _, st := range j.all {
			switch {
			case c.from != 0:
				if st.EventID == c.from {
					first = st.TimerStart
				}
				if st.EventID == c.to {
					end = st.TimerEnd
					if isBegin(st) {
						end = st.TimerStart // a BEGIN ends the transaction before it as it starts
					}
				}
			case c.in(st) || st.EventID == j.parent[c.id]:
				if first == 0 {
					first = st.TimerStart
				}
				if isEnd(st) {
					end = st.TimerEnd
				}
			}
		}
		from, ok := j.wall(ai, first)
		if !ok || from.After(mid) {
			continue
		}
		if to, ok := j.wall(ai, end); end == 0 || ok && !to.Before(mid) {
			pick = k
			break
		}
		pick = k
	}
	if pick < 0 || rs[pick].Quality == Unknown {
		return Result{Reason: "transactions of different tags between the bracketing reads; none of them named by the server's timer"}, true
	}
	return Result{Tag: rs[pick].Tag, Quality: Inferred,
		Reason: "transactions of different tags between the bracketing reads; the server's timer picked the one open at the sample"}, true
}

// trxMember is the membership test of a recorded transaction: statements
// nested in it, and the statement that started it unless that is a BEGIN.
func (j *judge) trxMember(id int64) func(Stmt) bool {
	parent := j.parent[id]
	return func(st Stmt) bool {
		return st.NestingTrx == id || parent != 0 && st.EventID == parent && !isBoundary(st)
	}
}

// candidates lists the transactions the backend may have had open during
// the sample, a superset of the true one. A read is not a snapshot (its
// parts are read one after the other between its Start and End), so each
// fact is used only for what it proves:
//   - anything a read shows happened before that read ended;
//   - the sampled transaction had begun before the sample, so read ai shows
//     it (its id, or its BEGIN);
//   - it had not ended by read bi's end, so no read up to bi shows its end;
//   - it is not older than a transaction read bi already shows begun: on
//     one connection transactions follow each other.
func (j *judge) candidates(bi, ai int) []trxCand {
	recorded := false
	for i := 0; i <= ai; i++ {
		if j.trxAt(i) != nil {
			recorded = true
		}
	}
	type info struct {
		seen, ended int // first read that shows it, first that shows it ended (-1: none)
	}
	trxs := map[int64]*info{}
	note := func(id int64, read int, ended bool) {
		x := trxs[id]
		if x == nil {
			x = &info{seen: read, ended: -1}
			trxs[id] = x
		}
		x.seen = min(x.seen, read)
		if ended && (x.ended < 0 || read < x.ended) {
			x.ended = read
		}
	}
	var member func(id int64) func(Stmt) bool
	var segs map[int64]segment
	if recorded {
		member = j.trxMember
		for i := 0; i <= ai; i++ {
			if trx := j.trxAt(i); trx != nil {
				note(trx.EventID, i, !trx.Active())
			}
		}
		for _, st := range j.all {
			if st.NestingTrx == 0 {
				continue
			}
			if i := j.seen[st.EventID]; i <= ai {
				note(st.NestingTrx, i, false)
			}
			if d, ok := j.done[st.EventID]; ok && d <= ai && isEnd(st) {
				note(st.NestingTrx, d, true)
			}
		}
	} else {
		// Transactions are not recorded: the statement history's
		// boundaries stand for them. A BEGIN opens one, ended by the next
		// COMMIT, ROLLBACK or BEGIN. The statements after a COMMIT or
		// ROLLBACK up to the next boundary (a run) may be an implicit
		// transaction (autocommit=0: ProxySQL sends its own untagged SET
		// autocommit=0 before the session's first statement) or
		// autocommit statements: nothing here tells which, so each run is
		// a candidate too. Without the runs, a backend whose BEGIN
		// transaction was open at the earlier read and that then served an
		// autocommit=0 session was named after the BEGIN's tag, exact and
		// wrong (measured through ProxySQL 2.7.1 on MariaDB 10.11 with the
		// transaction instrument off: 1.0 to 2.4 s of 24 s credited to the
		// wrong tag, exact, hog BEGIN…COMMIT beside autocommit=0 clients).
		segs = j.segments()
		for id, g := range segs {
			if g.seen <= ai {
				note(id, g.seen, false)
			}
			if g.ended >= 0 {
				note(id, g.ended, true)
			}
		}
	}
	var newestAtB int64
	for id, x := range trxs {
		if x.seen <= bi {
			newestAtB = max(newestAtB, id)
		}
	}
	var out []trxCand
	for id, x := range trxs {
		if id < newestAtB || x.ended >= 0 && x.ended <= bi || x.seen > ai {
			continue
		}
		if g, ok := segs[id]; ok {
			out = append(out, g.trxCand)
			continue
		}
		out = append(out, trxCand{id: id, in: member(id)})
	}
	slices.SortFunc(out, func(a, b trxCand) int { return cmp.Compare(a.id, b.id) })
	return out
}

// segment is a transaction the statement history's boundaries show when
// transactions are not recorded: a BEGIN and the statements after it, or a
// run of statements after a COMMIT or ROLLBACK (or from the first one
// shown), each up to the next boundary.
type segment struct {
	trxCand
	run         bool // a run of statements, not a BEGIN's
	seen, ended int  // first read that shows it, first that shows it ended (-1: none)
}

// segments splits the thread's statements at their boundaries, keyed by
// the segment's first statement. A BEGIN (whose start proves the statement
// before it done) ends a segment where the reads first show it; a COMMIT or
// ROLLBACK where they first show it completed.
func (j *judge) segments() map[int64]segment {
	out := map[int64]segment{}
	var cur *segment
	closeBy := func(st Stmt, read int, ok bool) {
		if cur == nil {
			return
		}
		cur.to = st.EventID
		if ok {
			cur.ended = read
		}
		out[cur.from] = *cur
		cur = nil
	}
	for _, st := range j.all {
		seen := j.seen[st.EventID]
		switch {
		case isBegin(st):
			closeBy(st, seen, true)
			cur = &segment{trxCand: trxCand{id: st.EventID, from: st.EventID}, seen: seen, ended: -1}
		case isEnd(st):
			d, ok := j.done[st.EventID]
			closeBy(st, d, ok)
		default:
			if cur == nil {
				cur = &segment{trxCand: trxCand{id: st.EventID, from: st.EventID}, run: true, seen: seen, ended: -1}
			}
			cur.seen = min(cur.seen, seen)
		}
	}
	if cur != nil {
		out[cur.from] = *cur
	}
	for id, g := range out {
		from, to := g.from, g.to
		g.in = func(st Stmt) bool { return st.EventID >= from && (to == 0 || st.EventID < to) && !isBoundary(st) }
		if g.run {
			in := g.in
			g.named = func() Result { return j.allTagged(in) }
		}
		out[id] = g
	}
	return out
}

// beginMember is the membership test of a transaction known by its BEGIN
// only: the statements after it up to the next BEGIN, COMMIT or ROLLBACK.
func (j *judge) beginMember(b int64) func(Stmt) bool {
	end := int64(0)
	for _, st := range j.all {
		if st.EventID > b && isBoundary(st) {
			end = st.EventID
			break
		}
	}
	return func(st Stmt) bool { return st.EventID > b && (end == 0 || st.EventID < end) }
}

// allTagged names a run of statements outside any BEGIN: exact when every
// tagged statement in it names the same tag. The run may hold an implicit
// transaction after autocommit statements of an earlier borrower, so its
// first tag is not enough.
func (j *judge) allTagged(in func(Stmt) bool) Result {
	var tag string
	q := Unknown
	for _, st := range j.all {
		if !in(st) {
			continue
		}
		t, tq := j.tagOf(st)
		switch {
		case tq == Unknown:
		case q == Unknown:
			tag, q = t, tq
		case t != tag:
			return Result{Reason: "; statements of different tags in it"}
		default:
			q = min(q, tq)
		}
	}
	if q == Unknown {
		return Result{Reason: "; no tagged statement in it"}
	}
	return Result{Tag: tag, Quality: q}
}

// firstTagged returns the tag of the first statement, by EVENT_ID, that is
// in the transaction and names a tag, from every read.
func (j *judge) firstTagged(in func(Stmt) bool, why string) Result {
	open := false
	if n := len(j.reads) - 1; n >= 0 {
		if t := j.thread(n); t != nil {
			open = j.trxAt(n).Active() || openBegin(t) != 0
		}
	}
	for _, st := range j.all {
		if !in(st) || isBoundary(st) {
			continue
		}
		if tag, q := j.tagOf(st); q != Unknown {
			return Result{Tag: tag, Quality: q, Reason: why}
		}
	}
	return Result{Pending: open, Reason: why + "; no tagged statement in it yet"}
}

// pin names a backend a session holds outside a transaction. The session
// took the backend by sending a statement on it and nothing else can use it
// while it is held, so the last statement the backend completed before the
// sample is the session's. Statements completed by the earlier read ran
// before the sample; statements new in the later read ran before it or
// after it: when they and the earlier read's last statement all name one
// tag, that tag is exact; otherwise the server's timer, mapped to the
// collector's clock through the later read, picks the last one that ended
// before the middle of the sample, and the result is inferred.
func (j *judge) pin(bi, ai int, s Sample) Result {
	var cands []cand
	var last int64 = -1
	for _, st := range j.all {
		if d, ok := j.done[st.EventID]; ok && d <= bi {
			last = st.EventID
		}
	}
	for _, st := range j.all {
		d, ok := j.done[st.EventID]
		if !ok || d > ai || st.EventID < last {
			continue
		}
		tag, q := j.tagOf(st)
		cands = append(cands, cand{st, tag, q})
	}
	// Statements that name no tag (ProxySQL's own SET NAMES, a ping) say
	// nothing about the holder.
	named := cands[:0:0]
	for _, c := range cands {
		if c.q != Unknown {
			named = append(named, c)
		}
	}
	if len(named) == 0 {
		return Result{Reason: "no tagged statement before the sample"}
	}
	same, worst := true, Exact
	for _, c := range named {
		same = same && c.tag == named[0].tag
		worst = min(worst, c.q)
	}
	if same {
		why := "pinned: the backend's last statement before the sample"
		if len(named) > 1 {
			why = "pinned: every statement between the bracketing reads names the same tag"
		}
		return Result{Tag: named[0].tag, Quality: worst, Reason: why}
	}
	mid := s.Start.Add(s.End.Sub(s.Start) / 2)
	pick := named[0]
	for _, c := range named[1:] {
		if end, ok := j.wall(ai, c.st.TimerEnd); ok && !end.After(mid) {
			pick = c
		}
	}
	return Result{Tag: pick.tag, Quality: Inferred,
		Reason: "pinned: statements of different tags between the bracketing reads; the server's timer picked the last before the sample"}
}

type cand struct {
	st  Stmt
	tag string
	q   Quality
}

// tagOf names the tag of a statement. Text carrying a tag is exact. A
// COMMIT or ROLLBACK names the transaction it ended. A binary-protocol
// Prepare or Execute without text (MariaDB) is named by the thread's
// prepared_statements_instances.
func (j *judge) tagOf(st Stmt) (string, Quality) {
	if tag, ok := conntag.ParseTag(st.Text); ok {
		return tag, Exact
	}
	switch {
	case isEnd(st):
		if st.NestingTrx != 0 {
			in := j.trxMember(st.NestingTrx)
			return j.firstTagged(func(x Stmt) bool { return in(x) && x.EventID < st.EventID }, "").tagQ()
		}
		b := int64(0)
		for _, x := range j.all {
			if x.EventID < st.EventID && isBegin(x) {
				b = x.EventID
			}
		}
		if b == 0 {
			return "", Unknown
		}
		return j.firstTagged(func(x Stmt) bool { return x.EventID > b && x.EventID < st.EventID }, "").tagQ()
	case st.Text == "" && strings.HasSuffix(st.EventName, "/Prepare"):
		for k := j.seen[st.EventID]; k < len(j.reads); k++ {
			if tk := j.thread(k); tk != nil {
				for _, p := range tk.Prepared {
					if p.OwnerEventID == st.EventID {
						if tag, ok := conntag.ParseTag(p.Text); ok {
							return tag, Exact
						}
						return "", Unknown
					}
				}
			}
		}
	case isExecute(st):
		return j.executeTag(st)
	}
	return "", Unknown
}

func (r Result) tagQ() (string, Quality) { return r.Tag, r.Quality }

// executeTag names an Execute event from the prepared statements its
// thread owned: exact when they carry one tag, or when the statements whose
// COUNT_EXECUTE moved from two reads before the one that first shows the
// Execute to the one that first shows it completed all carry one tag;
// inferred when statements of several tags moved (the one that executed
// most, the latest prepared on a tie).
func (j *judge) executeTag(st Stmt) (string, Quality) {
	first, ok := j.seen[st.EventID]
	if !ok {
		return "", Unknown
	}
	last, ok := j.done[st.EventID]
	if !ok {
		last = first
	}
	t := j.thread(last)
	var live []Prepared
	for _, p := range t.Prepared {
		if p.OwnerEventID < st.EventID {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return "", Unknown
	}
	if tag, ok := oneTag(live); ok {
		return tag, Exact
	}
	// The counts of read first-1 may have been read after the Execute ran
	// (a read is not a snapshot; prepared statements are read last): the
	// baseline is read first-2, read entirely before read first-1 showed
	// no trace of the Execute.
	if first < 2 || j.thread(first-2) == nil {
		return "", Unknown
	}
	before := map[int64]int64{}
	for _, p := range j.thread(first - 2).Prepared {
		before[p.StatementID] = p.Executes
	}
	var moved []Prepared
	var delta []int64
	for _, p := range live {
		if d := p.Executes - before[p.StatementID]; d > 0 {
			moved, delta = append(moved, p), append(delta, d)
		}
	}
	if len(moved) == 0 {
		return "", Unknown
	}
	if tag, ok := oneTag(moved); ok {
		return tag, Exact
	}
	best := 0
	for k := range moved {
		if delta[k] > delta[best] || delta[k] == delta[best] && moved[k].OwnerEventID > moved[best].OwnerEventID {
			best = k
		}
	}
	tag, ok := conntag.ParseTag(moved[best].Text)
	if !ok {
		return "", Unknown
	}
	return tag, Inferred
}

// oneTag reports the tag when every prepared statement carries the same
// one. An untagged statement makes the set ambiguous.
func oneTag(ps []Prepared) (string, bool) {
	var tag string
	for k, p := range ps {
		t, ok := conntag.ParseTag(p.Text)
		if !ok || k > 0 && t != tag {
			return "", false
		}
		tag = t
	}
	return tag, true
}

// openBegin is the EVENT_ID of the thread's last BEGIN / START TRANSACTION
// when no COMMIT or ROLLBACK follows it in what the read shows, else 0.
func openBegin(t *Thread) int64 {
	var b int64
	for _, st := range t.Stmts {
		switch {
		case isBegin(st):
			b = st.EventID
		case isEnd(st):
			b = 0
		}
	}
	return b
}

func isBegin(st Stmt) bool { return st.EventName == "statement/sql/begin" }

func isEnd(st Stmt) bool {
	return st.EventName == "statement/sql/commit" || st.EventName == "statement/sql/rollback"
}

func isBoundary(st Stmt) bool { return isBegin(st) || isEnd(st) }

func isExecute(st Stmt) bool {
	return st.EventName == "statement/com/Execute" || st.EventName == "statement/sql/execute"
}
