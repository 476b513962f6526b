package trxjoin

import (
	"strings"
	"testing"
	"time"
)

// The table tests build reads as MariaDB 10.11 shows them (event names,
// nesting, empty text of binary-protocol events: see TestPreparedExact's
// dump), on a clock where read i runs from 100i ms to 100i+10 ms and its
// statement starts at server timer 1000 s + 100i ms.

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// ps is the server timer at collector time ms(n).
func ps(n int) uint64 { return uint64(1000*time.Second+time.Duration(n)*time.Millisecond) * 1000 }

const pid = 42

func rd(i int, th *Thread) Read {
	r := Read{Start: ms(100 * i), End: ms(100*i + 10), ServerNow: ps(100 * i), Threads: map[int64]*Thread{}}
	if th != nil {
		r.Threads[th.ProcesslistID] = th
	}
	return r
}

func th(tid int64, trx *Trx, stmts ...Stmt) *Thread {
	return &Thread{ProcesslistID: pid, ThreadID: tid, Trx: trx, Stmts: stmts}
}

func stmt(id int64, text string, endMs int) Stmt {
	return Stmt{EventID: id, EventName: "statement/sql/select", Text: text, Done: true, TimerEnd: ps(endMs)}
}

func begin(id int64) Stmt {
	return Stmt{EventID: id, EventName: "statement/sql/begin", Text: "BEGIN", Done: true}
}

func commit(id, trx int64) Stmt {
	return Stmt{EventID: id, EventName: "statement/sql/commit", Text: "COMMIT", NestingTrx: trx, NestingID: trx, Done: true}
}

func in(trx int64, st Stmt) Stmt { st.NestingTrx, st.NestingID = trx, trx; return st }

func exec(id int64) Stmt {
	return Stmt{EventID: id, EventName: "statement/com/Execute", Done: true}
}

func active(id, parent int64) *Trx { return &Trx{EventID: id, NestingEventID: parent, State: "ACTIVE"} }

func committed(id, parent int64) *Trx {
	return &Trx{EventID: id, NestingEventID: parent, State: "COMMITTED"}
}

// between is a sample taken between read 0 (ends at 10 ms) and read 1
// (starts at 100 ms).
func between(inTrx bool) Sample {
	return Sample{Start: ms(50), End: ms(51), Backend: pid, InTrx: inTrx}
}

// withTimes sets a statement's server timer span, in collector ms.
func withTimes(st Stmt, startMs, endMs int) Stmt {
	st.TimerStart, st.TimerEnd = ps(startMs), ps(endMs)
	return st
}

// off marks a read as made while the server recorded no transactions
// (the transaction instrument off, the consumer on).
func off(r Read) Read {
	r.Setup = Setup{Consumers: map[string]bool{"events_transactions_current": true}}
	return r
}

func withPrepared(t *Thread, ps ...Prepared) *Thread { t.Prepared = ps; return t }

// decideCase is one TestDecide case: the reads a caller kept, the sample,
// and the result Decide must give.
type decideCase struct {
	name    string
	reads   []Read
	s       Sample
	tag     string
	q       Quality
	pending bool
	// unlisted: the bracketing reads decided, the earlier one not
	// listing the backend (EarlierReadUnlisted ends the reason).
	unlisted bool
}

var decideCases = []decideCase{
	{
		name: "transaction open with one EVENT_ID in both bracketing reads",
		reads: []Read{
			rd(0, th(7, active(11, 10), stmt(1, "SELECT 1 /* conn_tag:previous */", 1), begin(10), in(11, stmt(12, "SELECT 2 /* conn_tag:next */", 5)))),
			rd(1, th(7, active(11, 10), stmt(1, "SELECT 1 /* conn_tag:previous */", 1), begin(10), in(11, stmt(12, "SELECT 2 /* conn_tag:next */", 5)))),
		},
		s: between(true), tag: "next", q: Exact,
	},
	{
		// The time join's failure: the previous borrower's statement
		// ended right before the sample; the server's order rules it out.
		name: "previous borrower's statement right before the sample never names the transaction",
		reads: []Read{
			rd(0, th(7, active(11, 10), stmt(1, "SELECT 1 /* conn_tag:previous */", 9), begin(10))),
			rd(1, th(7, active(11, 10), stmt(1, "SELECT 1 /* conn_tag:previous */", 9), begin(10), in(11, stmt(12, "SELECT 2 /* conn_tag:next */", 60)))),
		},
		s: between(true), tag: "next", q: Exact,
	},
	{
		name: "transaction's first statement not run yet: pending",
		reads: []Read{
			rd(0, th(7, active(11, 10), stmt(1, "SELECT 1 /* conn_tag:previous */", 1), begin(10))),
			rd(1, th(7, active(11, 10), stmt(1, "SELECT 1 /* conn_tag:previous */", 1), begin(10))),
		},
		s: between(true), pending: true,
	},
	{
		name: "transaction started under autocommit=0: its parent statement names it",
		reads: []Read{
			rd(0, th(7, active(11, 10), stmt(10, "SELECT 2 /* conn_tag:implicit */", 5))),
			rd(1, th(7, active(11, 10), stmt(10, "SELECT 2 /* conn_tag:implicit */", 5))),
		},
		s: between(true), tag: "implicit", q: Exact,
	},
	{
		name: "no read after the sample yet: pending",
		reads: []Read{
			rd(0, th(7, active(11, 10), begin(10), in(11, stmt(12, "SELECT 2 /* conn_tag:next */", 5)))),
		},
		s: between(true), pending: true,
	},
	{
		name: "no read before the sample: unknown",
		reads: []Read{
			rd(1, th(7, active(11, 10), begin(10), in(11, stmt(12, "SELECT 2 /* conn_tag:next */", 5)))),
		},
		s: between(true),
	},
	{
		name: "processlist id of another thread in the later read: unknown",
		reads: []Read{
			rd(0, th(7, active(11, 10), begin(10), in(11, stmt(12, "SELECT 2 /* conn_tag:next */", 5)))),
			rd(1, th(8, active(11, 10), begin(10), in(11, stmt(12, "SELECT 2 /* conn_tag:next */", 5)))),
		},
		s: between(true),
	},
	{
		name: "without transaction events, a BEGIN open in both reads",
		reads: []Read{
			rd(0, th(7, nil, stmt(1, "SELECT 1 /* conn_tag:previous */", 1), begin(10), stmt(12, "SELECT 2 /* conn_tag:next */", 5))),
			rd(1, th(7, nil, stmt(1, "SELECT 1 /* conn_tag:previous */", 1), begin(10), stmt(12, "SELECT 2 /* conn_tag:next */", 5))),
		},
		s: between(true), tag: "next", q: Exact,
	},
	{
		// Measured through ProxySQL with the transaction instrument off:
		// a hog's BEGIN open at the earlier read, then on the same
		// backend an autocommit=0 session (ProxySQL's own SET
		// autocommit=0, its statement, idle, COMMIT): named after the
		// hog, exact, before runs were candidates.
		name: "without transaction events, an autocommit=0 transaction after a BEGIN open at the earlier read: never the BEGIN's tag",
		reads: []Read{
			rd(0, th(7, nil, begin(5), stmt(6, "SELECT 1 /* conn_tag:hog */", 5))),
			rd(1, th(7, nil, begin(5), stmt(6, "SELECT 1 /* conn_tag:hog */", 5), commit(7, 0),
				Stmt{EventID: 8, EventName: "statement/sql/set_option", Text: "SET autocommit=0", Done: true, TimerStart: ps(20), TimerEnd: ps(20)},
				stmt(9, "SELECT 2 /* conn_tag:implicit */", 21), withTimes(commit(10, 0), 90, 90))),
		},
		s: between(true), tag: "implicit", q: Inferred,
	},
	{
		name: "without transaction events, an autocommit=0 transaction open in both reads after a BEGIN one",
		reads: []Read{
			rd(0, th(7, nil, begin(5), stmt(6, "SELECT 1 /* conn_tag:hog */", 5), commit(7, 0), stmt(9, "SELECT 2 /* conn_tag:implicit */", 8))),
			rd(1, th(7, nil, begin(5), stmt(6, "SELECT 1 /* conn_tag:hog */", 5), commit(7, 0), stmt(9, "SELECT 2 /* conn_tag:implicit */", 8))),
		},
		s: between(true), tag: "implicit", q: Exact,
	},
	{
		name: "without transaction events, a run of two tags after a COMMIT: unknown, not its first tag",
		reads: []Read{
			rd(0, th(7, nil, begin(5), stmt(6, "SELECT 1 /* conn_tag:hog */", 5))),
			rd(1, th(7, nil, begin(5), stmt(6, "SELECT 1 /* conn_tag:hog */", 5), commit(7, 0),
				stmt(8, "SELECT 2 /* conn_tag:autocommit */", 20), stmt(9, "SELECT 3 /* conn_tag:implicit */", 30))),
		},
		s: between(true),
	},
	{
		// The instrument turned off mid-transaction leaves its row
		// ACTIVE in events_transactions_current for good.
		name: "a stale events_transactions_current row of a server that stopped recording is not the current transaction",
		reads: []Read{
			off(rd(0, th(7, active(11, 10), begin(10), in(11, stmt(12, "SELECT 1 /* conn_tag:old */", 1)), commit(13, 0),
				begin(20), stmt(21, "SELECT 2 /* conn_tag:next */", 5)))),
			off(rd(1, th(7, active(11, 10), begin(10), in(11, stmt(12, "SELECT 1 /* conn_tag:old */", 1)), commit(13, 0),
				begin(20), stmt(21, "SELECT 2 /* conn_tag:next */", 5)))),
		},
		s: between(true), tag: "next", q: Exact,
	},
	{
		// Read 1 lies inside Start..End but ends after HeldTo: ProxySQL
		// may have taken the last snapshot before it, and the backend
		// served the next borrower meanwhile.
		name: "a read inside the sample's span but not where the session certainly held the backend is no inside read",
		reads: []Read{
			rd(0, th(7, nil, stmt(5, "SET @v := 1 /* conn_tag:holder */", 5))),
			rd(1, th(7, nil, stmt(5, "SET @v := 1 /* conn_tag:holder */", 5), stmt(6, "SELECT 1 /* conn_tag:next */", 108))),
			rd(2, th(7, nil, stmt(5, "SET @v := 1 /* conn_tag:holder */", 5), stmt(6, "SELECT 1 /* conn_tag:next */", 108))),
		},
		s:   Sample{Start: ms(50), End: ms(160), HeldFrom: ms(60), HeldTo: ms(105), Backend: pid},
		tag: "holder", q: Inferred,
	},
	{
		name: "a backend opened after the earlier read: its only transaction is exact",
		reads: []Read{
			rd(0, nil),
			rd(1, th(7, active(11, 10), begin(10), in(11, stmt(12, "SELECT 1 /* conn_tag:hog */", 20)))),
		},
		s: between(true), tag: "hog", q: Exact, unlisted: true,
	},
	{
		name: "a backend opened after the earlier read that served another tag first: never that tag, exact",
		reads: []Read{
			rd(0, nil),
			rd(1, th(7, active(21, 20), begin(10), in(11, withTimes(stmt(12, "SELECT 1 /* conn_tag:previous */", 0), 15, 20)),
				in(11, withTimes(commit(13, 11), 30, 30)), begin(20), in(21, withTimes(stmt(22, "SELECT 2 /* conn_tag:holder */", 0), 40, 45)))),
		},
		s: between(true), tag: "holder", q: Inferred, unlisted: true,
	},
	{
		name: "a pinned backend opened after the earlier read: its statements name it",
		reads: []Read{
			rd(0, nil),
			rd(1, th(7, nil, Stmt{EventID: 1, EventName: "statement/sql/set_option", Text: "SET NAMES utf8mb4", Done: true, TimerEnd: ps(20)},
				stmt(2, "SET @v := 1 /* conn_tag:pin */", 30))),
		},
		s: between(false), tag: "pin", q: Exact, unlisted: true,
	},
	{
		// Measured through ProxySQL: an autocommit=0 transaction begun
		// and committed between two reads, the next one open at the
		// later read; its first statement is not nested in it.
		name: "an implicit transaction no read showed open is named by the statement just before it",
		reads: []Read{
			rd(0, th(7, nil, stmt(1, "SELECT SLEEP(0.1)", 0))),
			rd(1, th(7, active(7, 6), stmt(1, "SELECT SLEEP(0.1)", 0),
				withTimes(Stmt{EventID: 2, EventName: "statement/sql/set_option", Text: "SET autocommit=0", Done: true}, 20, 20),
				withTimes(stmt(3, "SELECT 1 /* conn_tag:implicit */", 0), 21, 22),
				withTimes(commit(5, 4), 80, 80),
				withTimes(stmt(6, "SELECT 2 /* conn_tag:other */", 0), 85, 86))),
		},
		s: between(true), tag: "implicit", q: Inferred,
	},
	{
		name: "pin with nothing between the reads: the last statement",
		reads: []Read{
			rd(0, th(7, committed(3, 2), stmt(1, "SELECT 1 /* conn_tag:previous */", 1), stmt(5, "SET @v := 1 /* conn_tag:pin */", 5))),
			rd(1, th(7, committed(3, 2), stmt(1, "SELECT 1 /* conn_tag:previous */", 1), stmt(5, "SET @v := 1 /* conn_tag:pin */", 5))),
		},
		s: between(false), tag: "pin", q: Exact,
	},
	{
		name: "pin with statements of one tag between the reads",
		reads: []Read{
			rd(0, th(7, nil, stmt(5, "SET @v := 1 /* conn_tag:pin */", 5))),
			rd(1, th(7, nil, stmt(5, "SET @v := 1 /* conn_tag:pin */", 5), stmt(6, "SELECT @v /* conn_tag:pin */", 30),
				Stmt{EventID: 7, EventName: "statement/sql/set_option", Text: "SET NAMES utf8mb4", Done: true, TimerEnd: ps(70)},
				stmt(8, "SELECT @v /* conn_tag:pin */", 80))),
		},
		s: between(false), tag: "pin", q: Exact,
	},
	{
		name: "pin with tags on both sides of the sample: inferred, time picks",
		reads: []Read{
			rd(0, th(7, nil, stmt(5, "SELECT 1 /* conn_tag:old */", 5))),
			rd(1, th(7, nil, stmt(5, "SELECT 1 /* conn_tag:old */", 5), stmt(6, "SET @v := 1 /* conn_tag:holder */", 30),
				stmt(7, "SELECT @v /* conn_tag:after */", 80))),
		},
		s: between(false), tag: "holder", q: Inferred,
	},
	{
		name: "pin after a COMMIT: the transaction it ended",
		reads: []Read{
			rd(0, th(7, committed(11, 10), begin(10), in(11, stmt(12, "SET @v := 1 /* conn_tag:batch */", 3)), commit(13, 11))),
			rd(1, th(7, committed(11, 10), begin(10), in(11, stmt(12, "SET @v := 1 /* conn_tag:batch */", 3)), commit(13, 11))),
		},
		s: between(false), tag: "batch", q: Exact,
	},
	{
		name: "untagged statement: unknown, not the tag before it",
		reads: []Read{
			rd(0, th(7, nil, stmt(5, "SELECT 1", 5))),
			rd(1, th(7, nil, stmt(5, "SELECT 1", 5))),
		},
		s: between(false),
	},
	{
		name: "Execute, the thread's prepared statements carry one tag",
		reads: []Read{
			rd(0, withPrepared(th(7, active(11, 10), begin(10), in(11, exec(12))),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */", Executes: 1})),
			rd(1, withPrepared(th(7, active(11, 10), begin(10), in(11, exec(12))),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */", Executes: 1})),
		},
		s: between(true), tag: "checkout", q: Exact,
	},
	{
		name: "Execute, two tags prepared, one COUNT_EXECUTE moved",
		reads: []Read{
			rd(0, withPrepared(th(7, nil, stmt(1, "SELECT 1 /* conn_tag:x */", 1)),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */", Executes: 1},
				Prepared{StatementID: 2, OwnerEventID: 3, Text: "SELECT ? /* conn_tag:refund */", Executes: 4})),
			rd(1, withPrepared(th(7, nil, stmt(1, "SELECT 1 /* conn_tag:x */", 1)),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */", Executes: 1},
				Prepared{StatementID: 2, OwnerEventID: 3, Text: "SELECT ? /* conn_tag:refund */", Executes: 4})),
			rd(2, withPrepared(th(7, nil, stmt(1, "SELECT 1 /* conn_tag:x */", 1), exec(12)),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */", Executes: 1},
				Prepared{StatementID: 2, OwnerEventID: 3, Text: "SELECT ? /* conn_tag:refund */", Executes: 5})),
			rd(3, withPrepared(th(7, nil, stmt(1, "SELECT 1 /* conn_tag:x */", 1), exec(12)),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */", Executes: 1},
				Prepared{StatementID: 2, OwnerEventID: 3, Text: "SELECT ? /* conn_tag:refund */", Executes: 5})),
		},
		s: Sample{Start: ms(250), End: ms(251), Backend: pid}, tag: "refund", q: Exact,
	},
	{
		name: "Execute, two tags moved between the same reads: inferred",
		reads: []Read{
			rd(0, withPrepared(th(7, nil, stmt(1, "SELECT 1 /* conn_tag:x */", 1)),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */", Executes: 1},
				Prepared{StatementID: 2, OwnerEventID: 3, Text: "SELECT ? /* conn_tag:refund */", Executes: 4})),
			rd(1, withPrepared(th(7, nil, stmt(1, "SELECT 1 /* conn_tag:x */", 1)),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */", Executes: 1},
				Prepared{StatementID: 2, OwnerEventID: 3, Text: "SELECT ? /* conn_tag:refund */", Executes: 4})),
			rd(2, withPrepared(th(7, nil, stmt(1, "SELECT 1 /* conn_tag:x */", 1), exec(12), exec(13)),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */", Executes: 2},
				Prepared{StatementID: 2, OwnerEventID: 3, Text: "SELECT ? /* conn_tag:refund */", Executes: 5})),
			rd(3, withPrepared(th(7, nil, stmt(1, "SELECT 1 /* conn_tag:x */", 1), exec(12), exec(13)),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */", Executes: 2},
				Prepared{StatementID: 2, OwnerEventID: 3, Text: "SELECT ? /* conn_tag:refund */", Executes: 5})),
		},
		s: Sample{Start: ms(250), End: ms(251), Backend: pid}, tag: "refund", q: Inferred,
	},
	{
		name: "Prepare event named by OWNER_EVENT_ID",
		reads: []Read{
			rd(0, withPrepared(th(7, nil, Stmt{EventID: 2, EventName: "statement/com/Prepare", Done: true}),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */"},
				Prepared{StatementID: 2, OwnerEventID: 1, Text: "SELECT ? /* conn_tag:refund */"})),
			rd(1, withPrepared(th(7, nil, Stmt{EventID: 2, EventName: "statement/com/Prepare", Done: true}),
				Prepared{StatementID: 1, OwnerEventID: 2, Text: "SELECT ? /* conn_tag:checkout */"},
				Prepared{StatementID: 2, OwnerEventID: 1, Text: "SELECT ? /* conn_tag:refund */"})),
		},
		s: between(false), tag: "checkout", q: Exact,
	},
}

func TestDecide(t *testing.T) {
	for _, tt := range decideCases {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.reads, tt.s)
			if got.Tag != tt.tag || got.Quality != tt.q || got.Pending != tt.pending {
				t.Errorf("got %q %v pending=%v (%s), want %q %v pending=%v", got.Tag, got.Quality, got.Pending, got.Reason, tt.tag, tt.q, tt.pending)
			}
			if got.Reason == "" {
				t.Error("no reason given")
			}
			if unlisted := strings.HasSuffix(got.Reason, EarlierReadUnlisted); unlisted != tt.unlisted {
				t.Errorf("reason %q: ends in %q %v, want %v", got.Reason, EarlierReadUnlisted, unlisted, tt.unlisted)
			}
		})
	}
}

func TestDegradations(t *testing.T) {
	full := Setup{TrxInstrument: true, Consumers: map[string]bool{
		"events_transactions_current": true, "events_statements_current": true,
		"events_statements_history": true, "events_statements_history_long": true,
	}}
	if d := full.Degradations(); len(d) != 0 {
		t.Fatalf("full setup: %+v", d)
	}
	mariadb := full
	mariadb.TrxInstrument = false
	mariadb.Consumers = map[string]bool{"events_statements_current": true, "events_statements_history": true, "events_statements_history_long": true}
	d := mariadb.Degradations()
	if len(d) != 2 {
		t.Fatalf("MariaDB's default: %+v", d)
	}
	if d[0].Config != "performance-schema-instrument='transaction=ON'" ||
		d[1].Fix != "UPDATE performance_schema.setup_consumers SET ENABLED='YES' WHERE NAME='events_transactions_current'" ||
		d[1].Config != "performance-schema-consumer-events-transactions-current=ON" {
		t.Errorf("fixes: %+v", d)
	}
}
