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
	// Reason says, in a few words, which rule gave the result.
	Reason string
}

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
	if tb == nil || ta == nil {
		return Result{Reason: "the server does not list the backend's processlist id in both bracketing reads"}
	}
	if tb.ThreadID != ta.ThreadID {
		return Result{Reason: "the processlist id belongs to another thread in the later read"}
	}
	j := newJudge(reads, s.Backend, tb.ThreadID)
	if s.InTrx {
		if r, ok := j.trx(bi, ai, s); ok {
			return r
		}
	}
	return j.pin(bi, ai, s)
}

// inside applies the strongest rule: a read made entirely within the
// sample's span saw the backend while the session held it idle, so the
// transaction it shows open, or the last statement it shows completed, is
// the session's. ok is false when no read lies inside the span.
func inside(reads []Read, s Sample) (Result, bool) {
	for _, r := range reads {
		if r.Start.Before(s.Start) || r.End.After(s.End) {
			continue
		}
		t := r.Threads[s.Backend]
		if t == nil {
			continue
		}
		j := newJudge(reads, s.Backend, t.ThreadID)
		if s.InTrx {
			if t.Trx.Active() {
				return j.firstTagged(j.trxMember(t.Trx.EventID), "a read inside the idle span shows the transaction open"), true
			}
			if b := openBegin(t); b != 0 && t.Trx == nil {
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
		if t.Trx != nil {
			j.parent[t.Trx.EventID] = t.Trx.NestingEventID
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
	return j
}

func (j *judge) thread(i int) *Thread {
	t := j.reads[i].Threads[j.pid]
	if t == nil || t.ThreadID != j.tid {
		return nil
	}
	return t
}

// wall maps a server timer value to the collector's clock through read i.
func (j *judge) wall(i int, ps uint64) (time.Time, bool) {
	r := j.reads[i]
	if r.ServerNow == 0 || ps == 0 {
		return time.Time{}, false
	}
	return r.Start.Add(time.Duration((int64(ps) - int64(r.ServerNow)) / 1000)), true
}

// maxEvent is the highest EVENT_ID read i shows for the thread.
func (j *judge) maxEvent(i int) int64 {
	t := j.thread(i)
	var m int64
	if t.Trx != nil {
		m = t.Trx.EventID
	}
	for _, st := range t.Stmts {
		m = max(m, st.EventID)
	}
	return m
}

// trxCand is one transaction the sampled session may have been idle in.
type trxCand struct {
	id int64
	in func(Stmt) bool
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
	tb, ta := j.thread(bi), j.thread(ai)
	if tb.Trx.Active() && ta.Trx.Active() && tb.Trx.EventID == ta.Trx.EventID {
		return j.firstTagged(j.trxMember(tb.Trx.EventID), "transaction open in both bracketing reads (events_transactions_current)"), true
	}
	cands := j.candidates(bi, ai)
	if len(cands) == 0 {
		return Result{}, false
	}
	if len(cands) == 1 {
		return j.firstTagged(cands[0].in, "the only transaction the backend had open between the bracketing reads"), true
	}
	rs := make([]Result, len(cands))
	same := true
	for k, c := range cands {
		rs[k] = j.firstTagged(c.in, "")
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
			if c.in(st) || st.EventID == j.parent[c.id] {
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
		if t := j.thread(i); t != nil && t.Trx != nil {
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
	if recorded {
		member = j.trxMember
		for i := 0; i <= ai; i++ {
			if t := j.thread(i); t != nil && t.Trx != nil {
				note(t.Trx.EventID, i, !t.Trx.Active())
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
		// Transactions are not recorded: BEGIN statements stand for them,
		// ended by the next COMMIT, ROLLBACK or BEGIN.
		member = j.beginMember
		var open int64
		for _, st := range j.all {
			if isBegin(st) {
				if i := j.seen[st.EventID]; i <= ai {
					note(st.EventID, i, false)
				}
				open = st.EventID
				continue
			}
			if isEnd(st) && open != 0 {
				if d, ok := j.done[st.EventID]; ok && d <= ai {
					note(open, d, true)
				}
				open = 0
			}
		}
		// A BEGIN is ended by the next BEGIN too.
		var prev int64
		for _, st := range j.all {
			if isBegin(st) {
				if prev != 0 {
					note(prev, j.seen[st.EventID], true)
				}
				prev = st.EventID
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
		out = append(out, trxCand{id, member(id)})
	}
	slices.SortFunc(out, func(a, b trxCand) int { return cmp.Compare(a.id, b.id) })
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

// firstTagged returns the tag of the first statement, by EVENT_ID, that is
// in the transaction and names a tag, from every read.
func (j *judge) firstTagged(in func(Stmt) bool, why string) Result {
	open := false
	if n := len(j.reads) - 1; n >= 0 {
		if t := j.thread(n); t != nil {
			open = t.Trx.Active() || openBegin(t) != 0
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
