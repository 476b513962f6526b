package locks_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/locks"
	"github.com/holdtime/holdtime/testenv"
)

// TestThreadPoolQueue starts MariaDB with a thread pool of one group and a
// stall limit long enough that a busy worker is never helped, runs more
// CPU-bound statements than the pool has threads, and reads the queue from
// the extra port (one thread per connection, so the reader is not queued
// itself). The statements launched minus the one running is the
// independent truth for the queue. With thread_pool_dedicated_listener
// OFF (the default) the listener holds one request outside the queue: 2 of
// the 3 showed there.
func TestThreadPoolQueue(t *testing.T) {
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
		"--extra-port=" + strconv.Itoa(extra), "--extra-max-connections=10",
	}})
	if errors.Is(err, testenv.ErrNotInstalled) {
		t.Skipf("the thread pool test starts its own MariaDB: %v", err) // HOLDTIME_MYSQL_DSN alone
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if srv.Flavor != testenv.MariaDB {
		t.Skip("the thread pool test needs MariaDB")
	}
	open := func(port int) *sql.DB {
		cfg := srv.Config("")
		if port > 0 {
			cfg.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
		c, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(c)
		t.Cleanup(func() { db.Close() })
		return db
	}
	monitor := open(extra)
	r, err := locks.New(monitor, locks.Config{ParseTag: conntag.ParseTag})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// With a pool of one thread, the monitor's own statement can be seen
	// queued for a moment on a busy machine (CI: Queued 1, Connections 1,
	// under a load of other suites): the idle server is read until it
	// settles, for at most 5 s, and must then show an empty queue.
	var idle locks.Saturation
	for deadline := time.Now().Add(5 * time.Second); ; {
		idle, err = r.ReadSaturation(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if idle.Queued == 0 || time.Now().After(deadline) {
			break
		}
	}
	if idle.QueueSource != locks.QueueThreadPool || !idle.QueueKnown || idle.Queued != 0 || idle.ThreadPool == nil ||
		idle.ThreadPool.Size != 1 || idle.ThreadHandling != "pool-of-threads" {
		t.Fatalf("idle saturation: %+v pool %+v", idle, idle.ThreadPool)
	}
	// The busy statements, on the pooled port; each on its own connection.
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
			// Minutes of CPU unless killed; ends with "query interrupted".
			_, _ = conns[i].ExecContext(ctx, "DO BENCHMARK(10000000000, MD5('holdtime'))")
		})
	}
	defer func() {
		for _, id := range ids {
			// KILL QUERY would not stop a statement still queued: it would
			// start afterwards and run for minutes.
			_, _ = monitor.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
		}
		wg.Wait()
	}()
	var s locks.Saturation
	waitFor(t, "statements queued in the thread pool", func() bool {
		s, err = r.ReadSaturation(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s.Queued == busy-1
	})
	if s.ThreadPool.ActiveThreads != 1 || s.ThreadPool.OldestQueuedSeconds <= 0 || !s.QueueKnown {
		t.Errorf("saturation with %d busy statements: %+v pool %+v; want 1 active, %d queued", busy, s, *s.ThreadPool, busy-1)
	}
	// A full Read carries the same figure and the hint.
	snap, err := r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := hintOf(snap, locks.HintThreadQueue, "")
	if snap.Saturation.Queued != busy-1 || h == nil || h.Value != busy-1 {
		t.Errorf("snapshot saturation %+v, hint %+v", snap.Saturation, h)
	}
	t.Logf("queue: %+v; hint: %s", *s.ThreadPool, h.Text)
}
