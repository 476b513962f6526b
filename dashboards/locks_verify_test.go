package dashboards_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/dashboards"
	"github.com/holdtime/holdtime/testenv"
)

// needsLocks says whether a panel's query needs what only a server with
// lock output on, a deadlock and a thread pool show: verified by
// TestLockPanelsReturnData, on a server of its own.
func needsLocks(q dashboards.Query) bool {
	for _, m := range []string{"holdtime_mysql_locks", "holdtime_mysql_deadlocks_total", "holdtime_mysql_thread_queue"} {
		if strings.Contains(q.Expr, m) {
			return true
		}
	}
	return false
}

// TestLockPanelsReturnData starts a MariaDB of its own with a thread pool
// of one group and innodb_status_output_locks=ON, holds a row lock, makes
// one deadlock between two tags and queues CPU-bound statements for the
// pool's thread, has a real Prometheus scrape the collector, and evaluates
// every query of the lock, deadlock and thread-queue panels: each must
// return data.
func TestLockPanelsReturnData(t *testing.T) {
	requireTool(t, testenv.PrometheusAvailable(), "prometheus is not on PATH: install it with `sudo apt-get install -y prometheus` (or .ci/install-deps prometheus)")
	requireTool(t, testenv.Available(), "no MySQL-compatible server: install mariadb-server or set "+testenv.DSNEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	extra := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv, err := testenv.StartMySQL(ctx, testenv.MySQLOptions{ExtraArgs: []string{
		"--thread-handling=pool-of-threads", "--thread-pool-size=1", "--thread-pool-oversubscribe=1",
		"--thread-pool-stall-limit=60000", "--thread-pool-dedicated-listener=ON", "--thread-pool-exact-stats=ON",
		"--extra-port=" + strconv.Itoa(extra), "--extra-max-connections=20", "--innodb-status-output-locks=ON",
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
	admin := open(extra)
	for _, q := range []string{"CREATE DATABASE lk", "CREATE TABLE lk.r (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO lk.r VALUES (1, 0), (2, 0), (3, 0)"} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	reg := prometheus.NewRegistry()
	col, err := collector.New(collector.Config{Registerer: reg, MySQL: []collector.MySQLConfig{{Name: "mariadb",
		DSN: cfgAt(extra).FormatDSN(), Interval: 250 * time.Millisecond, LocksInterval: 300 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	colCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- col.Run(colCtx) }()
	t.Cleanup(func() { stop(); <-done })
	colServer := httptest.NewServer(col.Handler())
	t.Cleanup(colServer.Close)
	prom, err := testenv.StartPrometheus(ctx, testenv.PrometheusOptions{Targets: []string{hostPort(t, colServer.URL)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prom.Close() })

	// A row lock held for the whole test.
	holder, err := open(extra).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	holder.ExecContext(ctx, "BEGIN")
	if _, err := holder.ExecContext(ctx, "UPDATE lk.r SET n = n + 1 WHERE id = 3 /* conn_tag:lock_holder */"); err != nil {
		t.Fatal(err)
	}
	// One deadlock between two tags.
	ca, _ := open(extra).Conn(ctx)
	cb, _ := open(extra).Conn(ctx)
	defer ca.Close()
	defer cb.Close()
	ca.ExecContext(ctx, "BEGIN")
	cb.ExecContext(ctx, "BEGIN")
	ca.ExecContext(ctx, "UPDATE lk.r SET n = n + 1 WHERE id = 1 /* conn_tag:dl_a */")
	cb.ExecContext(ctx, "UPDATE lk.r SET n = n + 1 WHERE id = 2 /* conn_tag:dl_b */")
	aDone := make(chan error, 1)
	go func() {
		_, err := ca.ExecContext(ctx, "UPDATE lk.r SET n = n + 1 WHERE id = 2 /* conn_tag:dl_a */")
		aDone <- err
	}()
	time.Sleep(200 * time.Millisecond) // dl_a waits first: the scenario's order
	_, errB := cb.ExecContext(ctx, "UPDATE lk.r SET n = n + 1 WHERE id = 1 /* conn_tag:dl_b */")
	errA := <-aDone
	ca.ExecContext(ctx, "ROLLBACK")
	cb.ExecContext(ctx, "ROLLBACK")
	if errA == nil && errB == nil {
		t.Fatal("no deadlock")
	}
	// CPU-bound statements queued for the pool's one thread.
	const busy = 3
	app := open(0)
	app.SetMaxOpenConns(busy)
	// Every connection made before any statement runs: once the pool's
	// thread is busy, a new connection's login queues too.
	var ids []int64
	var conns []*sql.Conn
	for range busy {
		cn, err := app.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer cn.Close()
		var id int64
		if err := cn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		conns = append(conns, cn)
	}
	var wg sync.WaitGroup
	for _, cn := range conns {
		wg.Go(func() { _, _ = cn.ExecContext(ctx, "DO BENCHMARK(10000000000, MD5('holdtime')) /* conn_tag:cpu */") })
	}
	defer func() {
		for _, id := range ids {
			_, _ = admin.ExecContext(context.Background(), fmt.Sprintf("KILL %d", id))
		}
		wg.Wait()
	}()

	queries, err := dashboards.Queries()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, q := range queries {
		if !needsLocks(q) {
			continue
		}
		n++
		qctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		_, err := prom.WaitForSeries(qctx, dashboards.Substitute(q.Expr, "1m"))
		cancel()
		if err != nil {
			t.Errorf("dashboard %s, panel %q, query %s returns no data: %s\n\t%v", q.Dashboard, q.Panel, q.RefID, dashboards.Substitute(q.Expr, "1m"), err)
		}
	}
	if n < 4 {
		t.Errorf("%d lock, deadlock and thread-queue queries: the panels are gone?", n)
	}
	t.Logf("%d lock, deadlock and thread-queue queries returned data", n)
}
