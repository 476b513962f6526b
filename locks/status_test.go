package locks_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/locks"
)

// readTestdata reads a captured status text (testdata/*.txt, or *.txt.gz).
func readTestdata(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			tb.Fatal(err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			tb.Fatal(err)
		}
	}
	return string(b)
}

func byThread(st *locks.Status, query string) *locks.StatusTransaction {
	for i := range st.Transactions {
		if strings.Contains(st.Transactions[i].Query, query) {
			return &st.Transactions[i]
		}
	}
	return nil
}

func lockRows(ls []locks.Lock, index string, kind locks.Kind) int {
	n := 0
	for _, l := range ls {
		if l.Index == index && l.Kind == kind {
			n += l.Rows
		}
	}
	return n
}

// TestParseCaptured parses status texts captured from MariaDB 10.11 by the
// live tests (HOLDTIME_LOCKS_CAPTURE) and checks what each scenario left in
// them.
func TestParseCaptured(t *testing.T) {
	t.Run("locks per row", func(t *testing.T) {
		st := locks.ParseStatus(readTestdata(t, "mariadb-locks-per-row.txt"))
		if !st.Complete || st.Truncated || st.Unparsed != 0 || len(st.Transactions) != 2 {
			t.Fatalf("status: complete %v truncated %v unparsed %d, %d transactions", st.Complete, st.Truncated, st.Unparsed, len(st.Transactions))
		}
		for _, tr := range st.Transactions {
			k, primary := lockRows(tr.Locks, "k", locks.KindRecord), lockRows(tr.Locks, "PRIMARY", locks.KindRecord)
			switch {
			case k == 3 && primary == 3 && tr.RowLocks == 6: // units_autoinc
			case k == 0 && primary == 3 && tr.RowLocks == 3: // units_composite
			default:
				t.Errorf("transaction %s: k %d, PRIMARY %d, %d row locks: %+v", tr.TrxID, k, primary, tr.RowLocks, tr.Locks)
			}
			if tr.ThreadID == 0 || !tr.LocksListed || tr.LocksPartial {
				t.Errorf("transaction %+v", tr)
			}
		}
	})
	t.Run("gap locks", func(t *testing.T) {
		st := locks.ParseStatus(readTestdata(t, "mariadb-gap-locks-rr.txt"))
		if len(st.Transactions) != 1 {
			t.Fatalf("%d transactions", len(st.Transactions))
		}
		ls := st.Transactions[0].Locks
		if lockRows(ls, "PRIMARY", locks.KindGap) != 1 || lockRows(ls, "PRIMARY", locks.KindSupremum) != 1 {
			t.Errorf("locks %v: want one gap and one supremum lock", ls)
		}
	})
	t.Run("deadlock", func(t *testing.T) {
		st := locks.ParseStatus(readTestdata(t, "mariadb-deadlock.txt"))
		d := st.Deadlock
		if d == nil || d.At != "2026-12-02 16:46:20" || d.Victim != 1 || len(d.Transactions) != 2 {
			t.Fatalf("deadlock %+v", d)
		}
		d.ResolveTags(conntag.ParseTag)
		if d.VictimTag() != "inventory_adjust" || d.OtherTags()[0] != "checkout_payment" {
			t.Errorf("victim %s, others %v", d.VictimTag(), d.OtherTags())
		}
		for _, x := range d.Transactions {
			if x.Statement != "UPDATE accounts SET balance = balance - ? WHERE id = ? AND owner <> ?" {
				t.Errorf("statement %q", x.Statement)
			}
			// MariaDB's CONFLICTING WITH names the holder by trx id: each
			// holds the record the other waits for.
			if len(x.Held) != 1 || x.Held[0].Kind != locks.KindRecord || x.WaitedFor == nil || !x.WaitedFor.Waiting {
				t.Errorf("%s: held %v, waited for %v", x.Tag, x.Held, x.WaitedFor)
			}
		}
		if d.Key() == "" || !strings.Contains(d.Key(), "389") {
			t.Errorf("key %q", d.Key())
		}
	})
	t.Run("partial", func(t *testing.T) {
		st := locks.ParseStatus(readTestdata(t, "mariadb-partial.txt"))
		tr := byThread(st, "")
		if tr == nil || !tr.LocksPartial || tr.LockStructs != 24 || tr.RowLocks != 36 {
			t.Fatalf("transaction %+v", tr)
		}
	})
	t.Run("lock output off", func(t *testing.T) {
		st := locks.ParseStatus(readTestdata(t, "mariadb-lock-output-off.txt"))
		waiting := 0
		for _, tr := range st.Transactions {
			if tr.LocksListed || len(tr.Locks) != 0 {
				t.Errorf("locks listed with lock output off: %+v", tr)
			}
			if tr.Waiting != nil {
				waiting++
				if tr.Waiting.Kind != locks.KindRecord || !tr.LockWait {
					t.Errorf("waiting lock %+v", tr.Waiting)
				}
			}
		}
		if waiting != 1 {
			t.Errorf("%d waiting transactions, want 1", waiting)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		text := readTestdata(t, "mariadb-truncated.txt.gz")
		st := locks.ParseStatus(text)
		if !st.Truncated || !strings.Contains(text, "... truncated...") || len(st.Transactions) == 0 {
			t.Errorf("truncated %v, %d transactions", st.Truncated, len(st.Transactions))
		}
	})
}

// mysql8Deadlock is LATEST DETECTED DEADLOCK in MySQL 8.0's layout (HOLDS
// THE LOCK(S) per transaction), written after the MySQL 8.0 manual's
// example: no MySQL server runs here.
const mysql8Deadlock = `=====================================
2026-01-05 10:00:00 0x7f8b3c INNODB MONITOR OUTPUT
=====================================
------------------------
LATEST DETECTED DEADLOCK
------------------------
2026-01-05 09:59:58 140179532244736
*** (1) TRANSACTION:
TRANSACTION 2373, ACTIVE 2 sec starting index read
mysql tables in use 1, locked 1
LOCK WAIT 4 lock struct(s), heap size 1136, 2 row lock(s)
MySQL thread id 100, OS thread handle 140179532244736, query id 789 localhost root updating
/* conn_tag:checkout_completion */ UPDATE products SET stock = stock - 1 WHERE id = 102

*** (1) HOLDS THE LOCK(S):
RECORD LOCKS space id 10 page no 5 n bits 80 index PRIMARY of table ` + "`db`.`products`" + ` trx id 2373 lock_mode X locks rec but not gap
Record lock, heap no 3 PHYSICAL RECORD: n_fields 4; compact format; info bits 0
 0: len 8; hex 0000000000000065; asc        e;;

*** (1) WAITING FOR THIS LOCK TO BE GRANTED:
RECORD LOCKS space id 10 page no 5 n bits 80 index PRIMARY of table ` + "`db`.`products`" + ` trx id 2373 lock_mode X locks rec but not gap waiting
Record lock, heap no 4 PHYSICAL RECORD: n_fields 4; compact format; info bits 0
 0: len 8; hex 0000000000000066; asc        f;;

*** (2) TRANSACTION:
TRANSACTION 2374, ACTIVE 1 sec starting index read
mysql tables in use 1, locked 1
LOCK WAIT 4 lock struct(s), heap size 1136, 2 row lock(s)
MySQL thread id 101, OS thread handle 140179532244737, query id 790 localhost root updating
/* conn_tag:inventory_release */ UPDATE products SET stock = stock + 1 WHERE id = 101

*** (2) HOLDS THE LOCK(S):
RECORD LOCKS space id 10 page no 5 n bits 80 index PRIMARY of table ` + "`db`.`products`" + ` trx id 2374 lock_mode X locks rec but not gap
Record lock, heap no 4 PHYSICAL RECORD: n_fields 4; compact format; info bits 0
 0: len 8; hex 0000000000000066; asc        f;;

*** (2) WAITING FOR THIS LOCK TO BE GRANTED:
RECORD LOCKS space id 10 page no 5 n bits 80 index PRIMARY of table ` + "`db`.`products`" + ` trx id 2374 lock_mode X locks rec but not gap waiting
Record lock, heap no 3 PHYSICAL RECORD: n_fields 4; compact format; info bits 0
 0: len 8; hex 0000000000000065; asc        e;;

*** WE ROLL BACK TRANSACTION (2)
------------
TRANSACTIONS
------------
Trx id counter 2375
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION 421654009845432, not started
0 lock struct(s), heap size 1136, 0 row lock(s)
---TRANSACTION 2373, ACTIVE 3 sec
4 lock struct(s), heap size 1136, 3 row lock(s), undo log entries 1
MySQL thread id 100, OS thread handle 140179532244736, query id 791 localhost root
--------
FILE I/O
--------
--------------
ROW OPERATIONS
--------------
2 queries inside InnoDB, 5 queries in queue
0 read views open inside InnoDB
----------------------------
END OF INNODB MONITOR OUTPUT
============================
`

func TestParseMySQL8Layout(t *testing.T) {
	st := locks.ParseStatus(mysql8Deadlock)
	if !st.Complete || st.Truncated || !st.HaveQueue || st.QueriesInside != 2 || st.QueriesInQueue != 5 {
		t.Errorf("status %+v", st)
	}
	if len(st.Transactions) != 1 || st.Transactions[0].ThreadID != 100 || st.Transactions[0].RowLocks != 3 ||
		st.Transactions[0].UndoEntries != 1 || st.Transactions[0].Active != 3 {
		t.Errorf("transactions %+v", st.Transactions)
	}
	d := st.Deadlock
	if d == nil || d.Victim != 2 || len(d.Transactions) != 2 || d.At != "2026-01-05 09:59:58" {
		t.Fatalf("deadlock %+v", d)
	}
	d.ResolveTags(conntag.ParseTag)
	if d.VictimTag() != "inventory_release" || d.OtherTags()[0] != "checkout_completion" {
		t.Errorf("victim %s others %v", d.VictimTag(), d.OtherTags())
	}
	one := d.Transactions[0]
	if one.Statement != "UPDATE products SET stock = stock - ? WHERE id = ?" || len(one.Held) != 1 ||
		one.Held[0].Table != "db.products" || one.Held[0].Kind != locks.KindRecord || one.WaitedFor == nil {
		t.Errorf("transaction 1: %+v", one)
	}
}

// TestParseLockLines covers the lock line forms of both servers, old and
// new.
func TestParseLockLines(t *testing.T) {
	const head = "------------\nTRANSACTIONS\n------------\nLIST OF TRANSACTIONS FOR EACH SESSION:\n" +
		"---TRANSACTION 7, ACTIVE 1 sec\n2 lock struct(s), heap size 1128, 1 row lock(s)\n"
	const tail = "--------\nFILE I/O\n--------\n"
	for _, tc := range []struct {
		line string
		want locks.Lock
	}{
		{"TABLE LOCK table `db`.`t` trx id 7 lock mode IX", locks.Lock{Table: "db.t", Kind: locks.KindTableIntention, Mode: "IX", Rows: 1}},
		{"TABLE LOCK table `db`.`t` trx id 7 lock mode AUTO-INC waiting", locks.Lock{Table: "db.t", Kind: locks.KindAutoInc, Mode: "AUTO-INC", Waiting: true, Rows: 1}},
		{"TABLE LOCK table `db`.`p` /* Partition `p1` */ trx id 7 lock mode IX", locks.Lock{Table: "db.p", Kind: locks.KindTableIntention, Mode: "IX", Rows: 1}},
		{"TABLE LOCK table `db`.`t` trx id 7 lock mode X", locks.Lock{Table: "db.t", Kind: locks.KindTable, Mode: "X", Rows: 1}},
		{"RECORD LOCKS space id 5 page no 3 n bits 72 index `PRIMARY` of table `db`.`t` trx id 7 lock mode S\nRecord lock, heap no 2 PHYSICAL RECORD: n_fields 3",
			locks.Lock{Table: "db.t", Index: "PRIMARY", Kind: locks.KindNextKey, Mode: "S", Rows: 1}},
		{"RECORD LOCKS space id 5 page no 3 n bits 72 index k of table `db`.`t` trx id 7 lock_mode X locks gap before rec insert intention waiting\nRecord lock, heap no 4 PHYSICAL RECORD: n_fields 3",
			locks.Lock{Table: "db.t", Index: "k", Kind: locks.KindInsertIntention, Mode: "X", Waiting: true, Rows: 1}},
		{"RECORD LOCKS space id 0 page no 45 n bits 80 index `PRIMARY` of table `test/ad_data` trx id 0 94731 lock_mode X locks rec but not gap\nRecord lock, heap no 7 PHYSICAL RECORD",
			locks.Lock{Table: "test.ad_data", Index: "PRIMARY", Kind: locks.KindRecord, Mode: "X", Rows: 1}},
		{"RECORD LOCKS space id 5 page no 3 n bits 72 index PRIMARY of table `db`.`t` trx id 7 lock_mode X\nRecord lock, heap no 1 PHYSICAL RECORD: n_fields 1; compact format; info bits 0\n 0: len 8; hex 73757072656d756d; asc supremum;;",
			locks.Lock{Table: "db.t", Index: "PRIMARY", Kind: locks.KindSupremum, Mode: "X", Rows: 1}},
	} {
		st := locks.ParseStatus(head + tc.line + "\n" + tail)
		if len(st.Transactions) != 1 || len(st.Transactions[0].Locks) != 1 || st.Transactions[0].Locks[0] != tc.want {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.line, st.Transactions, tc.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"/* conn_tag:a */ SELECT * FROM t WHERE id = 42":                "SELECT * FROM t WHERE id = ?",
		"UPDATE t SET a = 'it''s', b = \"x\\\"y\" WHERE id IN (1, 2,3)": "UPDATE t SET a = ?, b = ? WHERE id IN (...)",
		"INSERT INTO t1 (a, b) VALUES (1, 'x'), (2, 'y'), (3, 'z')":     "INSERT INTO t1 (a, b) VALUES (...)",
		"SELECT x'4142', 0x1F, 1.5e10, -3, _utf8mb4'z', _binary 'q'":    "SELECT ?, ?, ?, -?, ?, ?",
		"SELECT `col 1`, t2.c3 FROM `t 2` -- trailing\n WHERE a > .5":   "SELECT `col 1`, t2.c3 FROM `t 2` WHERE a > ?",
		"SELECT 'unterminated":    "SELECT ?",
		"SELECT @@x1, @v2 # note": "SELECT @@x1, @v2",
		"(SELECT ? AS part, id FROM u WHERE shop_id = ? LIMIT ? FOR UPDATE SKIP LOCKED) UNION ALL (SELECT 1 AS part, id FROM u)": "(SELECT ? AS part, id FROM u WHERE shop_id = ? LIMIT ? FOR UPDATE SKIP LOCKED) UNION ALL (SELECT ? AS part, id FROM u)",
	} {
		if got := locks.Normalize(in); got != want {
			t.Errorf("Normalize(%q)\n got %q\nwant %q", in, got, want)
		}
	}
	long := "SELECT " + strings.Repeat("a, ", 2000) + "b"
	if got := locks.Normalize(long); len(got) > 1100 || !strings.HasSuffix(got, "…") {
		t.Errorf("long statement: %d bytes", len(got))
	}
}

// FuzzParseStatus feeds the parser captured texts, cut anywhere, with
// lines dropped, duplicated or garbled; it must never panic, and what it
// returns must be sane.
func FuzzParseStatus(f *testing.F) {
	for _, name := range []string{"mariadb-locks-per-row.txt", "mariadb-gap-locks-rr.txt", "mariadb-deadlock.txt",
		"mariadb-partial.txt", "mariadb-lock-output-off.txt"} {
		text := readTestdata(f, name)
		f.Add(text)
		f.Add(text[:len(text)/2]) // cut mid-way
	}
	f.Add(mysql8Deadlock)
	// A huge transaction: the truncated capture's transaction list, and
	// the same repeated past the server's cut.
	big := readTestdata(f, "mariadb-truncated.txt.gz")
	f.Add(big[:min(len(big), 200_000)])
	f.Add("------------\nTRANSACTIONS\n------------\n---TRANSACTION 1, ACTIVE 1 sec\n" +
		strings.Repeat("RECORD LOCKS space id 1 page no 1 n bits 8 index PRIMARY of table `a`.`b` trx id 1 lock_mode X\nRecord lock, heap no 1\n", 1000))
	f.Add("------------------------\nLATEST DETECTED DEADLOCK\n------------------------\n*** (9) TRANSACTION:\n*** WE ROLL BACK TRANSACTION (x)\n")
	f.Add("---TRANSACTION \n------- TRX HAS BEEN WAITING\nRECORD LOCKS index  of table  trx id  lock_mode \n")
	f.Fuzz(func(t *testing.T, text string) {
		st := locks.ParseStatus(text)
		for _, tr := range st.Transactions {
			for _, l := range tr.Locks {
				if l.Rows < 0 || l.Kind == "" {
					t.Fatalf("lock %+v", l)
				}
			}
			if len(tr.Query) > 4096 {
				t.Fatalf("query of %d bytes kept", len(tr.Query))
			}
		}
		if d := st.Deadlock; d != nil {
			for _, x := range d.Transactions {
				if utf8.ValidString(text) && !utf8.ValidString(x.Statement) {
					t.Fatalf("statement %q not UTF-8", x.Statement)
				}
			}
			_ = d.Key()
			d.ResolveTags(conntag.ParseTag)
		}
	})
}

// FuzzNormalize: never panics, stays bounded, keeps no quote-delimited
// literal.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"SELECT 1", "UPDATE t SET a='x' WHERE b IN (1,2)", "/* c */ SELECT `a``b` FROM t -- x",
		"SELECT 'a\\'b', \"c\"\"d\"", "INSERT INTO t VALUES (1,2),(3,4)", "SELECT x'ff', _binary 'z'", "SELECT 'é'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		out := locks.Normalize(q)
		if len(out) > 1024+len("…")+8 {
			t.Fatalf("%d bytes", len(out))
		}
		if utf8.ValidString(q) && !utf8.ValidString(out) {
			t.Fatalf("Normalize(%q) = %q: not UTF-8", q, out)
		}
	})
}
