package locks_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdtime/holdtime/locks"
)

// unitTables creates the two layouts of the issue: a unit pool keyed by an
// auto-increment id with a secondary index on the filter columns, and the
// same pool keyed by (shop, item, id).
func unitTables(e *env) {
	e.exec(`CREATE TABLE units_autoinc (id BIGINT AUTO_INCREMENT PRIMARY KEY, shop_id INT NOT NULL,
		item_id INT NOT NULL, KEY k (shop_id, item_id)) ENGINE=InnoDB`)
	e.exec(`CREATE TABLE units_composite (shop_id INT NOT NULL, item_id INT NOT NULL, id BIGINT NOT NULL AUTO_INCREMENT,
		PRIMARY KEY (shop_id, item_id, id), KEY (id)) ENGINE=InnoDB`)
	for _, table := range []string{"units_autoinc", "units_composite"} {
		for item := 1; item <= 3; item += 2 { // items 1 and 3: item 2 is an empty range between them
			for range 20 {
				e.exec("INSERT INTO "+table+" (shop_id, item_id) VALUES (1, ?)", item)
			}
		}
	}
	e.exec("ANALYZE TABLE units_autoinc, units_composite")
}

// TestLocksPerRow reproduces the two-locks case: SKIP LOCKED through the
// secondary index of an auto-increment table locks each row twice (index k
// and PRIMARY), the same read on the composite key once. The client's row
// count is the independent truth for the rows; the server's own
// trx_rows_locked for the locks.
func TestLocksPerRow(t *testing.T) {
	e := setup(t)
	unitTables(e)
	const q = "SELECT id FROM %s WHERE shop_id = 1 AND item_id = 1 ORDER BY id LIMIT 3 FOR UPDATE SKIP LOCKED"
	two := e.begin("two_locks", sql.LevelReadCommitted)
	if n := two.rows(fmt.Sprintf(q, "units_autoinc")); n != 3 {
		t.Fatalf("read %d units, want 3", n)
	}
	one := e.begin("one_lock", sql.LevelReadCommitted)
	if n := one.rows(fmt.Sprintf(q, "units_composite")); n != 3 {
		t.Fatalf("read %d units, want 3", n)
	}
	s := e.readUntil("both transactions", func(s *locks.Snapshot) bool { return trxOf(s, two.id) != nil && trxOf(s, one.id) != nil })
	e.capture("mariadb-locks-per-row.txt")
	table := func(name string) string { return e.d.Name + "." + name }

	r := ratioOf(s, "two_locks", table("units_autoinc"))
	if r == nil {
		t.Fatalf("no row-lock figure for two_locks: %+v", s.RowLocksPerRow)
	}
	if r.Rows != 3 || r.PerRow != 2.0 || r.ByIndex["k"] != 3 || r.ByIndex["PRIMARY"] != 3 {
		t.Errorf("two_locks on units_autoinc: %+v, want 3 rows, 2.0 per row (k 3, PRIMARY 3)", *r)
	}
	if tr := trxOf(s, two.id); tr == nil || tr.Tag != "two_locks" || tr.RowsLocked != int64(r.Locks) {
		t.Errorf("two_locks transaction %+v: want tag two_locks and the server's trx_rows_locked = %d", tr, r.Locks)
	}
	h := hintOf(s, locks.HintLocksPerRow, "two_locks")
	if h == nil || h.Value != 2.0 || !strings.Contains(h.Text, "2.0 row locks per row read") ||
		!strings.Contains(h.Text, "secondary index + clustered index") || !strings.Contains(h.Text, "primary key that starts with the filter columns takes one") {
		t.Errorf("two_locks hint: %+v", h)
	}

	r = ratioOf(s, "one_lock", table("units_composite"))
	if r == nil || r.Rows != 3 || r.PerRow != 1.0 || len(r.ByIndex) != 1 {
		t.Errorf("one_lock on units_composite: %+v, want 3 rows, 1.0 per row, PRIMARY only", r)
	}
	if tr := trxOf(s, one.id); tr == nil || tr.RowsLocked != 3 {
		t.Errorf("one_lock transaction %+v: want the server's trx_rows_locked 3", tr)
	}
	if h := hintOf(s, locks.HintLocksPerRow, "one_lock"); h != nil {
		t.Errorf("hint for one lock per row: %+v", h)
	}
	// The collector's bounded view: per tag and kind.
	byKind := map[string]int{}
	for _, c := range s.LocksByTagKind() {
		byKind[c.Tag+"/"+string(c.Kind)] += c.Locks
	}
	if byKind["two_locks/record"] != 6 || byKind["one_lock/record"] != 3 || byKind["two_locks/table_intention"] != 1 {
		t.Errorf("locks by tag and kind: %v", byKind)
	}
}

// TestGapLocksUnderRepeatableRead: SKIP LOCKED on an empty range under
// REPEATABLE READ takes a gap lock (an empty range between two items) or a
// supremum lock (past the last item), and an insert into that range waits
// for it; under READ COMMITTED the same reads take none and the insert
// goes through. The insert is the independent truth.
func TestGapLocksUnderRepeatableRead(t *testing.T) {
	e := setup(t)
	unitTables(e)
	const q = "SELECT id FROM units_composite WHERE shop_id = 1 AND item_id = ? ORDER BY id LIMIT 3 FOR UPDATE SKIP LOCKED"
	for _, tc := range []struct {
		level     sql.IsolationLevel
		tag       string
		wantLocks bool
	}{
		{sql.LevelRepeatableRead, "refill_rr", true},
		{sql.LevelReadCommitted, "refill_rc", false},
	} {
		t.Run(tc.tag, func(t *testing.T) {
			x := e.begin(tc.tag, tc.level)
			defer x.end()
			for _, item := range []int{2, 9} { // between items 1 and 3; past the last one
				if n := x.rows(q, item); n != 0 {
					t.Fatalf("item %d: %d units, want an empty range", item, n)
				}
			}
			if tc.wantLocks {
				e.capture("mariadb-gap-locks-rr.txt")
			}
			s := e.readUntil("the transaction", func(s *locks.Snapshot) bool { return trxOf(s, x.id) != nil })
			tr := trxOf(s, x.id)
			if tr == nil || tr.Tag != tc.tag || !tr.LocksKnown {
				t.Fatalf("transaction %+v: want tag %s with its locks known", tr, tc.tag)
			}
			gap, sup := rowsOf(tr, locks.KindGap), rowsOf(tr, locks.KindSupremum)
			h := hintOf(s, locks.HintGapLocks, tc.tag)
			// A refill of item 2 from another session, waiting at most 1 s.
			conn, err := e.admin.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.ExecContext(context.Background(), "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
				t.Fatal(err)
			}
			_, insertErr := conn.ExecContext(context.Background(), "INSERT INTO units_composite (shop_id, item_id) VALUES (1, 2)")
			if tc.wantLocks {
				if gap < 1 || sup < 1 {
					t.Errorf("REPEATABLE READ: gap %d, supremum %d locks; want both (locks %+v)", gap, sup, tr.Locks)
				}
				if h == nil || !strings.Contains(h.Text, "under REPEATABLE READ on a queue-like read (SKIP LOCKED)") ||
					!strings.Contains(h.Text, "READ COMMITTED takes none") || h.Value != float64(gap+sup+rowsOf(tr, locks.KindNextKey)) {
					t.Errorf("REPEATABLE READ hint: %+v", h)
				}
				if mysqlErr(insertErr) != 1205 {
					t.Errorf("insert into the locked gap: %v, want lock wait timeout 1205", insertErr)
				}
			} else {
				if n := rowsOf(tr, locks.KindGap, locks.KindSupremum, locks.KindNextKey); n != 0 {
					t.Errorf("READ COMMITTED: %d gap-type locks (%+v), want none", n, tr.Locks)
				}
				if h != nil {
					t.Errorf("READ COMMITTED hint: %+v", h)
				}
				if insertErr != nil {
					t.Errorf("insert under READ COMMITTED: %v", insertErr)
				}
			}
		})
	}
}

// TestDeadlockNamesBothTags: two tags update two rows in opposite orders.
// The one that gets error 1213 is the victim (the client's truth); the
// report names both tags and the victim, normalises the statements, and the
// tracker reports the deadlock once.
func TestDeadlockNamesBothTags(t *testing.T) {
	e := setup(t)
	e.exec("CREATE TABLE accounts (id INT PRIMARY KEY, owner VARCHAR(32), balance INT) ENGINE=InnoDB")
	e.exec("INSERT INTO accounts VALUES (1, 'alice', 100), (2, 'bob', 100)")
	tracker := locks.NewDeadlocks(5)
	before := e.read()
	if fresh, _ := tracker.Observe(before); len(fresh) != 0 {
		t.Fatalf("first observation reported %d deadlocks", len(fresh))
	}
	a := e.begin("checkout_payment", sql.LevelReadCommitted)
	b := e.begin("inventory_adjust", sql.LevelReadCommitted)
	const upd = "UPDATE accounts SET balance = balance - 7 WHERE id = ? AND owner <> 'secret-literal'"
	if err := a.exec(upd, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.exec(upd, 2); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() { errs <- a.exec(upd, 2) }() // waits for b
	var waiting *locks.Snapshot
	waitFor(t, "checkout_payment to wait for inventory_adjust", func() bool {
		s := e.read()
		for _, w := range s.Waits {
			if w.Waiting.ThreadID == a.id {
				waiting = s
				return true
			}
		}
		return false
	})
	var w locks.Wait
	for _, x := range waiting.Waits {
		if x.Waiting.ThreadID == a.id {
			w = x
		}
	}
	if w.Waiting.Tag != "checkout_payment" || w.Blocking.Tag != "inventory_adjust" || w.Blocking.ThreadID != b.id ||
		w.Lock == nil || w.Lock.Kind != locks.KindRecord || w.Lock.Index != "PRIMARY" {
		t.Errorf("wait: %+v lock %+v; want checkout_payment waiting for inventory_adjust on a PRIMARY record", w, w.Lock)
	}
	errB := b.exec(upd, 1) // closes the cycle
	errA := <-errs
	victim, other := "", ""
	switch {
	case mysqlErr(errA) == 1213 && errB == nil:
		victim, other = "checkout_payment", "inventory_adjust"
	case mysqlErr(errB) == 1213 && errA == nil:
		victim, other = "inventory_adjust", "checkout_payment"
	default:
		t.Fatalf("no deadlock: checkout_payment %v, inventory_adjust %v", errA, errB)
	}
	e.capture("mariadb-deadlock.txt")
	s := e.read()
	d := s.LatestDeadlock
	if d == nil || len(d.Transactions) != 2 {
		t.Fatalf("latest deadlock: %+v", d)
	}
	// The status text prints the server's local time without a zone: the
	// zone read from the server puts it within a minute of the client's
	// clock (the independent truth).
	if d.Time == nil || d.Zone == "" || d.Time.Sub(time.Now()).Abs() > time.Minute {
		t.Errorf("deadlock at %q zone %q time %v: want it in the server's zone, within a minute of now", d.At, d.Zone, d.Time)
	}
	if d.VictimTag() != victim || len(d.OtherTags()) != 1 || d.OtherTags()[0] != other {
		t.Errorf("deadlock victim %s others %v, want victim %s other %s", d.VictimTag(), d.OtherTags(), victim, other)
	}
	for _, x := range d.Transactions {
		if strings.Contains(x.Statement, "secret-literal") || strings.Contains(x.Statement, "7") ||
			x.Statement != "UPDATE accounts SET balance = balance - ? WHERE id = ? AND owner <> ?" {
			t.Errorf("statement %q: want it normalised without literals", x.Statement)
		}
		if x.WaitedFor == nil || x.WaitedFor.Table != e.d.Name+".accounts" || x.WaitedFor.Kind != locks.KindRecord ||
			x.WaitedFor.Mode != "X" || len(x.Held) == 0 || x.Held[0].Kind != locks.KindRecord {
			t.Errorf("transaction %s: held %+v waited for %+v", x.Tag, x.Held, x.WaitedFor)
		}
	}
	fresh, unnamed := tracker.Observe(s)
	if len(fresh) != 1 || fresh[0].VictimTag() != victim || unnamed != 0 {
		t.Errorf("tracker: %d new, %d unnamed; want the one deadlock", len(fresh), unnamed)
	}
	if s.DeadlockCountKnown && s.DeadlockCount != before.DeadlockCount+1 {
		t.Errorf("server deadlock counter %d -> %d, want +1", before.DeadlockCount, s.DeadlockCount)
	}
	if fresh, _ := tracker.Observe(e.read()); len(fresh) != 0 {
		t.Errorf("the same deadlock reported again")
	}
	// Recent lists what was there at the first observation too.
	want := 1
	if before.LatestDeadlock != nil {
		want = 2
	}
	if r := tracker.Recent(); len(r) != want || r[len(r)-1].Key() != d.Key() {
		t.Errorf("recent: %d deadlocks, want %d ending with this one", len(r), want)
	}
}

// TestDeadlocksUnnamed: deadlocks that overwrite each other between two
// reads are counted by the server's counter, and Observe reports them as
// unnamed.
func TestDeadlocksUnnamed(t *testing.T) {
	e := setup(t)
	e.exec("CREATE TABLE pairs (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
	e.exec("INSERT INTO pairs VALUES (1, 0), (2, 0)")
	tracker := locks.NewDeadlocks(5)
	first := e.read()
	if !first.DeadlockCountKnown {
		t.Skip("the server's deadlock counter is not readable")
	}
	tracker.Observe(first)
	const n = 3
	for i := range n {
		a := e.begin(fmt.Sprint("a", i), sql.LevelReadCommitted)
		b := e.begin(fmt.Sprint("b", i), sql.LevelReadCommitted)
		if err := a.exec("UPDATE pairs SET v = v + 1 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if err := b.exec("UPDATE pairs SET v = v + 1 WHERE id = 2"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var errA error
		wg.Go(func() { errA = a.exec("UPDATE pairs SET v = v + 1 WHERE id = 2") })
		waitFor(t, "a to wait", func() bool {
			var st string
			err := e.admin.QueryRow("SELECT trx_state FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?", a.id).Scan(&st)
			return err == nil && st == "LOCK WAIT"
		})
		errB := b.exec("UPDATE pairs SET v = v + 1 WHERE id = 1")
		wg.Wait()
		if mysqlErr(errA) != 1213 && mysqlErr(errB) != 1213 {
			t.Fatalf("round %d: no deadlock (%v, %v)", i, errA, errB)
		}
		a.end()
		b.end()
	}
	fresh, unnamed := tracker.Observe(e.read())
	if len(fresh) != 1 || unnamed != n-1 {
		t.Errorf("after %d deadlocks: %d named, %d unnamed; want 1 and %d", n, len(fresh), unnamed, n-1)
	}
}

// TestPartialLockList: the server lists at most 10 lock structures per
// transaction. A transaction locking rows of 12 tables (24 structures)
// is reported partial, with the server's exact row lock total.
func TestPartialLockList(t *testing.T) {
	e := setup(t)
	if e.d.Target.Flavor != "mariadb" {
		t.Skip("MySQL 8 lists every lock in performance_schema.data_locks")
	}
	x := e.begin("wide_tx", sql.LevelRepeatableRead)
	for i := range 12 {
		e.exec(fmt.Sprintf("CREATE TABLE m%d (id INT PRIMARY KEY) ENGINE=InnoDB", i))
		e.exec(fmt.Sprintf("INSERT INTO m%d VALUES (1), (2)", i))
	}
	for i := range 12 {
		if n := x.rows(fmt.Sprintf("SELECT id FROM m%d FOR UPDATE", i)); n != 2 {
			t.Fatalf("m%d: %d rows", i, n)
		}
	}
	s := e.readUntil("the transaction", func(s *locks.Snapshot) bool { return trxOf(s, x.id) != nil })
	e.capture("mariadb-partial.txt")
	tr := trxOf(s, x.id)
	listed := 0
	for _, l := range tr.Locks {
		if l.Kind != locks.KindTableIntention {
			listed += l.Rows
		}
	}
	// 12 tables x (2 rows + supremum) = 36 row locks, of which the first
	// 5 tables' 15 are listed (10 structures: 5 table + 5 record locks).
	if !tr.LocksPartial || tr.RowsLocked != 36 || tr.LockStructs != 24 || listed != 15 {
		t.Errorf("wide transaction: partial %v, rows locked %d (want 36), structs %d (want 24), listed %d (want 15)",
			tr.LocksPartial, tr.RowsLocked, tr.LockStructs, listed)
	}
	if !containsNote(s, "their locks by kind are partial") {
		t.Errorf("notes %q: want the partial list said", s.Notes)
	}
}

// TestTruncatedStatus fills SHOW ENGINE INNODB STATUS past 1 MiB with
// shared locks of 8 transactions on wide rows; the server cuts it and
// counts the cut in Innodb_truncated_status_writes (the independent
// truth), and the snapshot says so.
func TestTruncatedStatus(t *testing.T) {
	e := setup(t)
	if e.d.Target.Flavor != "mariadb" {
		t.Skip("MySQL 8 reads locks from performance_schema, not the status text")
	}
	e.exec("CREATE TABLE wide (id INT PRIMARY KEY, pad CHAR(200) NOT NULL) ENGINE=InnoDB")
	e.exec("INSERT INTO wide SELECT seq, REPEAT('x', 200) FROM seq_1_to_3000")
	var before int64
	truncatedWrites := func() int64 {
		var name string
		var n int64
		if err := e.admin.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_truncated_status_writes'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before = truncatedWrites()
	var ids []int64
	for i := range 8 {
		x := e.begin(fmt.Sprint("reader_", i), sql.LevelRepeatableRead)
		if n := x.rows("SELECT id FROM wide LOCK IN SHARE MODE"); n != 3000 {
			t.Fatalf("read %d rows", n)
		}
		ids = append(ids, x.id)
	}
	s := e.readUntil("the readers", func(s *locks.Snapshot) bool {
		for _, id := range ids {
			if trxOf(s, id) == nil {
				return false
			}
		}
		return true
	})
	after := truncatedWrites()
	if after <= before || !s.StatusTruncated || s.StatusBytes < locks.MaxStatusSize-64 {
		t.Errorf("truncated writes %d -> %d, snapshot truncated %v at %d bytes", before, after, s.StatusTruncated, s.StatusBytes)
	}
	if !containsNote(s, "the server cut SHOW ENGINE INNODB STATUS") {
		t.Errorf("notes %q: want the cut said", s.Notes)
	}
	// The server dropped the start of the list (the newest transactions):
	// their locks are unknown, and said to be.
	missing := 0
	for _, id := range ids {
		if tr := trxOf(s, id); !tr.LocksKnown {
			missing++
			if !tr.LocksPartial {
				t.Errorf("reader %d missing from the cut text, not flagged partial", id)
			}
		}
	}
	if missing == 0 {
		t.Errorf("every reader is in a text cut at 1 MiB")
	}
	t.Logf("status text %d bytes, truncated writes %d -> %d, %d of %d readers cut from it", s.StatusBytes, before, after, missing, len(ids))
	e.captureGzip("mariadb-truncated.txt.gz")
}

// TestLockOutputOff: with innodb_status_output_locks OFF the snapshot says
// locks are not counted, gives the statement that turns it on, and still
// names the lock a transaction waits for (the server prints that
// regardless).
func TestLockOutputOff(t *testing.T) {
	e := setup(t)
	if e.d.Target.Flavor != "mariadb" {
		t.Skip("MySQL 8 needs no lock output")
	}
	e.lockOutput(false)
	e.exec("CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB")
	e.exec("INSERT INTO t VALUES (1)")
	holder := e.begin("holder", sql.LevelReadCommitted)
	if err := holder.exec("UPDATE t SET id = id WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	waiter := e.begin("waiter", sql.LevelReadCommitted)
	done := make(chan error, 1)
	go func() { done <- waiter.exec("UPDATE t SET id = id WHERE id = 1") }()
	s := e.readUntil("the waiter", func(s *locks.Snapshot) bool {
		tr := trxOf(s, waiter.id)
		return tr != nil && tr.WaitingFor != nil
	})
	e.capture("mariadb-lock-output-off.txt")
	holder.end()
	<-done
	if s.LockOutput.Enabled || s.LockOutput.Enable != "SET GLOBAL innodb_status_output_locks = ON" {
		t.Errorf("lock output: %+v", s.LockOutput)
	}
	if !containsNote(s, "innodb_status_output_locks is OFF") || !containsNote(s, "cost:") {
		t.Errorf("notes %q: want the setting, its statement and its cost", s.Notes)
	}
	h := trxOf(s, holder.id)
	if h == nil || h.LocksKnown || len(h.Locks) != 0 || h.RowsLocked != 1 {
		t.Errorf("holder %+v: want its row lock total without locks by kind", h)
	}
	w := trxOf(s, waiter.id)
	if w.WaitingFor.Kind != locks.KindRecord || w.WaitingFor.Index != "PRIMARY" || len(s.Waits) != 1 ||
		s.Waits[0].Blocking.Tag != "holder" || s.Waits[0].Waiting.Tag != "waiter" {
		t.Errorf("waiter %+v, waits %+v", w.WaitingFor, s.Waits)
	}
}

func containsNote(s *locks.Snapshot, text string) bool {
	for _, n := range s.Notes {
		if strings.Contains(n, text) {
			return true
		}
	}
	return false
}
