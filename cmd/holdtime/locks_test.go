package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/locks"
	"github.com/holdtime/holdtime/testenv"
)

// lockScene is a database with open transactions of known tags.
type lockScene struct {
	t      *testing.T
	d      *testenv.Database
	admin  *sql.DB
	tagged *sql.DB
}

func newLockScene(t *testing.T) *lockScene {
	t.Helper()
	d := testenv.NewDatabase(t)
	cfg := d.Config()
	cfg.InterpolateParams = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc := &lockScene{t: t, d: d, admin: d.Open(t), tagged: conntag.OpenDB(connector, conntag.WithoutMetrics())}
	t.Cleanup(func() { sc.tagged.Close() })
	for _, q := range []string{
		`CREATE TABLE units_autoinc (id BIGINT AUTO_INCREMENT PRIMARY KEY, shop_id INT NOT NULL, item_id INT NOT NULL,
			KEY k (shop_id, item_id)) ENGINE=InnoDB`,
		`CREATE TABLE units_composite (shop_id INT NOT NULL, item_id INT NOT NULL, id BIGINT NOT NULL AUTO_INCREMENT,
			PRIMARY KEY (shop_id, item_id, id), KEY (id)) ENGINE=InnoDB`,
		`INSERT INTO units_autoinc (shop_id, item_id) VALUES ` + strings.Repeat("(1, 1), ", 19) + "(1, 1)",
		`INSERT INTO units_composite (shop_id, item_id) VALUES ` + strings.Repeat("(1, 1), ", 19) + "(1, 1)",
	} {
		if _, err := sc.admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return sc
}

// setLockOutput sets innodb_status_output_locks for the test, restoring it.
func (sc *lockScene) setLockOutput(on bool) {
	sc.t.Helper()
	admin := sc.d.Target.Admin()
	var was string
	if err := admin.QueryRow("SELECT @@GLOBAL.innodb_status_output_locks").Scan(&was); err != nil {
		sc.t.Fatal(err)
	}
	v := "OFF"
	if on {
		v = "ON"
	}
	if _, err := admin.Exec("SET GLOBAL innodb_status_output_locks = " + v); err != nil {
		sc.t.Fatal(err)
	}
	sc.t.Cleanup(func() {
		restore := "OFF"
		if was == "1" || was == "ON" {
			restore = "ON"
		}
		admin.Exec("SET GLOBAL innodb_status_output_locks = " + restore)
	})
}

// hold opens a READ COMMITTED transaction tagged tag, runs q in it, and
// keeps it open until the test ends. It returns the session id.
func (sc *lockScene) hold(tag, q string) int64 {
	sc.t.Helper()
	ctx := conntag.WithTag(context.Background(), tag)
	conn, err := sc.tagged.Conn(ctx)
	if err != nil {
		sc.t.Fatal(err)
	}
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		sc.t.Fatal(err)
	}
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		sc.t.Fatal(err)
	}
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		sc.t.Fatal(err)
	}
	for rows.Next() {
	}
	rows.Close()
	sc.t.Cleanup(func() { tx.Rollback(); conn.Close() })
	return id
}

// waitTrx waits until INNODB_TRX lists the sessions (MariaDB serves it
// from a cache refreshed after 100 ms without reads).
func (sc *lockScene) waitTrx(ids ...int64) {
	sc.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := 0
		for _, id := range ids {
			var c int
			if err := sc.admin.QueryRow("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?", id).Scan(&c); err == nil {
				n += c
			}
		}
		if n == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			sc.t.Fatalf("transactions of sessions %v not listed", ids)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

func runLocks(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), append([]string{"locks"}, args...), &out, &errOut); code != 0 {
		t.Fatalf("holdtime locks %v: exit %d: %s", args, code, errOut.String())
	}
	return out.String(), errOut.String()
}

// TestLocksCommand: the command reports the two-locks case against the
// composite key, by tag, as JSON and as a table, and --tag filters.
func TestLocksCommand(t *testing.T) {
	sc := newLockScene(t)
	if sc.d.Target.Flavor == testenv.MariaDB {
		sc.setLockOutput(true)
	}
	const q = "SELECT id FROM %s WHERE shop_id = 1 AND item_id = 1 ORDER BY id LIMIT 3 FOR UPDATE SKIP LOCKED"
	two := sc.hold("two_locks", strings.Replace(q, "%s", "units_autoinc", 1))
	one := sc.hold("one_lock", strings.Replace(q, "%s", "units_composite", 1))
	sc.waitTrx(two, one)
	dsn := sc.d.DSN()

	out, _ := runLocks(t, "--mysql", dsn, "--json")
	var doc struct {
		Target string `json:"target"`
		locks.Snapshot
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	want := map[string]float64{"two_locks/units_autoinc": 2.0, "one_lock/units_composite": 1.0}
	for _, r := range doc.RowLocksPerRow {
		k := r.Tag + "/" + strings.TrimPrefix(r.Table, sc.d.Name+".")
		if v, ok := want[k]; ok {
			if r.PerRow != v || r.Rows != 3 {
				t.Errorf("%s: %.1f per row on %d rows, want %.1f on 3", k, r.PerRow, r.Rows, v)
			}
			delete(want, k)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing row-lock figures %v in %+v", want, doc.RowLocksPerRow)
	}
	if doc.Target == "" || strings.Contains(out, "password") {
		t.Errorf("target %q", doc.Target)
	}

	text, _ := runLocks(t, "--mysql", dsn)
	for _, s := range []string{"TRANSACTIONS", "two_locks  thread", "one_lock  thread", "ROW LOCKS PER ROW",
		"two_locks: 2.0 row locks per row read on " + sc.d.Name + ".units_autoinc: 6 locks on 3 rows (index k 3, PRIMARY 3)",
		"a primary key that starts with the filter columns takes one"} {
		if !strings.Contains(strings.ToLower(text), strings.ToLower(s)) {
			t.Errorf("table lacks %q:\n%s", s, text)
		}
	}

	filtered, _ := runLocks(t, "--mysql", dsn, "--tag", "one_lock")
	if strings.Contains(filtered, "two_locks") || !strings.Contains(filtered, "one_lock  thread") {
		t.Errorf("--tag one_lock:\n%s", filtered)
	}
}

// TestLocksLockOutput: with innodb_status_output_locks OFF the command says
// so, prints the statement and its cost, and changes nothing; with
// --enable-lock-output it turns it on for the run and back off.
func TestLocksLockOutput(t *testing.T) {
	sc := newLockScene(t)
	if sc.d.Target.Flavor != testenv.MariaDB {
		t.Skip("MySQL 8 reads performance_schema.data_locks")
	}
	sc.setLockOutput(false)
	id := sc.hold("two_locks", "SELECT id FROM units_autoinc WHERE shop_id = 1 AND item_id = 1 LIMIT 3 FOR UPDATE SKIP LOCKED")
	sc.waitTrx(id)
	lockOutput := func() string {
		var v string
		if err := sc.d.Target.Admin().QueryRow("SELECT @@GLOBAL.innodb_status_output_locks").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	text, _ := runLocks(t, "--mysql", sc.d.DSN())
	for _, s := range []string{"lock output: OFF", "SET GLOBAL innodb_status_output_locks = ON", "cost:", "--enable-lock-output"} {
		if !strings.Contains(text, s) {
			t.Errorf("output lacks %q:\n%s", s, text)
		}
	}
	if strings.Contains(text, "ROW LOCKS PER ROW") {
		t.Errorf("locks counted with lock output off:\n%s", text)
	}
	if v := lockOutput(); v != "0" && v != "OFF" {
		t.Fatalf("the command changed innodb_status_output_locks to %s without being asked", v)
	}

	text, notice := runLocks(t, "--mysql", sc.d.DSN(), "--enable-lock-output")
	if !strings.Contains(notice, "set innodb_status_output_locks = ON (was OFF)") || !strings.Contains(notice, "= OFF again") ||
		!strings.Contains(text, "2.0 row locks per row read") {
		t.Errorf("--enable-lock-output: stderr %q\n%s", notice, text)
	}
	if v := lockOutput(); v != "0" && v != "OFF" {
		t.Errorf("innodb_status_output_locks left %s after the run", v)
	}
}

// TestLocksDeadlock: the command shows the latest deadlock with both tags
// and the victim the client saw (error 1213).
func TestLocksDeadlock(t *testing.T) {
	sc := newLockScene(t)
	if _, err := sc.admin.Exec("CREATE TABLE acct (id INT PRIMARY KEY, v INT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.admin.Exec("INSERT INTO acct VALUES (1, 0), (2, 0)"); err != nil {
		t.Fatal(err)
	}
	type side struct {
		conn *sql.Conn
		tx   *sql.Tx
		ctx  context.Context
		id   int64
	}
	open := func(tag string) *side {
		ctx := conntag.WithTag(context.Background(), tag)
		c, err := sc.tagged.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := &side{conn: c, ctx: ctx}
		if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&s.id); err != nil {
			t.Fatal(err)
		}
		if s.tx, err = c.BeginTx(ctx, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.tx.Rollback(); c.Close() })
		return s
	}
	a, b := open("order_pay"), open("stock_move")
	upd := func(s *side, id int) error {
		_, err := s.tx.ExecContext(s.ctx, "UPDATE acct SET v = v + 1 WHERE id = ?", id)
		return err
	}
	if err := upd(a, 1); err != nil {
		t.Fatal(err)
	}
	if err := upd(b, 2); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var errA error
	wg.Go(func() { errA = upd(a, 2) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st string
		err := sc.admin.QueryRow("SELECT trx_state FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?", a.id).Scan(&st)
		if err == nil && st == "LOCK WAIT" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("order_pay never waited")
		}
		time.Sleep(150 * time.Millisecond)
	}
	errB := upd(b, 1)
	wg.Wait()
	victim := "order_pay"
	var me *mysql.MySQLError
	if errors.As(errB, &me) && me.Number == 1213 {
		victim = "stock_move"
	} else if !errors.As(errA, &me) || me.Number != 1213 {
		t.Fatalf("no deadlock: %v, %v", errA, errB)
	}
	text, _ := runLocks(t, "--mysql", sc.d.DSN())
	if !strings.Contains(text, "victim "+victim+", rolled back") || !strings.Contains(text, "order_pay (thread") ||
		!strings.Contains(text, "stock_move (thread") || !strings.Contains(text, "UPDATE acct SET v = v + ? WHERE id = ?") ||
		!strings.Contains(text, "waited for  "+sc.d.Name+".acct PRIMARY record X") {
		t.Errorf("deadlock not shown with both tags and victim %s:\n%s", victim, text)
	}
}

// docCounter cancels the run after n JSON documents.
type docCounter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	n      int
	cancel context.CancelFunc
}

func (d *docCounter) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.buf.Write(p)
	if d.n -= bytes.Count(p, []byte("\n")); d.n <= 0 {
		d.cancel()
	}
	return len(p), nil
}

func TestLocksWatch(t *testing.T) {
	sc := newLockScene(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := &docCounter{n: 3, cancel: cancel}
	var errOut bytes.Buffer
	code := run(ctx, []string{"locks", "--mysql", sc.d.DSN(), "--watch", "--json", "--interval", "200ms"}, out, &errOut)
	if code != 0 && code != 130 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	docs := 0
	dec := json.NewDecoder(&out.buf)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		if _, ok := doc["saturation"]; !ok {
			t.Errorf("document without saturation: %v", doc)
		}
		docs++
	}
	if docs < 3 {
		t.Errorf("%d documents, want 3 reads", docs)
	}
}

func TestLocksErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no server":    {[]string{"locks"}, "no server: give --mysql"},
		"bad DSN":      {[]string{"locks", "--mysql", "root:s3cret@tcp(127.0.0.1:3306"}, "not a DSN"},
		"bad interval": {[]string{"locks", "--mysql", "root:s3cret@tcp(127.0.0.1:3306)/", "--interval", "10ms"}, "at least 200ms"},
		"unreachable":  {[]string{"locks", "--mysql", "root:s3cret@tcp(" + dead + ")/", "--timeout", "2s"}, dead},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, &stdout, &stderr); code == 0 {
				t.Fatal("exit 0")
			}
			msg := stderr.String()
			if !strings.Contains(msg, tc.want) || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
				t.Errorf("error %q: want one line containing %q", msg, tc.want)
			}
			if strings.Contains(msg+stdout.String(), "s3cret") {
				t.Errorf("password in output: %q", msg)
			}
		})
	}
}

// TestLocksPrivileges: an account without PROCESS gets an error that names
// the privilege to grant.
func TestLocksPrivileges(t *testing.T) {
	sc := newLockScene(t)
	admin := sc.d.Target.Admin()
	user := "ht_nopriv_" + strings.TrimPrefix(sc.d.Name, "ht_")
	if len(user) > 32 {
		user = user[:32]
	}
	if _, err := admin.Exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw-s3cret'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP USER '" + user + "'@'%'") })
	cfg := sc.d.Config()
	cfg.User, cfg.Passwd, cfg.DBName = user, "pw-s3cret", ""
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"locks", "--mysql", cfg.FormatDSN()}, &stdout, &stderr); code == 0 {
		t.Fatalf("exit 0 without PROCESS:\n%s", stdout.String())
	}
	if msg := stderr.String(); !strings.Contains(msg, "PROCESS") || strings.Contains(msg, "pw-s3cret") {
		t.Errorf("error %q: want the PROCESS privilege named, no password", msg)
	}
}

// TestLocksWithoutName (issue 23, defect 6): locks reads one server, so a
// DSN whose address cannot be a target name (a unix socket path) needs no
// NAME= in front.
func TestLocksWithoutName(t *testing.T) {
	sc := newLockScene(t)
	var socket string
	if err := sc.admin.QueryRow("SELECT @@socket").Scan(&socket); err != nil || socket == "" {
		t.Skipf("no unix socket: %v", err)
	}
	cfg := sc.d.Config()
	cfg.Net, cfg.Addr = "unix", socket
	out, _ := runLocks(t, "--mysql", cfg.FormatDSN())
	if !strings.Contains(out, "TRANSACTIONS") {
		t.Errorf("output:\n%s", out)
	}
}

// chainTx is a tagged transaction on its own connection.
type chainTx struct {
	id   int64
	ctx  context.Context
	conn *sql.Conn
	tx   *sql.Tx
}

func (sc *lockScene) begin(tag string) *chainTx {
	sc.t.Helper()
	x := &chainTx{ctx: conntag.WithTag(context.Background(), tag)}
	var err error
	if x.conn, err = sc.tagged.Conn(x.ctx); err != nil {
		sc.t.Fatal(err)
	}
	if err := x.conn.QueryRowContext(x.ctx, "SELECT CONNECTION_ID()").Scan(&x.id); err != nil {
		sc.t.Fatal(err)
	}
	if x.tx, err = x.conn.BeginTx(x.ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}); err != nil {
		sc.t.Fatal(err)
	}
	sc.t.Cleanup(x.end)
	return x
}

func (x *chainTx) end() { x.tx.Rollback(); x.conn.Close() }

// TestLocksChain (issue 23, done-when): root -> two waiters -> one waiting
// on a waiter shows as one tree with the right root, its KILL printed, in
// the text view and in --json.
func TestLocksChain(t *testing.T) {
	sc := newLockScene(t)
	if sc.d.Target.Flavor == testenv.MariaDB {
		sc.setLockOutput(true)
	}
	if _, err := sc.admin.Exec("CREATE TABLE r (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	sc.admin.Exec("INSERT INTO r VALUES (1, 0), (2, 0), (3, 0)")
	root := sc.begin("chain_root")
	if _, err := root.tx.ExecContext(root.ctx, "UPDATE r SET v = v + 1 WHERE id IN (1, 3)"); err != nil {
		t.Fatal(err)
	}
	first := sc.begin("first_waiter")
	if _, err := first.tx.ExecContext(first.ctx, "UPDATE r SET v = v + 1 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	second, behind := sc.begin("second_waiter"), sc.begin("behind_waiter")
	var wg sync.WaitGroup
	for _, w := range []struct {
		x  *chainTx
		id int
	}{{first, 1}, {second, 3}, {behind, 2}} {
		wg.Go(func() {
			w.x.tx.ExecContext(w.x.ctx, "UPDATE r SET v = v + 1 WHERE id = ?", w.id)
			w.x.end()
		})
	}
	t.Cleanup(func() { root.end(); wg.Wait() })
	var doc struct {
		locks.Snapshot
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := runLocks(t, "--mysql", sc.d.DSN(), "--json")
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Waits) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 waits not seen: %s", out)
		}
		time.Sleep(150 * time.Millisecond) // INNODB_TRX's cache refreshes after 100 ms without a read
	}
	if len(doc.Chains) != 1 || doc.Chains[0].Root.ThreadID != root.id || doc.Chains[0].HeldUp != 3 ||
		len(doc.Chains[0].Waiters) != 2 {
		t.Fatalf("--json chains %+v: want one, rooted at thread %d, holding up 3", doc.Chains, root.id)
	}
	text, _ := runLocks(t, "--mysql", sc.d.DSN())
	t.Logf("the view (README's capture):\n%s", text)
	kill := fmt.Sprintf("KILL %d", root.id)
	for _, want := range []string{"in 1 chain(s)", fmt.Sprintf("root chain_root  thread %d  idle ", root.id),
		"holds up 3 session(s)", kill + "   (printed, not run)",
		fmt.Sprintf("    └─ first_waiter  thread %d  waits ", first.id),
		fmt.Sprintf("       └─ behind_waiter  thread %d  waits ", behind.id),
		fmt.Sprintf("    └─ second_waiter  thread %d  waits ", second.id), "record (1) wants X, held X"} {
		if !strings.Contains(text, want) {
			t.Errorf("text view lacks %q:\n%s", want, text)
		}
	}
	// Printed, never run: the root is still there.
	var n int
	sc.admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", root.id).Scan(&n)
	if n != 1 {
		t.Errorf("the root's session is gone")
	}
}

// TestLocksSharedLockBlocker (issue 23, defect 1, the view): share_a and
// share_b hold only shared locks (MariaDB: both trx id 0), writer_c waits
// for share_a's row. The view names share_a as the root, tells the two
// readers apart by thread, and never shows share_b blocking.
func TestLocksSharedLockBlocker(t *testing.T) {
	sc := newLockScene(t)
	if sc.d.Target.Flavor != testenv.MariaDB {
		t.Skip("MySQL 8 gives each transaction its own id")
	}
	sc.setLockOutput(true)
	if _, err := sc.admin.Exec("CREATE TABLE r (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	sc.admin.Exec("INSERT INTO r VALUES (3, 0), (4, 0)")
	a, b := sc.begin("share_a"), sc.begin("share_b")
	for _, x := range []struct {
		x  *chainTx
		id int
	}{{a, 3}, {b, 4}} {
		rows, err := x.x.tx.QueryContext(x.x.ctx, "SELECT v FROM r WHERE id = ? LOCK IN SHARE MODE", x.id)
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	c := sc.begin("writer_c")
	done := make(chan struct{})
	go func() {
		c.tx.ExecContext(c.ctx, "UPDATE r SET v = 1 WHERE id = 3")
		c.end()
		close(done)
	}()
	t.Cleanup(func() { a.end(); <-done })
	var text string
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(text, "LOCK WAITS  1") {
		if time.Now().After(deadline) {
			t.Fatalf("no wait seen:\n%s", text)
		}
		time.Sleep(150 * time.Millisecond)
		text, _ = runLocks(t, "--mysql", sc.d.DSN())
	}
	for _, want := range []string{fmt.Sprintf("root share_a  thread %d", a.id),
		fmt.Sprintf("└─ writer_c  thread %d  waits ", c.id), "(3) wants X, held S",
		fmt.Sprintf("share_a  thread %d  read-only trx (no trx id)", a.id),
		fmt.Sprintf("share_b  thread %d  read-only trx (no trx id)", b.id)} {
		if !strings.Contains(text, want) {
			t.Errorf("view lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "root share_b") {
		t.Errorf("share_b shown blocking:\n%s", text)
	}
}
