package collector

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// TestLiveJoinNamesAFreshBackendsFirstIdleTransaction: backends ProxySQL
// opens while the collector runs are in no server read made before them.
// Their first idle transactions (shorter than the MySQL poll, so that a
// read rarely falls inside one) are named by the join, each to its own
// tag, none unknown.
func TestLiveJoinNamesAFreshBackendsFirstIdleTransaction(t *testing.T) {
	skipTimingUnderRace(t)
	testenv.RequireProxySQL(t)
	d := testenv.NewDatabase(t)
	ctx := context.Background()
	if _, err := d.Open(t).ExecContext(ctx, "CREATE TABLE carts (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	// No warm-up: ProxySQL opens a backend for each transaction below.
	px, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	c, err := New(Config{
		ProxySQL: []ProxySQLConfig{{Name: "px", DSN: px.AdminDSN(), ProcesslistInterval: 50 * time.Millisecond, TagGrace: time.Second}},
		MySQL:    []MySQLConfig{{Name: "db", DSN: d.Target.Config("").FormatDSN(), Interval: 250 * time.Millisecond, LocksInterval: -1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	polls := countPolls(c)
	credits := &creditLog{}
	c.proxies[0].sessions.onCredit = credits.add
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	polls.wait(t, "db", SourceMySQL, 2)
	polls.wait(t, "px", SourceProxySQLProcesslist, 2)

	connector, err := mysql.NewConnector(px.AppConfig())
	if err != nil {
		t.Fatal(err)
	}
	db := conntag.OpenDB(connector, conntag.WithTracerProvider(tp), conntag.WithSessionID(), conntag.WithoutMetrics())
	t.Cleanup(func() { db.Close() })
	const n = 8
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	// Right after a MySQL poll (its read lists none of the backends to
	// come), every client takes a ProxySQL session, then all begin at
	// once, each on a backend ProxySQL opens for it: the read before each
	// first idle transaction does not list its backend.
	polls.wait(t, "db", SourceMySQL, 1)
	conns := make([]*sql.Conn, n)
	for i := range conns {
		if conns[i], err = db.Conn(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tags := make([]string, n)
	var wg sync.WaitGroup
	for i, conn := range conns {
		tags[i] = fmt.Sprintf("fresh%d", i)
		wg.Go(func() {
			defer conn.Close()
			tctx := conntag.WithTag(ctx, tags[i])
			tx, err := conn.BeginTx(tctx, nil)
			if err != nil {
				t.Error(err)
				return
			}
			var x int
			if err := tx.QueryRowContext(tctx, "SELECT COUNT(*) FROM carts").Scan(&x); err != nil {
				t.Error(err)
			}
			time.Sleep(120 * time.Millisecond) // idle in the transaction: shorter than the MySQL poll
			if err := tx.Commit(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Settled: every run decided (the join waits for a read after it).
	state := func() string {
		credits.mu.Lock()
		defer credits.mu.Unlock()
		return fmt.Sprint(len(credits.cs))
	}
	waitSettled(t, polls, state)
	truth := credits.judge(spans.GetSpans())
	byHow := map[string]float64{}
	credits.mu.Lock()
	for _, cr := range credits.cs {
		byHow[cr.how] += cr.hold
	}
	credits.mu.Unlock()
	t.Logf("credited %.2f s (wrong tag %.2f s); by how: %s; unknown by how: %s", truth.total, truth.wrong, fmtHolds(byHow), fmtHolds(truth.unknown))
	var unknown float64
	for _, v := range truth.unknown {
		unknown += v
	}
	if truth.wrong > 0 || unknown > 0 {
		t.Errorf("fresh backends' first idle transactions: %.2f s to a wrong tag, %.2f s unknown (%s)", truth.wrong, unknown, fmtHolds(truth.unknown))
	}
	if byHow["join_exact"]+byHow["join_inferred"] < 0.5*n*0.12 {
		t.Errorf("the join named %.2f s of %d idle transactions of 120 ms: %s", byHow["join_exact"]+byHow["join_inferred"], n, fmtHolds(byHow))
	}
}
