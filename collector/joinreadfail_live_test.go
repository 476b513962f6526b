package collector

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// joinReadCutter is a TCP relay to a MySQL server that, while armed,
// drops the connection that sends the proxy↔server join's read (the only
// statement naming prepared_statements_instances) before the server sees
// it: the MySQL source's connection dies in the middle of its poll, after
// the queries of the server's own figures.
type joinReadCutter struct {
	l      net.Listener
	target string
	armed  atomic.Bool
	cuts   atomic.Int64
}

func newJoinReadCutter(t *testing.T, target string) *joinReadCutter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &joinReadCutter{l: l, target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			wg.Go(func() { c.relay(client, server) })
		}
	})
	return c
}

var joinReadMark = []byte("prepared_statements_instances")

func (c *joinReadCutter) relay(client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	go func() {
		io.Copy(client, server)
		client.Close()
	}()
	buf := make([]byte, 64<<10)
	var tail []byte // the end of the last chunk: the mark may straddle two
	for {
		n, err := client.Read(buf)
		if n > 0 {
			seen := append(tail, buf[:n]...)
			if c.armed.Load() && bytes.Contains(seen, joinReadMark) {
				c.cuts.Add(1)
				return
			}
			tail = append(tail[:0], seen[max(0, len(seen)-len(joinReadMark)):]...)
			if _, err := server.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestLiveJoinReadConnectionDiesMidRun: while the MySQL source's
// connection dies at every proxy↔server join read (cut by a relay after
// the poll's other queries), the source stays up, the join is degraded
// with server_join_read_failed and a reason that names the error and no
// credentials, no idle hold is named exactly to a wrong tag; once reads
// go through again, the degradation clears and the join names holds
// exactly again.
func TestLiveJoinReadConnectionDiesMidRun(t *testing.T) {
	skipTimingUnderRace(t)
	testenv.RequireProxySQL(t)
	d, px := cartsBehindProxySQL(t)
	ctx := context.Background()
	warmProxySQL(t, px)
	mon, err := d.Target.CreateMonitor(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	cut := newJoinReadCutter(t, mon.Addr)
	mon.Addr = cut.l.Addr().String()
	dsn := mon.FormatDSN()
	h := startJoinHarness(t, joinConfig(px, dsn), false)
	c, polls := h.c, h.polls
	db := h.openApp(t, px)
	stopWork := make(chan struct{})
	wg := idleTransactionsOfTwoTags(t, db, stopWork)
	polls.wait(t, "db", SourceMySQL, 4) // a second of reads that go through

	cut.armed.Store(true)
	armedPolls := polls.count("db", SourceMySQL)
	var got *Degradation
	for deadline := time.Now().Add(10 * time.Second); got == nil && time.Now().Before(deadline); {
		polls.wait(t, "db", SourceMySQL, 1)
		st := mysqlSourceStatus(t, c)
		if !st.Up {
			t.Errorf("the MySQL source went down while only the join's reads failed: %+v", st)
		}
		got = joinReadFailure(st)
	}
	polls.wait(t, "db", SourceMySQL, 6) // a second and a half of failed reads
	st := mysqlSourceStatus(t, c)
	cut.armed.Store(false)
	armedPolls = polls.count("db", SourceMySQL) - armedPolls
	if got == nil {
		t.Fatalf("join reads cut %d times in %d polls: no %s degradation (%+v)", cut.cuts.Load(), armedPolls, ReasonJoinReadFailed, st)
	}
	t.Logf("join reads cut %d times in %d polls; degraded: %s; fix: %s", cut.cuts.Load(), armedPolls, got.Detail, got.Fix)
	if !st.Up || cut.cuts.Load() < 2 || armedPolls < 6 {
		t.Errorf("the source must keep polling (and reconnecting) while its join reads fail: up %v, %d cuts in %d polls", st.Up, cut.cuts.Load(), armedPolls)
	}
	if !strings.Contains(got.Detail, "proxy↔server join") || !strings.Contains(got.Detail, "invalid connection") ||
		strings.Contains(got.Detail+got.Fix, mon.Passwd) || strings.Contains(got.Detail+got.Fix, dsn) {
		t.Errorf("the degradation must name the join and the error, never the DSN or password: %+v", got)
	}

	// Reads go through again: the degradation clears, holds are exact.
	for deadline := time.Now().Add(10 * time.Second); joinReadFailure(mysqlSourceStatus(t, c)) != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("reads go through again but the join stays degraded: %+v", mysqlSourceStatus(t, c))
		}
		polls.wait(t, "db", SourceMySQL, 1)
	}
	polls.wait(t, "db", SourceMySQL, 6)
	close(stopWork)
	wg.Wait()
	truth, byHow := h.settleAndJudge(t)
	t.Logf("credited %.2f s; by how: %s; wrong tag %.2f s, by how: %s", truth.total, fmtHolds(byHow), truth.wrong, fmtHolds(truth.byHow))
	if truth.byHow["join_exact"] > 0 {
		t.Errorf("%.2f s named exactly to a wrong tag", truth.byHow["join_exact"])
	}
	if byHow["join_exact"] <= 0 {
		t.Errorf("no hold named exactly: %s", fmtHolds(byHow))
	}
}

// idleTransactionsOfTwoTags runs four clients of db until stopAt closes,
// two tagged alpha and two beta, each a loop of transactions idle 150 ms
// after one statement. Two tags on the same backends: a hold named from
// the wrong reads would go to the other tag.
func idleTransactionsOfTwoTags(t *testing.T, db *sql.DB, stopAt <-chan struct{}) *sync.WaitGroup {
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, tag := range []string{"alpha", "alpha", "beta", "beta"} {
		wg.Go(func() {
			tctx := conntag.WithTag(ctx, tag)
			for {
				select {
				case <-stopAt:
					return
				default:
				}
				tx, err := db.BeginTx(tctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				var n int
				if err := tx.QueryRowContext(tctx, "SELECT COUNT(*) FROM carts").Scan(&n); err != nil {
					t.Error(err)
				}
				time.Sleep(150 * time.Millisecond) // idle in the transaction
				if err := tx.Commit(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	return &wg
}

// mysqlSourceStatus is the status of c's MySQL source of target db.
func mysqlSourceStatus(t *testing.T, c *Collector) SourceStatus {
	t.Helper()
	for _, st := range c.Sources() {
		if st.Target == "db" && st.Source == SourceMySQL {
			return st
		}
	}
	t.Fatal("no MySQL source status")
	return SourceStatus{}
}

// joinReadFailure is st's server_join_read_failed degradation, if any.
func joinReadFailure(st SourceStatus) *Degradation {
	for i, x := range st.Degraded {
		if x.Reason == ReasonJoinReadFailed {
			return &st.Degraded[i]
		}
	}
	return nil
}
