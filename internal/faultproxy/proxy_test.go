package faultproxy

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/holdtime/holdtime/testenv"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// setup returns a proxy in front of a fresh database, a pool through the
// proxy and a pool straight to the server (the independent view).
func setup(t *testing.T) (*Proxy, *sql.DB, *sql.DB) {
	t.Helper()
	d := testenv.NewDatabase(t)
	direct := d.Open(t)
	cfg := d.Config()
	p, err := Listen(cfg.Net, cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	cfg.Net, cfg.Addr = "tcp", p.Addr()
	cfg.Logger = &mysql.NopLogger{} // the lost connections are the point
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxied := sql.OpenDB(connector)
	t.Cleanup(func() { proxied.Close() })
	if _, err := direct.ExecContext(t.Context(), `CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	return p, proxied, direct
}

func insertAndCommit(ctx context.Context, db *sql.DB, id int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (?)`, id); err != nil {
		return err
	}
	return tx.Commit()
}

func rowExists(t *testing.T, db *sql.DB, id int) bool {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM t WHERE id = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestFaults: a lost reply leaves the transaction committed, a drop before
// the COMMIT leaves it rolled back, and the client sees the same error.
func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		action    Action
		committed bool
	}{{LoseReply, true}, {DropBefore, false}} {
		t.Run(tc.action.String(), func(t *testing.T) {
			p, proxied, direct := setup(t)
			ctx := t.Context()
			if err := insertAndCommit(ctx, proxied, 1); err != nil {
				t.Fatalf("commit with no fault armed: %v", err)
			}
			inj := p.Inject(Fault{Action: tc.action})
			err := insertAndCommit(ctx, proxied, 2)
			if !errors.Is(err, mysql.ErrInvalidConn) {
				t.Fatalf("commit through %v = %v, want mysql.ErrInvalidConn", tc.action, err)
			}
			if inj.Fired() != 1 {
				t.Fatalf("fired %d times, want 1", inj.Fired())
			}
			select {
			case <-inj.Done():
			default:
				t.Fatal("Done not closed after the fault fired its one time")
			}
			if got := rowExists(t, direct, 2); got != tc.committed {
				t.Fatalf("row committed = %v, want %v", got, tc.committed)
			}
			// Disarmed after one: the next commit goes through.
			if err := insertAndCommit(ctx, proxied, 3); err != nil || !rowExists(t, direct, 3) {
				t.Fatalf("commit after the fault: %v", err)
			}
			if inj.Fired() != 1 {
				t.Fatalf("fired %d times after its budget, want 1", inj.Fired())
			}
		})
	}
}

// TestMatchOtherStatements: a fault can select any statement, here one
// that is not a COMMIT, and leaves the others alone.
func TestMatchOtherStatements(t *testing.T) {
	p, proxied, direct := setup(t)
	ctx := t.Context()
	inj := p.Inject(Fault{Action: LoseReply, Match: func(c Command) bool {
		return c.Code == ComQuery && c.ConnectionID != 0 && normalize(c.Query) == "INSERT INTO t VALUES (7)"
	}})
	if _, err := proxied.ExecContext(ctx, `/* conn_tag:x */ SELECT 1`); err != nil {
		t.Fatal(err)
	}
	_, err := proxied.ExecContext(ctx, `INSERT INTO t VALUES (7)`)
	if !errors.Is(err, mysql.ErrInvalidConn) || inj.Fired() != 1 {
		t.Fatalf("autocommit insert = %v, fired %d; want ErrInvalidConn, 1", err, inj.Fired())
	}
	if !rowExists(t, direct, 7) {
		t.Fatal("an autocommit statement whose reply was lost did not take effect")
	}
}

// TestTimesAndCancel: Times bounds the faults; a negative Times faults every
// match until Cancel.
func TestTimesAndCancel(t *testing.T) {
	p, proxied, _ := setup(t)
	ctx := t.Context()
	twice := p.Inject(Fault{Action: DropBefore, Times: 2})
	for i := range 3 {
		err := insertAndCommit(ctx, proxied, 10+i)
		if (i < 2) != (err != nil) {
			t.Fatalf("commit %d = %v (fault fired %d times, budget 2)", i, err, twice.Fired())
		}
	}
	always := p.Inject(Fault{Action: DropBefore, Times: -1})
	for i := range 3 {
		if err := insertAndCommit(ctx, proxied, 20+i); err == nil {
			t.Fatalf("commit %d went through an unlimited fault", i)
		}
	}
	always.Cancel()
	if err := insertAndCommit(ctx, proxied, 30); err != nil {
		t.Fatalf("commit after Cancel: %v", err)
	}
	if always.Fired() != 3 {
		t.Fatalf("unlimited fault fired %d times, want 3", always.Fired())
	}
	select {
	case <-always.Done():
		t.Fatal("Done closed for an unlimited fault")
	default:
	}
}

// TestCloseEndsEverything: Close with connections idle, mid-statement and
// waiting for a lost reply returns only when every goroutine has ended.
func TestCloseEndsEverything(t *testing.T) {
	d := testenv.NewDatabase(t)
	direct := d.Open(t)
	if _, err := direct.ExecContext(t.Context(), `CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()
	cfg := d.Config()
	p, err := Listen(cfg.Net, cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = p.Addr()
	cfg.Logger = &mysql.NopLogger{}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxIdleConns(4)
	ctx := t.Context()
	// Idle connections in the pool.
	var conns []*sql.Conn
	for range 3 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	// One statement running on the server when the proxy closes.
	sleeping := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(ctx, `SELECT SLEEP(30)`)
		sleeping <- err
	}()
	waitFor(t, func() bool {
		var n int
		err := direct.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE info = 'SELECT SLEEP(30)'`).Scan(&n)
		return err == nil && n == 1
	})
	if n := p.Conns(); n < 2 {
		t.Fatalf("%d connections open through the proxy, want at least 2", n)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-sleeping; err == nil {
		t.Fatal("a statement survived the proxy's Close")
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("%d connections left after Close", n)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	db.Close()
	goleak.VerifyNone(t, before)
}

// TestConcurrentFaults: many clients commit at once while a fault hits a
// share of the commits; every commit either went through or failed with a
// lost connection, and the server holds exactly the committed rows plus
// those whose reply was lost. Run with -race.
func TestConcurrentFaults(t *testing.T) {
	p, proxied, direct := setup(t)
	ctx := t.Context()
	var mu sync.Mutex
	var n int
	every3rd := func(c Command) bool {
		if c.Code != ComQuery || normalize(c.Query) != "COMMIT" {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		n++
		return n%3 == 0
	}
	lost := p.Inject(Fault{Action: LoseReply, Match: every3rd, Times: -1})
	var wg sync.WaitGroup
	var okMu sync.Mutex
	ok, failed := 0, 0
	for w := range 8 {
		wg.Go(func() {
			for i := range 20 {
				err := insertAndCommit(ctx, proxied, 1000*w+i)
				okMu.Lock()
				if err == nil {
					ok++
				} else if errors.Is(err, mysql.ErrInvalidConn) {
					failed++
				} else {
					t.Error(err)
				}
				okMu.Unlock()
			}
		})
	}
	wg.Wait()
	lost.Cancel()
	var rows int
	if err := direct.QueryRowContext(ctx, `SELECT COUNT(*) FROM t`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if failed != lost.Fired() || rows != ok+failed || failed == 0 {
		t.Fatalf("%d ok, %d failed, %d faults fired, %d rows: want rows = ok + failed = ok + fired, fired > 0",
			ok, failed, lost.Fired(), rows)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
