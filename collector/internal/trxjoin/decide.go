package trxjoin

import (
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
// transaction's first tagged statement be found. Decide is pure: the same
// reads and sample give the same Result.
func Decide(reads []Read, s Sample) Result {
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
	j := judge{reads: reads, pid: s.Backend, tid: tb.ThreadID}
	if s.InTrx {
		if r, ok := j.trx(bi, ai); ok {
			return r
		}
	}
	return j.pin(bi, ai, s)
}

type judge struct {
	reads []Read
	pid   int64
	tid   int64
}

func (j judge) thread(i int) *Thread {
	t := j.reads[i].Threads[j.pid]
	if t == nil || t.ThreadID != j.tid {
		return nil
	}
	return t
}

// trx applies the causal rule: a transaction ACTIVE with the same EVENT_ID
// in a read that ended before the sample started and in one that started
// after it ended was open throughout the sample, so the session that held
// the backend idle in a transaction then owns it. The tag is that of the
// transaction's first tagged statement. ok is false when the rule does not
// apply (the caller falls back to the pin rule).
func (j judge) trx(bi, ai int) (Result, bool) {
	tb, ta := j.thread(bi), j.thread(ai)
	if tb.Trx.Active() && ta.Trx.Active() && tb.Trx.EventID == ta.Trx.EventID {
		id, parent := tb.Trx.EventID, tb.Trx.NestingEventID
		in := func(st Stmt) bool {
			return st.NestingTrx == id || st.EventID == parent && !isBoundary(st)
		}
		return j.firstTagged(bi, in, "transaction open in both bracketing reads (events_transactions_current)"), true
	}
	if tb.Trx != nil || ta.Trx != nil {
		return Result{}, false // recorded, but not one transaction open throughout
	}
	// Transactions are not recorded: the last BEGIN in the history, the same
	// in both reads and not ended in either, is the open transaction.
	bb, ba := openBegin(tb), openBegin(ta)
	if bb == 0 || bb != ba {
		return Result{}, false
	}
	in := func(st Stmt) bool { return st.EventID > bb }
	return j.firstTagged(bi, in, "BEGIN open in both bracketing reads (statement history)"), true
}

// firstTagged returns the tag of the first statement, by EVENT_ID, of the
// reads from bi on that is in the transaction and names a tag.
func (j judge) firstTagged(bi int, in func(Stmt) bool, why string) Result {
	var (
		best     Stmt
		bestRead = -1
		open     bool
	)
	for i := bi; i < len(j.reads); i++ {
		t := j.thread(i)
		if t == nil {
			break
		}
		open = t.Trx.Active() || openBegin(t) != 0
		for _, st := range t.Stmts {
			if !in(st) || isBoundary(st) {
				continue
			}
			if bestRead >= 0 && st.EventID >= best.EventID {
				continue
			}
			if _, q := j.tagOf(i, st); q == Unknown {
				continue
			}
			best, bestRead = st, i
		}
	}
	if bestRead < 0 {
		return Result{Pending: open, Reason: why + "; no tagged statement in it yet"}
	}
	tag, q := j.tagOf(bestRead, best)
	return Result{Tag: tag, Quality: q, Reason: why}
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
func (j judge) pin(bi, ai int, s Sample) Result {
	tb, ta := j.thread(bi), j.thread(ai)
	var cands []cand
	var maxB int64
	var last *Stmt
	for k := range tb.Stmts {
		st := &tb.Stmts[k]
		maxB = max(maxB, st.EventID)
		if st.Done {
			last = st
		}
	}
	if last != nil {
		tag, q := j.tagOf(bi, *last)
		cands = append(cands, cand{*last, tag, q})
	}
	for _, st := range ta.Stmts {
		if !st.Done || last != nil && st.EventID <= last.EventID {
			continue
		}
		if st.EventID <= maxB && !wasRunning(tb, st.EventID) {
			continue
		}
		tag, q := j.tagOf(ai, st)
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
	ra := j.reads[ai]
	for _, c := range named[1:] {
		if ra.ServerNow == 0 || c.st.TimerEnd == 0 {
			continue
		}
		end := ra.Start.Add(time.Duration((int64(c.st.TimerEnd) - int64(ra.ServerNow)) / 1000))
		if !end.After(mid) {
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

func wasRunning(t *Thread, id int64) bool {
	for _, st := range t.Stmts {
		if st.EventID == id {
			return !st.Done
		}
	}
	return false
}

// tagOf names the tag of a statement first seen in read i. Text carrying a
// tag is exact. A COMMIT or ROLLBACK names the transaction it ended. A
// binary-protocol Prepare or Execute without text (MariaDB) is named by the
// thread's prepared_statements_instances.
func (j judge) tagOf(i int, st Stmt) (string, Quality) {
	if tag, ok := conntag.ParseTag(st.Text); ok {
		return tag, Exact
	}
	t := j.thread(i)
	switch {
	case isEnd(st):
		if st.NestingTrx != 0 {
			return j.firstTagged(i, func(x Stmt) bool { return x.NestingTrx == st.NestingTrx && x.EventID < st.EventID }, "").tagQ()
		}
		b := int64(0)
		for _, x := range t.Stmts {
			if x.EventID < st.EventID && isBegin(x) {
				b = x.EventID
			}
		}
		if b == 0 {
			return "", Unknown
		}
		return j.firstTagged(i, func(x Stmt) bool { return x.EventID > b && x.EventID < st.EventID }, "").tagQ()
	case st.Text == "" && strings.HasSuffix(st.EventName, "/Prepare"):
		for k := i; k < len(j.reads); k++ {
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
		return j.executeTag(i, st)
	}
	return "", Unknown
}

func (r Result) tagQ() (string, Quality) { return r.Tag, r.Quality }

// executeTag names an Execute event from the prepared statements its
// thread owned when read i first showed it: exact when they carry one tag,
// or when only statements of one tag executed between read i-1 and read i
// (COUNT_EXECUTE moved); inferred when statements of several tags did (the
// one that executed most, the latest prepared on a tie).
func (j judge) executeTag(i int, st Stmt) (string, Quality) {
	t := j.thread(i)
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
	if i == 0 || j.thread(i-1) == nil {
		return "", Unknown
	}
	before := map[int64]int64{}
	for _, p := range j.thread(i - 1).Prepared {
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
