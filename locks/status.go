package locks

import (
	"strconv"
	"strings"
)

// MaxStatusSize is where the server cuts SHOW ENGINE INNODB STATUS: 1 MiB
// (MAX_STATUS_SIZE in MySQL's and MariaDB's ha_innodb.cc). Past it, the
// server drops the start of the transaction list (writing "... truncated...")
// or, when even that is not enough, the end of the text, and counts the cut
// in the status variable Innodb_truncated_status_writes.
const MaxStatusSize = 1 << 20

// maxQueryLen bounds the statement text kept per transaction.
const maxQueryLen = 4096

// Status is what ParseStatus read from SHOW ENGINE INNODB STATUS.
type Status struct {
	// Transactions lists the transactions of LIST OF TRANSACTIONS FOR EACH
	// SESSION that have started (MySQL also lists "not started" ones: they
	// hold no locks and are left out).
	Transactions []StatusTransaction
	// Deadlock is LATEST DETECTED DEADLOCK, nil when the server has seen
	// none since it started.
	Deadlock *Deadlock
	// Truncated reports that the server cut the text (it is past
	// MaxStatusSize): some transactions, or the end of the text, are
	// missing.
	Truncated bool
	// Complete reports that the text reached END OF INNODB MONITOR OUTPUT.
	Complete bool
	// QueriesInside and QueriesInQueue are ROW OPERATIONS' "N queries
	// inside InnoDB, M queries in queue" (MySQL; MariaDB 10.6+ has no
	// innodb_thread_concurrency and prints no such line: HaveQueue false).
	QueriesInside, QueriesInQueue int64
	HaveQueue                     bool
	// Unparsed counts lines inside the transaction and deadlock sections
	// that looked like a lock or a transaction header but did not parse.
	Unparsed int
}

// StatusTransaction is one transaction of the status text.
type StatusTransaction struct {
	TrxID    string // InnoDB transaction id as printed
	ThreadID int64  // "MariaDB thread id" / "MySQL thread id"; 0 when not shown
	Active   int64  // seconds, from "ACTIVE N sec"
	State    string // what it does: "starting index read", "fetching rows", ... ("" idle)
	LockWait bool   // "LOCK WAIT": waiting for a lock now
	// LockStructs and RowLocks are the transaction's own totals from its
	// header line: exact even when its locks are not listed.
	LockStructs, RowLocks, UndoEntries int64
	// Query is the statement the session runs now, as printed (cut by the
	// server past a length; it carries literals: see Normalize).
	Query string
	// Locks are the locks listed for it, aggregated. The server lists them
	// only with innodb_status_output_locks=ON, and at most 10 lock
	// structures (a table lock, or the record locks of one index page in
	// one mode) per transaction: LocksPartial says the list stopped there.
	Locks        []Lock
	LocksListed  bool
	LocksPartial bool
	// Waiting is the lock it waits for ("TRX HAS BEEN WAITING ... FOR THIS
	// LOCK TO BE GRANTED"), printed whether lock output is on or not;
	// WaitMicros how long it has waited (MariaDB prints microseconds,
	// MySQL seconds), -1 when not printed.
	Waiting    *Lock
	WaitMicros int64
	// Granted are the granted locks listed (lock output on), one per
	// locked record or table: how a wait's blocker is found when trx ids
	// do not tell (MariaDB gives every transaction that holds only shared
	// locks trx id 0).
	Granted []LockRef
}

// LockRef is one lock where the server keys it: a record by tablespace,
// page and heap number, a table by name; with the trx id its lock line
// printed.
type LockRef struct {
	TrxID       string
	Table       string
	Space, Page int64
	Heap        int64 // -1: a table lock
	Mode        string
}

// lockLine is one parsed TABLE LOCK / RECORD LOCKS line.
type lockLine struct {
	table, index, mode, trxID          string
	space, page                        int64
	record                             bool
	gap, recNotGap, insertIntention, w bool
}

// kindOf is the kind of a table lock, or of a non-supremum record of a
// record lock.
func (l *lockLine) kindOf(supremum bool) Kind {
	if !l.record {
		return tableKind(l.mode)
	}
	return recordKind(l.gap, l.recNotGap, l.insertIntention, supremum)
}

func (l *lockLine) lock(supremum bool, rows int) Lock {
	return Lock{Table: l.table, Index: l.index, Kind: l.kindOf(supremum), Mode: l.mode, Waiting: l.w, Rows: rows}
}

// parseLockLine parses
//
//	TABLE LOCK table `db`.`t` trx id 36 lock mode IX
//	RECORD LOCKS space id 5 page no 3 n bits 320 index PRIMARY of table `db`.`t` trx id 36 lock_mode X locks rec but not gap waiting
func parseLockLine(s string) (lockLine, bool) {
	var l lockLine
	var rest string
	switch {
	case strings.HasPrefix(s, "TABLE LOCK table "):
		rest = s[len("TABLE LOCK table "):]
	case strings.HasPrefix(s, "RECORD LOCKS "):
		l.record = true
		i := strings.Index(s, " index ")
		if i < 0 {
			return l, false
		}
		after := s[i+len(" index "):]
		j := strings.Index(after, " of table ")
		if j < 0 {
			return l, false
		}
		l.index = strings.Trim(after[:j], "`")
		l.space, l.page = fieldInt(s, " space id "), fieldInt(s, " page no ")
		rest = after[j+len(" of table "):]
	default:
		return l, false
	}
	k := strings.Index(rest, " trx id ")
	if k < 0 {
		return l, false
	}
	l.table = tableName(rest[:k])
	rest = rest[k+len(" trx id "):]
	m := strings.Index(rest, " lock_mode ")
	n := len(" lock_mode ")
	if m < 0 {
		m = strings.Index(rest, " lock mode ")
		n = len(" lock mode ")
	}
	if m < 0 || l.table == "" {
		return l, false
	}
	l.trxID = strings.TrimSpace(rest[:m])
	flags := rest[m+n:]
	mode, after, _ := strings.Cut(flags, " ")
	if mode == "" {
		return l, false
	}
	l.mode = mode
	l.gap = strings.Contains(after, "locks gap before rec")
	l.recNotGap = strings.Contains(after, "locks rec but not gap")
	l.insertIntention = strings.Contains(after, "insert intention")
	l.w = strings.HasSuffix(strings.TrimSpace(after), "waiting")
	return l, true
}

// fieldInt reads the number after name in s, -1 when there is none.
func fieldInt(s, name string) int64 {
	_, rest, ok := strings.Cut(s, name)
	if !ok {
		return -1
	}
	end := 0
	for end < len(rest) && isDigit(rest[end]) {
		end++
	}
	n, err := strconv.ParseInt(rest[:end], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// parseHeapNo reads N from "Record lock, heap no N ...".
func parseHeapNo(s string) (int, bool) {
	rest, ok := strings.CutPrefix(s, "Record lock, heap no ")
	if !ok {
		return 0, false
	}
	end := 0
	for end < len(rest) && isDigit(rest[end]) {
		end++
	}
	n, err := strconv.Atoi(rest[:end])
	return n, err == nil
}

// lineReader walks a text line by line without copying it.
type lineReader struct {
	s   string
	pos int
}

func (r *lineReader) next() (string, bool) {
	if r.pos >= len(r.s) {
		return "", false
	}
	rest := r.s[r.pos:]
	i := strings.IndexByte(rest, '\n')
	if i < 0 {
		r.pos = len(r.s)
		return strings.TrimRight(rest, "\r"), true
	}
	r.pos += i + 1
	return strings.TrimRight(rest[:i], "\r"), true
}

// peek returns the next line without consuming it.
func (r *lineReader) peek() (string, bool) {
	p := r.pos
	l, ok := r.next()
	r.pos = p
	return l, ok
}

// sectionTitles are the headings of the status text that end a section.
var sectionTitles = map[string]bool{
	"BACKGROUND THREAD": true, "SEMAPHORES": true, "LATEST FOREIGN KEY ERROR": true,
	"LATEST DETECTED DEADLOCK": true, "TRANSACTIONS": true, "FILE I/O": true,
	"INSERT BUFFER AND ADAPTIVE HASH INDEX": true, "LOG": true, "BUFFER POOL AND MEMORY": true,
	"INDIVIDUAL BUFFER POOL INFO": true, "ROW OPERATIONS": true, "END OF INNODB MONITOR OUTPUT": true,
}

func isRule(s string) bool {
	if len(s) < 3 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '-' && s[i] != '=' {
			return false
		}
	}
	return true
}

// ParseStatus reads the text of SHOW ENGINE INNODB STATUS (the Status
// column) as MariaDB 10.6+ and MySQL 8 write it. It never fails: what it
// cannot read it skips, and a text the server cut (Status.Truncated) yields
// what was there. Its work is linear in the text's length.
func ParseStatus(text string) *Status {
	st := &Status{}
	r := &lineReader{s: text}
	section := ""
	prevRule := false
	for {
		line, ok := r.next()
		if !ok {
			break
		}
		if line == "... truncated..." {
			st.Truncated = true
			continue
		}
		if prevRule && sectionTitles[line] {
			section = line
			if section == "END OF INNODB MONITOR OUTPUT" {
				st.Complete = true
			}
			if section == "LATEST DETECTED DEADLOCK" {
				st.Deadlock = parseDeadlock(r, st)
				section = ""
			}
			prevRule = false
			continue
		}
		prevRule = isRule(line)
		switch section {
		case "TRANSACTIONS":
			if strings.HasPrefix(line, "---TRANSACTION ") {
				if t, ok := parseTransaction(r, line, st); ok {
					st.Transactions = append(st.Transactions, t)
				}
				prevRule = false
			}
		case "ROW OPERATIONS":
			// "0 queries inside InnoDB, 0 queries in queue"
			if in, q, ok := strings.Cut(line, " queries inside InnoDB, "); ok {
				q, _, _ = strings.Cut(q, " queries in queue")
				a, err1 := strconv.ParseInt(strings.TrimSpace(in), 10, 64)
				b, err2 := strconv.ParseInt(strings.TrimSpace(q), 10, 64)
				if err1 == nil && err2 == nil {
					st.QueriesInside, st.QueriesInQueue, st.HaveQueue = a, b, true
				}
			}
		}
	}
	if len(text) >= MaxStatusSize-1 || !st.Complete {
		st.Truncated = true
	}
	return st
}

// transactionEnd reports whether a line ends a transaction's block in the
// transaction list.
func transactionEnd(line string) bool {
	return strings.HasPrefix(line, "---TRANSACTION ") || line == "... truncated..." || isRule(line) && len(line) >= 8
}

// parseTransaction reads one ---TRANSACTION block; header is its first line.
func parseTransaction(r *lineReader, header string, st *Status) (StatusTransaction, bool) {
	t := StatusTransaction{WaitMicros: -1}
	rest := strings.TrimPrefix(header, "---TRANSACTION ")
	id, state, _ := strings.Cut(rest, ", ")
	t.TrxID = strings.TrimSpace(id)
	notStarted := strings.HasPrefix(state, "not started")
	parseActive(&t, state)
	var locks lockSet
	var cur *lockLine    // the record lock struct whose rows follow
	var waiting bool     // inside the TRX HAS BEEN WAITING block
	var waitSet *lockSet // the waiting lock's rows
	inQuery := false
	var query strings.Builder
	for {
		here := r.pos
		line, ok := r.next()
		if !ok {
			break
		}
		if len(line) > 0 && line[0] == ' ' && cur != nil {
			continue // a field of a locked record (" 0: len 4; hex ..."): most lines
		}
		if waiting && line == "------------------" {
			// The end of the waiting lock's block.
			waiting, cur = false, nil
			continue
		}
		if transactionEnd(line) {
			r.pos = here // the caller reads it
			break
		}
		switch {
		case strings.HasPrefix(line, "------- TRX HAS BEEN WAITING"):
			waiting, waitSet, cur, inQuery = true, &lockSet{}, nil, false
			t.WaitMicros = parseWaited(strings.TrimPrefix(line, "------- TRX HAS BEEN WAITING "))
		case strings.HasPrefix(line, "TABLE LOCK ") || strings.HasPrefix(line, "RECORD LOCKS "):
			inQuery = false
			l, ok := parseLockLine(line)
			if !ok {
				st.Unparsed++
				cur = nil
				continue
			}
			if !l.record {
				target := &locks
				if waiting {
					target = waitSet
				} else {
					t.LocksListed = true
				}
				target.add(l.lock(false, 1))
				if !waiting {
					t.Granted = append(t.Granted, LockRef{TrxID: l.trxID, Table: l.table, Heap: -1, Space: -1, Page: -1, Mode: l.mode})
				}
				cur = nil
				continue
			}
			if !waiting {
				t.LocksListed = true
			}
			c := l
			cur = &c
		case strings.HasPrefix(line, "Record lock, heap no "):
			if cur == nil {
				continue
			}
			heap, ok := parseHeapNo(line)
			if !ok {
				st.Unparsed++
				continue
			}
			target := &locks
			if waiting {
				target = waitSet
			} else if !cur.w {
				t.Granted = append(t.Granted, LockRef{TrxID: cur.trxID, Table: cur.table, Space: cur.space, Page: cur.page,
					Heap: int64(heap), Mode: cur.mode})
			}
			target.add(cur.lock(heap == 1, 1))
		case strings.Contains(line, "LOCKS PRINTED FOR THIS TRX"):
			t.LocksPartial = true
			cur = nil
		case strings.Contains(line, "lock struct(s)"):
			parseCounts(&t, line)
		case strings.HasPrefix(line, "MariaDB thread id ") || strings.HasPrefix(line, "MySQL thread id "):
			t.ThreadID = parseThreadID(line)
			inQuery = true
		case strings.HasPrefix(line, "mysql tables in use"), strings.HasPrefix(line, "Trx read view"),
			strings.HasPrefix(line, "Trx #rec lock"), line == "":
			// Not ours to read; an empty line also ends a lock's rows.
			if line == "" && query.Len() > 0 {
				inQuery = false
			}
		default:
			if inQuery && query.Len() < maxQueryLen {
				if query.Len() > 0 {
					query.WriteByte('\n')
				}
				query.WriteString(line[:min(len(line), maxQueryLen-query.Len())])
			}
		}
	}
	if notStarted {
		return t, false
	}
	t.Query = query.String()
	sortLocks(locks.locks)
	t.Locks = locks.locks
	if waitSet != nil && len(waitSet.locks) > 0 {
		w := waitSet.locks[0]
		for _, l := range waitSet.locks[1:] {
			w.Rows += l.Rows // one lock struct: one table, index, mode
		}
		t.Waiting = &w
	}
	// The text ended inside the list: a cut, not the transaction's end.
	if r.pos >= len(r.s) {
		t.LocksPartial = t.LocksPartial || t.LocksListed
	}
	return t, true
}

// parseWaited reads "506758 us FOR THIS LOCK..." (MariaDB) or "5 SEC FOR
// THIS LOCK..." (MySQL) into microseconds, -1 when it cannot.
func parseWaited(s string) int64 {
	num, unit, _ := strings.Cut(s, " ")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return -1
	}
	switch {
	case strings.HasPrefix(unit, "us"):
		return n
	case strings.HasPrefix(unit, "SEC"):
		return n * 1e6
	}
	return -1
}

// parseActive reads "ACTIVE 3 sec starting index read" (or "ACTIVE
// (PREPARED) 3 sec", with MySQL's ", thread declared inside InnoDB N"
// after a comma).
func parseActive(t *StatusTransaction, s string) {
	s, _, _ = strings.Cut(s, ",")
	rest, ok := strings.CutPrefix(s, "ACTIVE ")
	if !ok {
		return
	}
	rest = strings.TrimPrefix(rest, "(PREPARED) ")
	num, after, _ := strings.Cut(rest, " sec")
	if n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64); err == nil {
		t.Active = n
	}
	t.State = strings.TrimSpace(after)
}

// parseCounts reads "LOCK WAIT 3 lock struct(s), heap size 1128, 2 row
// lock(s), undo log entries 1".
func parseCounts(t *StatusTransaction, line string) {
	if rest, ok := strings.CutPrefix(line, "LOCK WAIT "); ok {
		t.LockWait = true
		line = rest
	}
	for _, part := range strings.Split(line, ", ") {
		num, what, _ := strings.Cut(strings.TrimSpace(part), " ")
		n, err := strconv.ParseInt(num, 10, 64)
		switch {
		case err != nil:
		case strings.HasPrefix(what, "lock struct"):
			t.LockStructs = n
		case strings.HasPrefix(what, "row lock"):
			t.RowLocks = n
		}
		if v, ok := strings.CutPrefix(part, "undo log entries "); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				t.UndoEntries = n
			}
		}
	}
}

// parseThreadID reads N from "MariaDB thread id N, OS thread handle ...".
func parseThreadID(line string) int64 {
	_, rest, _ := strings.Cut(line, " thread id ")
	num, _, _ := strings.Cut(rest, ",")
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
