package locks_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/locks"
	"github.com/holdtime/holdtime/testenv"
)

// TestMain stops the server the package's tests share.
func TestMain(m *testing.M) { testenv.Main(m) }

// env is one test's database, an untagged pool for setup, a conntag pool
// for the workload and a Reader.
type env struct {
	t      testing.TB
	d      *testenv.Database
	admin  *sql.DB // untagged, for setup and checks
	tagged *sql.DB // every statement carries its context's tag
	reader *locks.Reader
}

// setup creates the test's database and turns lock output on (MariaDB) for
// the test, restoring it afterwards.
func setup(t testing.TB) *env {
	t.Helper()
	d := testenv.NewDatabase(t)
	e := &env{t: t, d: d, admin: d.Open(t)}
	cfg := d.Config()
	cfg.Params = map[string]string{"innodb_lock_wait_timeout": "5"}
	// As the reservation engine's docs ask: one round trip per statement,
	// and statement text in performance_schema's history (MariaDB records
	// none for server-side prepared statements, so their tags are unknown
	// once they ended).
	cfg.InterpolateParams = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.tagged = conntag.OpenDB(connector, conntag.WithoutMetrics())
	t.Cleanup(func() { e.tagged.Close() })
	e.reader, err = locks.New(d.Target.Admin(), locks.Config{ParseTag: conntag.ParseTag})
	if err != nil {
		t.Fatal(err)
	}
	if d.Target.Flavor == testenv.MariaDB {
		e.lockOutput(true)
	}
	return e
}

// lockOutput sets innodb_status_output_locks for the rest of the test.
func (e *env) lockOutput(on bool) {
	e.t.Helper()
	ctx := context.Background()
	was, err := e.reader.LockOutputEnabled(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.reader.SetLockOutput(ctx, on); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.reader.SetLockOutput(context.Background(), was) })
}

func (e *env) exec(q string, args ...any) {
	e.t.Helper()
	if _, err := e.admin.ExecContext(context.Background(), q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

// tx is an open transaction on its own connection, with a tag.
type tx struct {
	t    testing.TB
	ctx  context.Context
	conn *sql.Conn
	tx   *sql.Tx
	id   int64 // CONNECTION_ID()
}

// begin opens a transaction tagged tag at the isolation level.
func (e *env) begin(tag string, level sql.IsolationLevel) *tx {
	e.t.Helper()
	ctx := conntag.WithTag(context.Background(), tag)
	conn, err := e.tagged.Conn(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	x := &tx{t: e.t, ctx: ctx, conn: conn}
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&x.id); err != nil {
		e.t.Fatal(err)
	}
	x.tx, err = conn.BeginTx(ctx, &sql.TxOptions{Isolation: level})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(x.end)
	return x
}

func (x *tx) end() {
	_ = x.tx.Rollback()
	_ = x.conn.Close()
}

// rows runs a query in the transaction and returns how many rows it read.
func (x *tx) rows(q string, args ...any) int {
	x.t.Helper()
	rs, err := x.tx.QueryContext(x.ctx, q, args...)
	if err != nil {
		x.t.Fatalf("%s: %v", q, err)
	}
	defer rs.Close()
	n := 0
	for rs.Next() {
		n++
	}
	if err := rs.Err(); err != nil {
		x.t.Fatal(err)
	}
	return n
}

func (x *tx) exec(q string, args ...any) error {
	_, err := x.tx.ExecContext(x.ctx, q, args...)
	return err
}

// read takes a snapshot.
func (e *env) read() *locks.Snapshot {
	e.t.Helper()
	s, err := e.reader.Read(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// capture saves the server's current status text as testdata/name when
// HOLDTIME_LOCKS_CAPTURE is set to a directory.
func (e *env) capture(name string) {
	e.t.Helper()
	dir := os.Getenv("HOLDTIME_LOCKS_CAPTURE")
	if dir == "" {
		return
	}
	var text string
	if err := e.admin.QueryRowContext(context.Background(), "SHOW ENGINE INNODB STATUS").Scan(new(string), new(string), &text); err != nil {
		e.t.Fatal(err)
	}
	// The database name is random per run: make captures stable.
	text = strings.ReplaceAll(text, e.d.Name, "shop")
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// captureGzip is capture, gzipped (for texts near the 1 MiB cut).
func (e *env) captureGzip(name string) {
	e.t.Helper()
	dir := os.Getenv("HOLDTIME_LOCKS_CAPTURE")
	if dir == "" {
		return
	}
	e.capture(name)
	path := filepath.Join(dir, name)
	raw, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(raw)
	zw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// trxOf finds the snapshot's transaction of a session.
func trxOf(s *locks.Snapshot, thread int64) *locks.Transaction {
	for i := range s.Transactions {
		if s.Transactions[i].ThreadID == thread {
			return &s.Transactions[i]
		}
	}
	return nil
}

// ratioOf finds the row-locks-per-row figure of a tag and table.
func ratioOf(s *locks.Snapshot, tag, table string) *locks.RowLockRatio {
	for i := range s.RowLocksPerRow {
		if r := &s.RowLocksPerRow[i]; r.Tag == tag && r.Table == table {
			return r
		}
	}
	return nil
}

func hintOf(s *locks.Snapshot, kind, tag string) *locks.Hint {
	for i := range s.Hints {
		if h := &s.Hints[i]; h.Kind == kind && h.Tag == tag {
			return h
		}
	}
	return nil
}

// rowsOf sums a transaction's locked rows of a kind (any table).
func rowsOf(t *locks.Transaction, kinds ...locks.Kind) int {
	n := 0
	for _, l := range t.Locks {
		for _, k := range kinds {
			if l.Kind == k && !l.Waiting {
				n += l.Rows
			}
		}
	}
	return n
}

// readUntil reads snapshots until cond holds for one (MariaDB serves
// INNODB_TRX from a cache up to 100 ms old) and returns it.
func (e *env) readUntil(what string, cond func(*locks.Snapshot) bool) *locks.Snapshot {
	e.t.Helper()
	var s *locks.Snapshot
	waitFor(e.t, what, func() bool {
		s = e.read()
		return cond(s)
	})
	return s
}

// waitFor polls cond until it holds or 20 s pass. It polls every 150 ms:
// the server refreshes INNODB_TRX (and INNODB_LOCKS, INNODB_LOCK_WAITS)
// only after 100 ms without a read of them, so a faster poll would read
// the same stale cache forever.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// mysqlErr returns the server error number of err, 0 if none.
func mysqlErr(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}
