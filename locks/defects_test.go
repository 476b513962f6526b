package locks_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/locks"
)

// shareScene is issue 23's first case: A and B hold only shared locks (so
// MariaDB gives both trx_id 0), A on row 3, B on row 4; C updates row 3
// and waits for A, and for A only.
func shareScene(t *testing.T, e *env) (a, b, c *tx, done chan error) {
	t.Helper()
	e.exec("CREATE TABLE r (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	e.exec("INSERT INTO r VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0)")
	a = e.begin("share_a", sql.LevelReadCommitted)
	a.rows("SELECT v FROM r WHERE id = 3 LOCK IN SHARE MODE")
	b = e.begin("share_b", sql.LevelReadCommitted)
	b.rows("SELECT v FROM r WHERE id = 4 LOCK IN SHARE MODE")
	c = e.begin("writer_c", sql.LevelReadCommitted)
	done = make(chan error, 1)
	go func() { done <- c.exec("UPDATE r SET v = v + 1 WHERE id = 3") }()
	t.Cleanup(func() { a.end(); <-done })
	return a, b, c, done
}

// TestBlockerHoldingSharedLocks (issue 23, defect 1): the blocker is found
// from the locks, not by joining on trx_id, which is 0 for both readers.
// The server's own truth: committing A lets C through (checked last).
func TestBlockerHoldingSharedLocks(t *testing.T) {
	e := setup(t)
	a, b, c, done := shareScene(t, e)
	s := e.readUntil("writer_c waiting", func(s *locks.Snapshot) bool {
		tr := trxOf(s, c.id)
		return tr != nil && tr.State == "LOCK WAIT" && len(s.Waits) > 0
	})
	if len(s.Waits) != 1 {
		t.Fatalf("%d waits, want 1 (writer_c for share_a): %+v", len(s.Waits), s.Waits)
	}
	w := s.Waits[0]
	if w.Waiting.ThreadID != c.id || w.Blocking.ThreadID != a.id || w.Blocking.Tag != "share_a" {
		t.Errorf("wait %+v: want writer_c (thread %d) waiting for share_a (thread %d), not share_b (thread %d)",
			w, c.id, a.id, b.id)
	}
	// A's commit is what C waited for.
	if err := a.tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("writer_c after share_a committed: %v", err)
	}
	done <- nil
}

// TestBlockerUnknownWithoutLockOutput: with lock output off the status
// text lists no granted locks; a blocker whose trx_id is shared cannot be
// named, and the wait says so rather than naming a bystander.
func TestBlockerUnknownWithoutLockOutput(t *testing.T) {
	e := setup(t)
	e.lockOutput(false)
	_, _, c, _ := shareScene(t, e)
	s := e.readUntil("writer_c waiting", func(s *locks.Snapshot) bool {
		tr := trxOf(s, c.id)
		return tr != nil && tr.State == "LOCK WAIT" && len(s.Waits) > 0
	})
	if len(s.Waits) != 1 {
		t.Fatalf("%d waits, want 1: %+v", len(s.Waits), s.Waits)
	}
	if w := s.Waits[0]; w.Blocking.Tag != locks.UnknownTag || w.Blocking.ThreadID != 0 || w.Waiting.ThreadID != c.id {
		t.Errorf("wait %+v: want the blocker unknown", w)
	}
	found := false
	for _, n := range s.Notes {
		found = found || strings.Contains(n, "innodb_status_output_locks")
	}
	if !found {
		t.Errorf("no note says how to name the blocker: %q", s.Notes)
	}
}

// TestLongDeadlockStatementUnknown (defect 4): MariaDB keeps about 3,000
// bytes of a deadlocked statement; a tag at the end of a longer one is cut
// off, and the transaction's tag is unknown, not untagged.
func TestLongDeadlockStatementUnknown(t *testing.T) {
	e := setup(t)
	e.exec("CREATE TABLE pairs (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
	e.exec("INSERT INTO pairs VALUES (1, 0), (2, 0)")
	pad := " AND v NOT IN (" + strings.Repeat("123456789, ", 400) + "987654321)" // 4,400 bytes
	a := e.begin("long_a", sql.LevelReadCommitted)
	b := e.begin("long_b", sql.LevelReadCommitted)
	if err := a.exec("UPDATE pairs SET v = v + 1 WHERE id = 1" + pad); err != nil {
		t.Fatal(err)
	}
	if err := b.exec("UPDATE pairs SET v = v + 1 WHERE id = 2" + pad); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var errA error
	wg.Go(func() { errA = a.exec("UPDATE pairs SET v = v + 1 WHERE id = 2" + pad) })
	waitFor(t, "long_a to wait", func() bool {
		var st string
		err := e.admin.QueryRow("SELECT trx_state FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?", a.id).Scan(&st)
		return err == nil && st == "LOCK WAIT"
	})
	errB := b.exec("UPDATE pairs SET v = v + 1 WHERE id = 1" + pad)
	wg.Wait()
	if mysqlErr(errA) != 1213 && mysqlErr(errB) != 1213 {
		t.Fatalf("no deadlock: %v, %v", errA, errB)
	}
	var text string
	e.admin.QueryRow("SHOW ENGINE INNODB STATUS").Scan(new(string), new(string), &text)
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "UPDATE pairs") {
			t.Logf("printed %d bytes: ...%s", len(l), l[len(l)-40:])
		}
	}
	d := e.read().LatestDeadlock
	if d == nil || len(d.Transactions) != 2 {
		t.Fatalf("latest deadlock %+v", d)
	}
	for _, x := range d.Transactions {
		if x.Tag != locks.UnknownTag {
			t.Errorf("transaction %d of a deadlock whose statements were cut: tag %q, want %q", x.N, x.Tag, locks.UnknownTag)
		}
	}
}

// TestTagFromEarlierStatement (defect 5): a transaction whose lock was
// taken by a tagged statement and which now runs an untagged one keeps the
// tag; one that ran two tags reports both.
func TestTagFromEarlierStatement(t *testing.T) {
	e := setup(t)
	e.exec("CREATE TABLE r (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	e.exec("INSERT INTO r VALUES (1, 0), (2, 0)")
	x := e.begin("reserve", sql.LevelReadCommitted)
	if err := x.exec("UPDATE r SET v = v + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	// The framework's keep-alive, untagged, while the lock is held.
	plain := context.Background()
	sleeping := make(chan error, 1)
	go func() {
		_, err := x.conn.ExecContext(plain, "SELECT SLEEP(30)")
		sleeping <- err
	}()
	t.Cleanup(func() { e.d.Target.Admin().Exec(fmt.Sprintf("KILL QUERY %d", x.id)); <-sleeping })
	y := e.begin("claim", sql.LevelReadCommitted)
	if err := y.exec("UPDATE r SET v = v + 1 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	ctxB := y.ctx
	y.ctx = conntag.WithTag(ctxB, "audit")
	if err := y.exec("SELECT v FROM r WHERE id = 2 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	s := e.readUntil("reserve running SLEEP", func(s *locks.Snapshot) bool {
		tr := trxOf(s, x.id)
		return tr != nil && !tr.Idle && trxOf(s, y.id) != nil
	})
	if tr := trxOf(s, x.id); tr.Tag != "reserve" {
		t.Errorf("transaction running an untagged SLEEP after its tagged UPDATE: tag %q, want reserve", tr.Tag)
	}
	if tr := trxOf(s, y.id); tr.Tag != "audit" || strings.Join(tr.Tags, ",") != "audit,claim" {
		t.Errorf("transaction that ran claim then audit: tag %q tags %v, want audit and [audit claim]", tr.Tag, tr.Tags)
	}
}

// TestIdleTagNeedsHistory (defect 5): with events_statements_history off,
// an idle transaction's tag is unknown and a note names the consumer.
func TestIdleTagNeedsHistory(t *testing.T) {
	e := setup(t)
	admin := e.d.Target.Admin()
	const consumer = "UPDATE performance_schema.setup_consumers SET ENABLED = '%s' WHERE NAME = 'events_statements_history'"
	if _, err := admin.Exec(strings.Replace(consumer, "%s", "NO", 1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(strings.Replace(consumer, "%s", "YES", 1)) })
	e.exec("CREATE TABLE r (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	e.exec("INSERT INTO r VALUES (1, 0)")
	x := e.begin("idle_holder", sql.LevelReadCommitted)
	if err := x.exec("UPDATE r SET v = v + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	s := e.readUntil("the idle transaction", func(s *locks.Snapshot) bool { return trxOf(s, x.id) != nil })
	if tr := trxOf(s, x.id); tr.Tag != locks.UnknownTag {
		t.Errorf("idle transaction without statement history: tag %q, want unknown", tr.Tag)
	}
	found := false
	for _, n := range s.Notes {
		found = found || strings.Contains(n, "events_statements_history")
	}
	if !found {
		t.Errorf("no note names the consumer that would make the tag known: %q", s.Notes)
	}
}

// TestDeadlockBetweenCounterAndStatus (defect 3): a deadlock that lands
// after the reader read Innodb_deadlocks and before SHOW ENGINE INNODB
// STATUS is named by that read, then counted by the next one: it must be
// counted once, named. The race is made exact: the snapshot after the
// deadlock carries the counter as read before it.
func TestDeadlockBetweenCounterAndStatus(t *testing.T) {
	e := setup(t)
	e.exec("CREATE TABLE pairs (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
	e.exec("INSERT INTO pairs VALUES (1, 0), (2, 0)")
	tracker := locks.NewDeadlocks(5)
	first := e.read()
	if !first.DeadlockCountKnown {
		t.Skip("the server's deadlock counter is not readable")
	}
	tracker.Observe(first)
	a := e.begin("race_a", sql.LevelReadCommitted)
	b := e.begin("race_b", sql.LevelReadCommitted)
	if err := a.exec("UPDATE pairs SET v = v + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if err := b.exec("UPDATE pairs SET v = v + 1 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var errA error
	wg.Go(func() { errA = a.exec("UPDATE pairs SET v = v + 1 WHERE id = 2") })
	errB := b.exec("UPDATE pairs SET v = v + 1 WHERE id = 1")
	wg.Wait()
	if mysqlErr(errA) != 1213 && mysqlErr(errB) != 1213 {
		t.Fatalf("no deadlock (%v, %v)", errA, errB)
	}
	raced := e.read()
	raced.DeadlockCount = first.DeadlockCount // read before the deadlock
	fresh1, unnamed1 := tracker.Observe(raced)
	next := e.read()
	fresh2, unnamed2 := tracker.Observe(next)
	if next.DeadlockCount != first.DeadlockCount+1 {
		t.Fatalf("server counter %d -> %d, want +1", first.DeadlockCount, next.DeadlockCount)
	}
	if n := int64(len(fresh1)+len(fresh2)) + unnamed1 + unnamed2; n != 1 || len(fresh1) != 1 {
		t.Errorf("one deadlock: named %d then %d, unnamed %d then %d; want it named once and nothing more",
			len(fresh1), len(fresh2), unnamed1, unnamed2)
	}
}

// TestMetadataLockWait: an ALTER TABLE waits for the metadata lock an idle
// transaction holds since it read the table; both sides are named by tag
// where the server records metadata locks (the instrument is turned on for
// the test, and back), and the note says how to turn it on when off.
func TestMetadataLockWait(t *testing.T) {
	e := setup(t)
	admin := e.d.Target.Admin()
	var was string
	if err := admin.QueryRow(`SELECT ENABLED FROM performance_schema.setup_instruments WHERE NAME = 'wait/lock/metadata/sql/mdl'`).Scan(&was); err != nil {
		t.Skipf("performance_schema: %v", err)
	}
	if was != "YES" {
		s := e.read()
		found := false
		for _, n := range s.Notes {
			found = found || strings.Contains(n, locks.EnableMDLInstrument)
		}
		if !found {
			t.Errorf("instrument off, no note with the statement that turns it on: %q", s.Notes)
		}
	}
	if _, err := admin.Exec(locks.EnableMDLInstrument); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(`UPDATE performance_schema.setup_instruments SET ENABLED = ?, TIMED = ? WHERE NAME = 'wait/lock/metadata/sql/mdl'`, was, was)
	})
	e.exec("CREATE TABLE m (id INT PRIMARY KEY) ENGINE=InnoDB")
	reader := e.begin("report_reader", sql.LevelReadCommitted)
	reader.rows("SELECT id FROM m")
	ddl := e.begin("schema_change", sql.LevelReadCommitted)
	done := make(chan error, 1)
	go func() {
		_, err := ddl.conn.ExecContext(ddl.ctx, "ALTER TABLE m ADD COLUMN note INT")
		done <- err
	}()
	t.Cleanup(func() { reader.end(); <-done })
	s := e.readUntil("the metadata-lock wait", func(s *locks.Snapshot) bool { return len(s.MetadataWaits) > 0 })
	m := s.MetadataWaits[0]
	if m.Waiting.ThreadID != ddl.id || m.Waiting.Tag != "schema_change" || m.Blocking.ThreadID != reader.id ||
		m.Blocking.Tag != "report_reader" || !strings.HasSuffix(m.Object, e.d.Name+".m") || m.BlockingDuration != "TRANSACTION" {
		t.Errorf("metadata wait %+v: want schema_change (thread %d) waiting for report_reader (thread %d) on %s.m",
			m, ddl.id, reader.id, e.d.Name)
	}
}
