package collector

import (
	"context"
	"database/sql"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newServerTarget returns a MySQL source on db's server, driven by the test
// (poll calls), not by a goroutine.
func newServerTarget(t *testing.T, dsn string, interval time.Duration) (*Collector, *mysqlTarget) {
	t.Helper()
	c, err := New(Config{MySQL: []MySQLConfig{{Name: "db", DSN: dsn, Interval: interval}}})
	if err != nil {
		t.Fatal(err)
	}
	m := c.mysqls[0]
	t.Cleanup(func() { m.close() })
	return c, m
}

// pollEvery polls m every interval until stop is closed, then once more.
func pollEvery(t *testing.T, m *mysqlTarget, interval time.Duration, stop <-chan struct{}) int {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	polls := 0
	for {
		if err := m.poll(context.Background()); err != nil {
			t.Errorf("poll: %v", err)
		}
		polls++
		select {
		case <-stop:
			if err := m.poll(context.Background()); err != nil {
				t.Errorf("poll: %v", err)
			}
			return polls + 1
		case <-tick.C:
		}
	}
}

// TestServerSourceWorkload runs a known workload on MariaDB: tag
// checkout_hog holds transactions open around a row lock, tag browse runs
// short statements. The server source's per-tag hold must be within 15% of
// what the clients measured.
func TestServerSourceWorkload(t *testing.T) {
	d := testenv.NewDatabase(t)
	db := d.Open(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE quote (id INT PRIMARY KEY, n INT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	db.ExecContext(ctx, "INSERT INTO quote VALUES (1, 0), (2, 0)")
	c, m := newServerTarget(t, d.DSN(), MinServerInterval)

	var mu sync.Mutex
	held := map[string]time.Duration{}
	stmts := map[string]int{}
	run := func(tag string, body func(conn *sql.Conn) error) func() {
		return func() {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			start := time.Now()
			if err := body(conn); err != nil {
				t.Error(err)
			}
			mu.Lock()
			held[tag] += time.Since(start)
			mu.Unlock()
		}
	}
	hog := func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, "/* conn_tag:checkout_hog */ SELECT n FROM quote WHERE id = 1 FOR UPDATE"); err != nil {
			return err
		}
		time.Sleep(700 * time.Millisecond) // the workload: idle inside the transaction
		if _, err := conn.ExecContext(ctx, "/* conn_tag:checkout_hog */ UPDATE quote SET n = n + 1 WHERE id = 1"); err != nil {
			return err
		}
		_, err := conn.ExecContext(ctx, "COMMIT")
		mu.Lock()
		stmts["checkout_hog"] += 2
		mu.Unlock()
		return err
	}
	browse := func(conn *sql.Conn) error {
		_, err := conn.ExecContext(ctx, "/* conn_tag:browse */ SELECT SLEEP(0.04)")
		mu.Lock()
		stmts["browse"]++
		mu.Unlock()
		return err
	}
	// The collector counts from its first poll on.
	if err := m.poll(ctx); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan int)
	go func() { done <- pollEvery(t, m, MinServerInterval, stop) }()
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 4 {
			run("checkout_hog", hog)()
		}
	})
	wg.Go(func() {
		for range 60 {
			run("browse", browse)()
			time.Sleep(10 * time.Millisecond) // the workload: a pause between statements
		}
	})
	wg.Wait()
	close(stop)
	polls := <-done
	t.Logf("%d polls, %d queries each", polls, serverQueriesPerPoll)
	for tag, want := range held {
		sr := c.st.series[seriesKey{"db", SourceMySQL}]
		e := sr.tags[tag]
		if e == nil {
			t.Errorf("%s: nothing attributed", tag)
			continue
		}
		t.Logf("%-14s client %.3f s  server source %.3f s (%+.1f%%)  idle %.3f  statements %v/%d",
			tag, want.Seconds(), e.total.Hold, pct(e.total.Hold, want.Seconds()), e.total.Idle, e.total.Stmts, stmts[tag])
		if math.Abs(pct(e.total.Hold, want.Seconds())) > 15 {
			t.Errorf("%s: server-side hold %.3f s, client %.3f s: more than 15%% off", tag, e.total.Hold, want.Seconds())
		}
	}
	if e := c.st.series[seriesKey{"db", SourceMySQL}].tags[UnknownTag]; e != nil && e.total.Hold > 0.1 {
		t.Errorf("%.3f s unknown", e.total.Hold)
	}
}

// TestServerLockWaits makes tag waiter block on a row tag blocker holds.
func TestServerLockWaits(t *testing.T) {
	d := testenv.NewDatabase(t)
	db := d.Open(t)
	ctx := context.Background()
	db.ExecContext(ctx, "CREATE TABLE item (id INT PRIMARY KEY) ENGINE=InnoDB")
	db.ExecContext(ctx, "INSERT INTO item VALUES (1)")
	c, m := newServerTarget(t, d.DSN(), time.Second)
	blocker, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close()
	tx, err := blocker.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "/* conn_tag:blocker */ SELECT id FROM item WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	waiter, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	waiter.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 20")
	waitDone := make(chan error, 1)
	go func() {
		_, err := waiter.ExecContext(ctx, "/* conn_tag:waiter */ SELECT id FROM item WHERE id = 1 FOR UPDATE")
		waitDone <- err
	}()
	var waits map[[2]string]int
	var trx map[string]trxFigures
	for i := 0; i < 50; i++ { // bounded: the wait shows within a few polls
		if err := m.poll(ctx); err != nil {
			t.Fatal(err)
		}
		g := c.st.series[seriesKey{"db", SourceMySQL}].gauges
		waits, trx = g.waits, g.trx
		if waits[[2]string{"waiter", "blocker"}] == 1 {
			break
		}
		// The waiter reaching InnoDB cannot be signalled, and polls closer
		// than 100 ms would read InnoDB's frozen cache.
		time.Sleep(MinServerInterval)
	}
	t.Logf("lock waits %v, transactions %v", waits, trx)
	if waits[[2]string{"waiter", "blocker"}] != 1 {
		t.Errorf("lock waits %v; want waiter blocked by blocker", waits)
	}
	if trx["blocker"].count != 1 || trx["blocker"].rowsLocked < 1 {
		t.Errorf("blocker's transaction: %+v", trx["blocker"])
	}
	tx.Commit()
	if err := <-waitDone; err != nil {
		t.Errorf("waiter: %v", err)
	}
}

// TestServerDriverStatementsNameNothing runs what a driver sends around a
// tagged transaction on a pooled session that served another tag before:
// SET TRANSACTION ISOLATION LEVEL, START TRANSACTION and conntag's SELECT
// CONNECTION_ID(), all untagged. The time held must go to the transaction's
// own tag, not to "untagged", "unknown" or the earlier tag.
func TestServerDriverStatementsNameNothing(t *testing.T) {
	d := testenv.NewDatabase(t)
	db := d.Open(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE cart (id INT PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	c, m := newServerTarget(t, d.DSN(), MinServerInterval)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec := func(q string) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.poll(ctx); err != nil { // the collector counts from its first poll on
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan int)
	go func() { done <- pollEvery(t, m, MinServerInterval, stop) }()

	exec("/* conn_tag:earlier */ SELECT COUNT(*) FROM cart") // the pooled session's previous user
	start := time.Now()
	exec("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
	exec("START TRANSACTION")
	exec("/* conn_tag:quote */ SELECT COUNT(*) FROM cart FOR UPDATE")
	exec("SELECT CONNECTION_ID()")
	time.Sleep(1200 * time.Millisecond) // the workload: holding the transaction, idle
	exec("COMMIT")
	held := time.Since(start)
	close(stop)
	<-done

	sr := c.st.series[seriesKey{"db", SourceMySQL}]
	got := func(tag string) float64 {
		if e := sr.tags[tag]; e != nil {
			return e.total.Hold
		}
		return 0
	}
	t.Logf("held %.3f s: quote %.3f, untagged %.3f, unknown %.3f, earlier %.3f",
		held.Seconds(), got("quote"), got(UntaggedTag), got(UnknownTag), got("earlier"))
	if math.Abs(pct(got("quote"), held.Seconds())) > 25 {
		t.Errorf("quote hold %.3f s, want about %.3f s", got("quote"), held.Seconds())
	}
	for _, tag := range []string{"earlier", UnknownTag, UntaggedTag} {
		if got(tag) > 0.3 {
			t.Errorf("%.3f s went to %s", got(tag), tag)
		}
	}
}

func TestDriverStatement(t *testing.T) {
	for q, want := range map[string]bool{
		"SET TRANSACTION ISOLATION LEVEL READ COMMITTED": true,
		"set session transaction read only":              true,
		"SET NAMES utf8mb4":                              true,
		"SELECT CONNECTION_ID()":                         true,
		"select connection_id() ":                        true,
		"SET @x = 1":                                     false,
		"SELECT CONNECTION_ID(), 1":                      false,
		"SELECT 1":                                       false,
		"/* hostgroup=1 */ SET TRANSACTION ISOLATION LEVEL SERIALIZABLE": true,
	} {
		if got := driverStatement([]byte(q)); got != want {
			t.Errorf("driverStatement(%q) = %v, want %v", q, got, want)
		}
	}
}

// TestTimerRestartedTellsARestartFromTheTimersRate: a server whose timer ran
// less than the collector's clock between two polls restarted in between,
// even when it came back within the second that Uptime cannot resolve.
func TestTimerRestartedTellsARestartFromTheTimersRate(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const s = uint64(time.Second / time.Nanosecond * 1000) // picoseconds
	cases := []struct {
		name      string
		prev, now uint64
		gap       time.Duration // from the last poll's answer to this poll's query
		want      bool
	}{
		{"same server, timer ran as the clock", 100 * s, 101 * s, time.Second, false},
		{"same server, timer ran a little slower", 100 * s, 101*s - s/20, time.Second, false},
		{"same server after an hour of failed polls", 100 * s, 3700*s - s/10, time.Hour, false},
		{"restart half a second after the last poll", 100 * s, s / 2, time.Second, true},
		{"restart into an older-looking server", 5 * s, 5*s + s/2, time.Second, true},
		{"restart after an hour down", 100 * s, 1800 * s, time.Hour, true},
		{"no timer read before", 0, s, time.Second, false},
	}
	for _, c := range cases {
		got := timerRestarted(c.prev, t0, c.now, t0.Add(c.gap))
		if got != c.want {
			t.Errorf("%s: timerRestarted = %v, want %v", c.name, got, c.want)
		}
	}
}
