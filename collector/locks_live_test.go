package collector

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/testenv"
)

// TestMySQLLocksSource runs the lock reader of the MySQL source against a
// private MariaDB started with a thread pool of one group (as issue 14
// asks): more CPU-bound statements than the pool has threads queue, and
// holdtime_mysql_thread_queue must show exactly the statements launched
// less the one running (the independent truth). On the same server two
// tags take two rows in opposite orders: holdtime_mysql_deadlocks_total
// must count that deadlock once, naming the victim (the client that got
// error 1213) and the other tag; a transaction holding a row shows in
// holdtime_mysql_locks under its tag. The clients and the collector use
// the extra port (one thread per connection), so only the busy statements
// queue.
func TestMySQLLocksSource(t *testing.T) {
	testenv.Require(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	extra := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv, err := testenv.StartMySQL(context.Background(), testenv.MySQLOptions{ExtraArgs: []string{
		"--thread-handling=pool-of-threads", "--thread-pool-size=1", "--thread-pool-oversubscribe=1",
		"--thread-pool-stall-limit=60000", "--thread-pool-dedicated-listener=ON", "--thread-pool-exact-stats=ON",
		"--extra-port=" + strconv.Itoa(extra), "--extra-max-connections=20",
	}})
	if errors.Is(err, testenv.ErrNotInstalled) {
		t.Skipf("starts its own MariaDB: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if srv.Flavor != testenv.MariaDB {
		t.Skip("the thread pool needs MariaDB")
	}
	cfgAt := func(port int) *mysql.Config {
		cfg := srv.Config("")
		if port > 0 {
			cfg.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
		return cfg
	}
	open := func(port int) *sql.DB {
		c, err := mysql.NewConnector(cfgAt(port))
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(c)
		t.Cleanup(func() { db.Close() })
		return db
	}
	ctx := context.Background()
	admin := open(extra)
	for _, q := range []string{
		"CREATE DATABASE locktest", "CREATE TABLE locktest.r (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO locktest.r VALUES (1, 0), (2, 0)",
		// The test's own server: the test turns lock output on, the
		// collector never does.
		"SET GLOBAL innodb_status_output_locks = ON",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	c, err := New(Config{MySQL: []MySQLConfig{{Name: "db", DSN: cfgAt(extra).FormatDSN(), Interval: 250 * time.Millisecond,
		LocksInterval: 300 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	polls := countPolls(c)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- c.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	polls.wait(t, "db", SourceMySQLLocks, 1)
	metric := func(name string, labels ...string) (float64, bool) {
		m, _ := gather(t, c)
		for series, v := range m {
			if !strings.HasPrefix(series, name+"{") {
				continue
			}
			all := true
			for _, l := range labels {
				all = all && strings.Contains(series, l)
			}
			if all {
				return v, true
			}
		}
		return 0, false
	}
	waitMetric := func(what string, cond func() bool) {
		t.Helper()
		for range 100 {
			if cond() {
				return
			}
			polls.wait(t, "db", SourceMySQLLocks, 1)
		}
		t.Fatalf("%s: not seen in 100 lock reads", what)
	}
	if v, ok := metric("holdtime_mysql_thread_queue", `queue="thread_pool"`); !ok || v != 0 {
		t.Errorf("idle thread queue %v %v, want 0 from the thread pool", v, ok)
	}
	if v, ok := metric("holdtime_mysql_lock_output_enabled"); !ok || v != 1 {
		t.Errorf("holdtime_mysql_lock_output_enabled %v %v", v, ok)
	}

	// A transaction holding a row, idle: its lock under its tag.
	holder := open(extra)
	hc, err := holder.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	hc.ExecContext(ctx, "BEGIN")
	if _, err := hc.ExecContext(ctx, "UPDATE locktest.r SET n = n + 1 WHERE id = 1 /* conn_tag:lock_holder */"); err != nil {
		t.Fatal(err)
	}
	waitMetric("lock_holder's record lock", func() bool {
		v, ok := metric("holdtime_mysql_locks", `conn_tag="lock_holder"`, `kind="record"`, `state="held"`)
		return ok && v >= 1
	})
	hc.ExecContext(ctx, "ROLLBACK")

	// A deadlock between two tags.
	a, b := open(extra), open(extra)
	ca, _ := a.Conn(ctx)
	cb, _ := b.Conn(ctx)
	defer ca.Close()
	defer cb.Close()
	ca.ExecContext(ctx, "BEGIN")
	cb.ExecContext(ctx, "BEGIN")
	if _, err := ca.ExecContext(ctx, "UPDATE locktest.r SET n = n + 1 WHERE id = 1 /* conn_tag:dl_first */"); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.ExecContext(ctx, "UPDATE locktest.r SET n = n + 1 WHERE id = 2 /* conn_tag:dl_second */"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan [2]any, 2)
	go func() {
		_, err := ca.ExecContext(ctx, "UPDATE locktest.r SET n = n + 1 WHERE id = 2 /* conn_tag:dl_first */")
		errs <- [2]any{"dl_first", err}
	}()
	time.Sleep(200 * time.Millisecond) // let dl_first wait first (the order is the scenario, not a race)
	_, errB := cb.ExecContext(ctx, "UPDATE locktest.r SET n = n + 1 WHERE id = 1 /* conn_tag:dl_second */")
	errs <- [2]any{"dl_second", errB}
	victim, other := "", ""
	for range 2 {
		r := <-errs
		if err, _ := r[1].(error); mysqlErrNumber(err) == 1213 {
			victim = r[0].(string)
		} else {
			other = r[0].(string)
		}
	}
	ca.ExecContext(ctx, "ROLLBACK")
	cb.ExecContext(ctx, "ROLLBACK")
	if victim == "" {
		t.Fatal("no deadlock (error 1213) between the two clients")
	}
	waitMetric("the deadlock", func() bool {
		_, ok := metric("holdtime_mysql_deadlocks_total", `victim_tag="`+victim+`"`, `other_tag="`+other+`"`)
		return ok
	})
	for range 3 {
		polls.wait(t, "db", SourceMySQLLocks, 1)
	}
	if v, _ := metric("holdtime_mysql_deadlocks_total", `victim_tag="`+victim+`"`, `other_tag="`+other+`"`); v != 1 {
		t.Errorf("the deadlock counted %v times, want once", v)
	}

	// The thread queue: busy statements on the pooled port.
	const busy = 4
	app := open(0)
	app.SetMaxOpenConns(busy)
	conns := make([]*sql.Conn, busy)
	ids := make([]int64, busy)
	for i := range conns {
		if conns[i], err = app.Conn(ctx); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
		if err := conns[i].QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			_, _ = conns[i].ExecContext(ctx, "DO BENCHMARK(10000000000, MD5('holdtime')) /* conn_tag:cpu_burner */")
		})
	}
	defer func() {
		for _, id := range ids {
			_, _ = admin.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
		}
		wg.Wait()
	}()
	waitMetric("statements queued for a thread", func() bool {
		v, ok := metric("holdtime_mysql_thread_queue", `queue="thread_pool"`)
		return ok && v == busy-1
	})
	if v, ok := metric("holdtime_mysql_thread_queue_oldest_seconds"); !ok || v <= 0 {
		t.Errorf("oldest queued %v %v", v, ok)
	}
	if v, ok := metric("holdtime_mysql_threads_connected"); !ok || v < busy {
		t.Errorf("threads connected %v %v", v, ok)
	}
	// The lock reader's own statements are no tag's.
	c.st.mu.Lock()
	untagged := c.st.series[seriesKey{"db", SourceMySQL}].tags[UntaggedTag]
	c.st.mu.Unlock()
	if untagged != nil && untagged.total.stmts > 0 {
		t.Errorf("the MySQL source counted %v untagged statements: the lock reader's?", untagged.total.stmts)
	}
}
