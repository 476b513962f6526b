package trxjoin

import (
	"cmp"
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// readSQL is the one query of a Read. The processlist ids, as decimal
// integers, replace /*ids*/; nothing else is substituted.
//
//go:embed read.sql
var readSQL string

// Querier is what Read needs of a connection: *sql.DB, *sql.Conn and
// *sql.Tx all have it.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Read is one read of a server's performance_schema for the backends of
// interest, with the collector's wall clock around it.
type Read struct {
	// Start and End are the collector's wall clock just before the query was
	// sent and just after its last row was read. The causal rule compares
	// these, never the server's clock.
	Start, End time.Time
	// ServerNow is the server's timer (picoseconds) when it started this
	// read's statement: the reference that maps the server's TIMER_START
	// and TIMER_END to the collector's clock, used only to break ties
	// (results marked Inferred). 0 when the server did not show it.
	ServerNow uint64
	// Setup is what the server records: see Setup.Degradations.
	Setup Setup
	// Threads holds each processlist id asked for that the server still
	// lists, by PROCESSLIST_ID.
	Threads map[int64]*Thread
}

// Setup is the part of the server's performance_schema setup the join
// depends on, as the read found it.
type Setup struct {
	// TrxInstrument: setup_instruments 'transaction' ENABLED and TIMED.
	// MariaDB ships it off, MySQL 8.0 on.
	TrxInstrument bool
	// Consumers are the ENABLED state of events_transactions_current and
	// events_statements_{current,history,history_long}.
	Consumers map[string]bool
}

// Degradation is a setup item the join misses, with its fix.
type Degradation struct {
	Item   string // the setup item, as `holdtime doctor` would name it
	Why    string // what the join loses without it
	Fix    string // the statement that fixes it at run time
	Config string // the my.cnf line that keeps it fixed
}

// Degradations lists what this server's setup costs the join, with the
// exact fix of each item; none when the setup is complete.
func (s Setup) Degradations() []Degradation {
	var out []Degradation
	if !s.TrxInstrument {
		out = append(out, Degradation{
			Item: "mysql.instruments.transaction",
			Why: "transactions are not recorded: an idle transaction is found from BEGIN/START TRANSACTION in the " +
				"statement history only, and is unknown once the history has dropped its BEGIN",
			Fix:    "UPDATE performance_schema.setup_instruments SET ENABLED='YES', TIMED='YES' WHERE NAME='transaction'",
			Config: "performance-schema-instrument='transaction=ON'",
		})
	}
	for _, c := range []struct{ name, why string }{
		{"events_transactions_current", "transactions are not recorded (as without the transaction instrument)"},
		{"events_statements_current", "no statement is recorded on MariaDB (the history consumers depend on it): every hold is unknown"},
		{"events_statements_history", "only history_long shows a backend's statements: a busy server's ring drops them sooner"},
		{"events_statements_history_long", "only the last 10 statements per thread are seen: a burst between two reads can hide the statement that names a pin"},
	} {
		if !s.Consumers[c.name] {
			out = append(out, Degradation{
				Item:   "mysql.consumer." + c.name,
				Why:    c.why,
				Fix:    "UPDATE performance_schema.setup_consumers SET ENABLED='YES' WHERE NAME='" + c.name + "'",
				Config: "performance-schema-consumer-" + strings.ReplaceAll(c.name, "_", "-") + "=ON",
			})
		}
	}
	return out
}

// Thread is one server connection as a read found it.
type Thread struct {
	ProcesslistID, ThreadID int64
	// Trx is the thread's row in events_transactions_current, nil when it
	// has none (or transactions are not recorded).
	Trx *Trx
	// Stmts are the statements the server still shows for the thread
	// (events_statements_current, _history and _history_long, one entry
	// per EVENT_ID), by EVENT_ID.
	Stmts []Stmt
	// Prepared are the thread's prepared_statements_instances rows.
	Prepared []Prepared
}

// Trx is a thread's current or last transaction.
type Trx struct {
	EventID        int64
	NestingEventID int64 // the statement that started it (BEGIN, or the first statement under autocommit=0)
	State          string
	Autocommit     bool
	TimerStart     uint64
}

// Active reports whether the transaction is still open.
func (t *Trx) Active() bool { return t != nil && t.State == "ACTIVE" }

// Stmt is one statement event of a thread.
type Stmt struct {
	EventID    int64
	EventName  string // statement/sql/select, statement/com/Execute, …
	Text       string // SQL_TEXT; empty for MariaDB's binary-protocol Prepare and Execute
	NestingTrx int64  // the EVENT_ID of the transaction it ran in, 0 if none recorded
	NestingID  int64  // NESTING_EVENT_ID whatever its type
	Done       bool   // END_EVENT_ID set: the statement has completed
	TimerStart uint64 // server timer, picoseconds
	TimerEnd   uint64 // server timer, picoseconds; 0 while running
}

// Prepared is one prepared statement a thread owns.
type Prepared struct {
	StatementID  int64
	OwnerEventID int64 // the Prepare event
	Text         string
	Executes     int64 // COUNT_EXECUTE
}

// Marker starts the read's statement: the collector's marker
// (collector.CollectorMarker), so that a collector polling the same server
// never counts another's reads as a client's statements.
const Marker = "/* holdtime:collector */ "

// ErrNoPerformanceSchema is returned when the server has no
// performance_schema tables to read (turned off, or not a MySQL server).
var ErrNoPerformanceSchema = errors.New("trxjoin: performance_schema is not readable: start the server with performance_schema=ON and GRANT SELECT ON performance_schema.* to the collector's account")

// ReadServer reads, in one statement, what the join needs about the
// server connections whose processlist ids are given: their threads,
// current transactions, statements, prepared statements, and the setup.
func ReadServer(ctx context.Context, q Querier, ids []int64) (Read, error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	// The ids are integers written in decimal, not text from anyone: inlined,
	// the read needs no placeholder, so go-sql-driver sends it in the text
	// protocol in one round trip (with placeholders and without
	// interpolateParams it would prepare, execute and close: three).
	list := "NULL" // IN () is a syntax error; IN (NULL) matches nothing
	if len(ids) > 0 {
		b := make([]byte, 0, 8*len(ids))
		for i, id := range ids {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, id, 10)
		}
		list = string(b)
	}
	query := Marker + strings.Replace(readSQL, "/*ids*/", list, 1)
	r := Read{Threads: map[int64]*Thread{}, Setup: Setup{Consumers: map[string]bool{}}}
	r.Start = time.Now()
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		if isNoPerfSchema(err) {
			return Read{}, fmt.Errorf("%w (%v)", ErrNoPerformanceSchema, err)
		}
		return Read{}, fmt.Errorf("trxjoin: read performance_schema: %w", err)
	}
	defer rows.Close()
	var (
		k, s1, s2, txt         sql.NullString
		pid, tid, a, b, c, cnt sql.NullInt64
		t1, t2                 sql.NullString // unsigned picoseconds: above int64 only after 106 days, but read them unsigned
		seen                   = map[[2]int64]int{}
	)
	for rows.Next() {
		if err := rows.Scan(&k, &pid, &tid, &a, &b, &c, &s1, &s2, &txt, &t1, &t2, &cnt); err != nil {
			return Read{}, fmt.Errorf("trxjoin: read performance_schema row: %w", err)
		}
		th := func() *Thread {
			x := r.Threads[pid.Int64]
			if x == nil {
				x = &Thread{ProcesslistID: pid.Int64, ThreadID: tid.Int64}
				r.Threads[pid.Int64] = x
			}
			return x
		}
		switch k.String {
		case "N":
			r.ServerNow = parseTimer(t1)
		case "C":
			r.Setup.Consumers[s1.String] = s2.String == "YES"
		case "I":
			r.Setup.TrxInstrument = s2.String == "YES/YES"
		case "T":
			x := th()
			if a.Valid {
				x.Trx = &Trx{EventID: a.Int64, NestingEventID: c.Int64, State: s1.String,
					Autocommit: s2.String == "YES", TimerStart: parseTimer(t1)}
			}
		case "S":
			x := th()
			st := Stmt{EventID: a.Int64, EventName: s1.String, Text: txt.String, NestingID: c.Int64,
				Done: b.Valid, TimerStart: parseTimer(t1), TimerEnd: parseTimer(t2)}
			if s2.String == "TRANSACTION" {
				st.NestingTrx = c.Int64
			}
			key := [2]int64{pid.Int64, a.Int64}
			if i, ok := seen[key]; ok {
				// current and a history table can both show it; the
				// completed copy is the newer.
				if st.Done && !x.Stmts[i].Done {
					x.Stmts[i] = st
				}
				continue
			}
			seen[key] = len(x.Stmts)
			x.Stmts = append(x.Stmts, st)
		case "P":
			x := th()
			x.Prepared = append(x.Prepared, Prepared{StatementID: b.Int64, OwnerEventID: a.Int64,
				Text: txt.String, Executes: cnt.Int64})
		}
	}
	if err := rows.Err(); err != nil {
		return Read{}, fmt.Errorf("trxjoin: read performance_schema rows: %w", err)
	}
	r.End = time.Now()
	for _, x := range r.Threads {
		slices.SortFunc(x.Stmts, func(p, q Stmt) int { return cmp.Compare(p.EventID, q.EventID) })
		slices.SortFunc(x.Prepared, func(p, q Prepared) int { return cmp.Compare(p.StatementID, q.StatementID) })
	}
	return r, nil
}

func parseTimer(s sql.NullString) uint64 {
	if !s.Valid {
		return 0
	}
	v, _ := strconv.ParseUint(s.String, 10, 64)
	return v
}

// isNoPerfSchema recognises "unknown table/database" answers (1049, 1146)
// about performance_schema.
func isNoPerfSchema(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "performance_schema") &&
		(strings.Contains(msg, "Error 1146") || strings.Contains(msg, "Error 1049"))
}
