package collector

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

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
	// No warm-up: ProxySQL opens a backend for each transaction below.
	d, px := cartsBehindProxySQL(t)
	ctx := context.Background()
	h := startJoinHarness(t, joinConfig(px, d.Target.Config("").FormatDSN()), false)
	polls := h.polls
	db := h.openApp(t, px)
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
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = conn
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
	truth, byHow := h.settleAndJudge(t)
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
