package collector

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector/internal/trxjoin"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// TestLiveJoinNamesAFreshBackendsFirstIdleTransaction: backends ProxySQL
// opens while the collector runs are in no server read made before them.
// Their first idle transactions (shorter than the MySQL poll, so that a
// read rarely falls inside one) are named by the join, each to its own
// tag, none unknown; at least one by the bracketing reads although the
// earlier one does not list the backend.
func TestLiveJoinNamesAFreshBackendsFirstIdleTransaction(t *testing.T) {
	skipTimingUnderRace(t)
	testenv.RequireProxySQL(t)
	// No warm-up: ProxySQL opens a backend for each transaction below.
	d, px := cartsBehindProxySQL(t)
	ctx := context.Background()
	cfg := joinConfig(px, d.Target.Config("").FormatDSN())
	h := startJoinHarness(t, cfg, false)
	db := h.openApp(t, px)
	const n = 8
	const idle = 120 * time.Millisecond // idle in the transaction: shorter than the MySQL poll
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	admin, err := sql.Open("mysql", px.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	backendsOpened := func() int64 {
		var k int64
		if err := admin.QueryRowContext(ctx, "SELECT COALESCE(SUM(ConnOK), 0) FROM stats_mysql_connection_pool").Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	conns := make([]*sql.Conn, n)
	for i := range conns {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = conn
	}
	opened := backendsOpened()
	// Every client has its ProxySQL session. Right after a MySQL poll (its
	// read lists none of the backends to come), client i begins i/n of a
	// MySQL interval later, on a backend ProxySQL opens for it, and stays
	// idle in the transaction; then a SELECT SLEEP keeps the backend until
	// every client has begun, so that none is handed another's. Staggered,
	// the idle spans lie each at its own place between two reads: whether
	// a read falls inside one (a rule that needs no earlier read) is
	// decided per transaction, not once for all. All 8 begun at once let a
	// read fall inside every span, so that the rule for an earlier read
	// that does not list the backend went untested, about one run in 3.
	interval := cfg.MySQL[0].Interval
	h.polls.wait(t, "db", SourceMySQL, 1)
	start := time.Now()
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Go(func() {
			defer conn.Close()
			time.Sleep(time.Until(start.Add(time.Duration(i) * interval / n)))
			tctx := conntag.WithTag(ctx, fmt.Sprintf("fresh%d", i))
			tx, err := conn.BeginTx(tctx, nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer tx.Rollback()
			var x int
			if err := tx.QueryRowContext(tctx, "SELECT COUNT(*) FROM carts").Scan(&x); err != nil {
				t.Error(err)
			}
			time.Sleep(idle)
			if err := tx.QueryRowContext(tctx, "SELECT SLEEP(0.5)").Scan(&x); err != nil {
				t.Error(err)
			}
			if err := tx.Commit(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if k := backendsOpened() - opened; k < n {
		t.Errorf("ProxySQL opened %d backends for %d transactions: not each on a fresh backend", k, n)
	}
	truth, byHow := h.settleAndJudge(t)
	unlisted := h.joins.count(func(r string) bool { return strings.HasSuffix(r, trxjoin.EarlierReadUnlisted) })
	inside := h.joins.count(func(r string) bool { return strings.HasPrefix(r, "a read inside") })
	t.Logf("credited %.2f s (wrong tag %.2f s); by how: %s; unknown by how: %s", truth.total, truth.wrong, fmtHolds(byHow), fmtHolds(truth.unknown))
	t.Logf("join answers: %d by a read inside the idle span, %d by the bracketing reads with an earlier read that does not list the backend; by reason: %v",
		inside, unlisted, h.joins.snapshot())
	var unknown float64
	for _, v := range truth.unknown {
		unknown += v
	}
	if truth.wrong > 0 || unknown > 0 {
		t.Errorf("fresh backends' first idle transactions: %.2f s to a wrong tag, %.2f s unknown (%s)", truth.wrong, unknown, fmtHolds(truth.unknown))
	}
	if named := byHow["join_exact"] + byHow["join_inferred"]; named < 0.5*n*idle.Seconds() {
		t.Errorf("the join named %.2f s of %d idle transactions of %v: %s", named, n, idle, fmtHolds(byHow))
	}
	if unlisted == 0 {
		t.Errorf("no idle transaction named by the bracketing reads with an earlier read that does not list its backend: the rule this test is for went untested (%d by a read inside)", inside)
	}
}
