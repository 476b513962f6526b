package trxjoin

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	servers.mu.Lock()
	for _, s := range servers.m {
		if s.srv != nil {
			s.srv.Close()
		}
	}
	servers.mu.Unlock()
	os.Exit(code)
}

// withoutTrxArgs turn off what testenv's setup list (internal/doctor)
// turns on for transactions: the transaction instrument and its consumer,
// as MariaDB ships them.
var withoutTrxArgs = []string{
	"--performance-schema-instrument=transaction=OFF",
	"--performance-schema-consumer-events-transactions-current=OFF",
}

// servers are the servers this test binary started, one per setup: "full"
// with testenv's setup list, "no_trx" without transactions recorded.
var servers struct {
	mu sync.Mutex
	m  map[string]*started
}

type started struct {
	srv *testenv.MySQLServer
	err error
}

// server returns a DSN config of a server with the named setup: the
// HOLDTIME_MYSQL_DSN server when set (MySQL 8 records transactions by
// default), else one testenv starts, once per binary.
func server(t testing.TB, setup string) *mysql.Config {
	t.Helper()
	if dsn := os.Getenv(testenv.DSNEnv); dsn != "" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatalf("%s is not a go-sql-driver/mysql DSN", testenv.DSNEnv)
		}
		return cfg
	}
	testenv.Require(t)
	servers.mu.Lock()
	defer servers.mu.Unlock()
	if servers.m == nil {
		servers.m = map[string]*started{}
	}
	s := servers.m[setup]
	if s == nil {
		var opts testenv.MySQLOptions
		if setup == "no_trx" {
			opts.ExtraArgs = withoutTrxArgs
		}
		s = &started{}
		s.srv, s.err = testenv.StartMySQL(context.Background(), opts)
		servers.m[setup] = s
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.srv.Config("")
}

func fullServer(t testing.TB) *mysql.Config { return server(t, "full") }

func openDB(t testing.TB, cfg *mysql.Config) *sql.DB {
	t.Helper()
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db
}

// backend is one server connection a test drives as a ProxySQL backend
// would be driven: one session after another on the same connection.
type backend struct {
	t    *testing.T
	conn *sql.Conn
	id   int64
}

func newBackend(t *testing.T, db *sql.DB) *backend {
	t.Helper()
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var id int64
	if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return &backend{t: t, conn: c, id: id}
}

func (b *backend) exec(q string, args ...any) {
	b.t.Helper()
	if _, err := b.conn.ExecContext(context.Background(), q, args...); err != nil {
		b.t.Fatalf("%s: %v", q, err)
	}
}

func (b *backend) prepare(q string) *sql.Stmt {
	b.t.Helper()
	st, err := b.conn.PrepareContext(context.Background(), q)
	if err != nil {
		b.t.Fatalf("prepare %s: %v", q, err)
	}
	b.t.Cleanup(func() { st.Close() })
	return st
}

// monitor is the collector's side: a connection of its own that reads the
// server, and the reads made so far.
type monitor struct {
	t     *testing.T
	conn  *sql.Conn
	ids   []int64
	reads []Read
}

func newMonitor(t *testing.T, db *sql.DB, bs ...*backend) *monitor {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m := &monitor{t: t, conn: c}
	for _, b := range bs {
		m.ids = append(m.ids, b.id)
	}
	return m
}

func (m *monitor) read() Read {
	m.t.Helper()
	r, err := ReadServer(context.Background(), m.conn, m.ids)
	if err != nil {
		m.t.Fatal(err)
	}
	m.reads = append(m.reads, r)
	return r
}

// sample stands for a ProxySQL processlist sample taken now: its Start and
// End bracket a moment at which the backend is idle and held. A real
// sampler's query takes about a millisecond; the test's takes none.
func sample(b *backend, inTrx bool) Sample {
	s := Sample{Start: time.Now(), Backend: b.id, InTrx: inTrx}
	s.End = time.Now()
	return s
}

// readUntil reads until a read satisfies done, for at most 5 s.
func (m *monitor) readUntil(done func(Read) bool) {
	m.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if done(m.read()) {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatal("no read showed what the test waits for within 5 s")
		}
	}
}

// executes is COUNT_EXECUTE of the prepared statement of thread id (by
// processlist id) whose text contains text, as r shows it; -1 if none.
func executes(r Read, id int64, text string) int64 {
	if th := r.Threads[id]; th != nil {
		for _, p := range th.Prepared {
			if strings.Contains(p.Text, text) {
				return p.Executes
			}
		}
	}
	return -1
}

func (m *monitor) decide(s Sample) Result {
	m.t.Helper()
	return Decide(m.reads, s)
}

func want(t *testing.T, what string, got Result, tag string, q Quality) {
	t.Helper()
	t.Logf("%s: %q %v (%s)", what, got.Tag, got.Quality, got.Reason)
	if got.Tag != tag || got.Quality != q || got.Pending {
		t.Errorf("%s: got %q %v (pending %v: %s), want %q %v", what, got.Tag, got.Quality, got.Pending, got.Reason, tag, q)
	}
}

func TestIdleTransactionExact(t *testing.T) {
	db := openDB(t, fullServer(t))
	b := newBackend(t, db)
	m := newMonitor(t, db, b)
	b.exec("BEGIN")
	b.exec("SELECT 1 /* conn_tag:hog */")
	m.read()
	s := sample(b, true)
	m.read()
	b.exec("COMMIT")
	got := m.decide(s)
	want(t, "idle transaction", got, "hog", Exact)
	if r := m.reads[0]; len(r.Setup.Degradations()) != 0 {
		t.Errorf("full setup reported degradations: %+v", r.Setup.Degradations())
	}
}

// TestReusedBackendExact is the case the time join got wrong: one server
// connection serves session A's transaction and then session B's, and a
// sample of B comes right after A's statements. The server's own order
// names B.
func TestReusedBackendExact(t *testing.T) {
	db := openDB(t, fullServer(t))
	b := newBackend(t, db)
	m := newMonitor(t, db, b)
	// Session A: a transaction of its own, committed.
	b.exec("BEGIN")
	b.exec("SELECT 1 /* conn_tag:previous */")
	b.exec("SELECT 2 /* conn_tag:previous */")
	m.read()
	b.exec("COMMIT")
	// Session B takes the same backend at once.
	b.exec("BEGIN")
	b.exec("SELECT 2 /* conn_tag:next */")
	m.read()
	s := sample(b, true)
	m.read()
	want(t, "reused backend, transaction", m.decide(s), "next", Exact)
	b.exec("COMMIT")

	// The same as a pin: A's tagged statements, then B's user variable.
	b.exec("SELECT 3 /* conn_tag:previous */")
	m.read()
	b.exec("SET @pin := 1 /* conn_tag:pinner */")
	b.exec("SELECT @pin /* conn_tag:pinner */")
	m.read()
	s = sample(b, false)
	m.read()
	want(t, "reused backend, pin", m.decide(s), "pinner", Exact)
}

// TestTransactionBeforeFirstStatementPending: a session idle right after
// BEGIN owns the transaction, but nothing names it until its first
// statement; the result waits for a later read, and never takes the tag of
// the statement before the BEGIN.
func TestTransactionBeforeFirstStatementPending(t *testing.T) {
	db := openDB(t, fullServer(t))
	b := newBackend(t, db)
	m := newMonitor(t, db, b)
	b.exec("SELECT 0 /* conn_tag:previous */")
	b.exec("START TRANSACTION")
	m.read()
	s := sample(b, true)
	m.read()
	got := m.decide(s)
	if !got.Pending || got.Tag != "" {
		t.Fatalf("before the first statement: got %+v, want pending without a tag", got)
	}
	b.exec("SELECT 1 /* conn_tag:late */")
	m.read()
	want(t, "after the first statement", m.decide(s), "late", Exact)
	b.exec("ROLLBACK")
}

// TestPinAmbiguousInferred: statements of different tags between the two
// bracketing reads, one before the sample and one after, with no
// transaction to tie them: the server's order cannot say which came
// before the sample, so the answer is inferred, never exact.
func TestPinAmbiguousInferred(t *testing.T) {
	db := openDB(t, fullServer(t))
	b := newBackend(t, db)
	m := newMonitor(t, db, b)
	b.exec("SELECT 1 /* conn_tag:old */")
	m.read()
	b.exec("SET @v := 1 /* conn_tag:holder */")
	time.Sleep(20 * time.Millisecond) // the tie-break needs the two statements apart on the clock
	s := sample(b, false)
	time.Sleep(20 * time.Millisecond)
	b.exec("SELECT @v /* conn_tag:after */")
	m.read()
	got := m.decide(s)
	if got.Quality != Inferred {
		t.Fatalf("ambiguous pin: got %+v, want inferred", got)
	}
	if got.Tag != "holder" {
		t.Errorf("ambiguous pin: time picked %q, want holder (%s)", got.Tag, got.Reason)
	}
}

// TestPreparedExact drives go-sql-driver's binary protocol: MariaDB records
// Prepare and Execute without text, and the thread's prepared statements
// name them.
func TestPreparedExact(t *testing.T) {
	db := openDB(t, fullServer(t))
	b := newBackend(t, db)
	m := newMonitor(t, db, b)
	st := b.prepare("SELECT ? + 1 /* conn_tag:checkout */")
	b.exec("BEGIN")
	for i := range 2 {
		if _, err := st.Exec(i); err != nil {
			t.Fatal(err)
		}
	}
	m.read()
	s := sample(b, true)
	m.read()
	want(t, "prepared, one tag on the thread", m.decide(s), "checkout", Exact)
	b.exec("COMMIT")

	// A second tag's prepared statement on the same thread: only the one
	// whose COUNT_EXECUTE moved between two reads names the Execute.
	other := b.prepare("SELECT ? + 2 /* conn_tag:refund */")
	if _, err := other.Exec(1); err != nil {
		t.Fatal(err)
	}
	// Reads until one shows refund's Execute counted, then one more: a
	// read is not a snapshot, so the baseline of an Execute's COUNT_EXECUTE
	// is the read two before the one that shows it. (Counting two reads
	// was not enough in a full go test ./... on the 2-core machine: the
	// server can answer the Execute before it counts it.)
	m.readUntil(func(r Read) bool { return executes(r, b.id, "conn_tag:refund") >= 1 })
	m.read()
	b.exec("BEGIN")
	if _, err := st.Exec(3); err != nil {
		t.Fatal(err)
	}
	m.read()
	s = sample(b, true)
	m.read()
	want(t, "prepared, one COUNT_EXECUTE moved", m.decide(s), "checkout", Exact)
	b.exec("COMMIT")

	// Both executed between the same two reads: ambiguous, inferred.
	m.read()
	b.exec("BEGIN")
	for range 2 {
		if _, err := other.Exec(1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Exec(1); err != nil {
		t.Fatal(err)
	}
	m.read()
	s = sample(b, true)
	m.read()
	got := m.decide(s)
	b.exec("COMMIT")
	t.Logf("two prepared tags moved: %q %v (%s)", got.Tag, got.Quality, got.Reason)
	if got.Quality != Inferred {
		t.Fatalf("two prepared tags moved: got %+v, want inferred", got)
	}
}

// TestDefaultMariaDBDegraded: a server without the transaction instrument
// and consumer (MariaDB's default). The read says so with the fix, and an
// idle transaction is still exact from BEGIN in the history.
func TestDefaultMariaDBDegraded(t *testing.T) {
	db := openDB(t, server(t, "no_trx"))
	b := newBackend(t, db)
	m := newMonitor(t, db, b)
	r := m.read()
	if r.Setup.TrxInstrument && r.Setup.Consumers["events_transactions_current"] {
		t.Skip("this server records transactions by default")
	}
	var fixes []string
	for _, d := range r.Setup.Degradations() {
		fixes = append(fixes, d.Fix)
	}
	if !r.Setup.TrxInstrument && !contains(fixes, "UPDATE performance_schema.setup_instruments SET ENABLED='YES', TIMED='YES' WHERE NAME='transaction'") {
		t.Errorf("degradations %q do not give the transaction instrument's fix", fixes)
	}
	b.exec("BEGIN")
	b.exec("SELECT 1 /* conn_tag:hog */")
	m.read()
	s := sample(b, true)
	m.read()
	want(t, "idle transaction without the transaction instrument", m.decide(s), "hog", Exact)
	b.exec("COMMIT")
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
