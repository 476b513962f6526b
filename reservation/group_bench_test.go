package reservation

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// BenchmarkClaim: concurrent claims of holds on one hot item, and on 1,000
// items. alone is the claim before groups (claimAlone: one transaction per
// claim, the ledger row updated in its middle), the baseline; engine is
// Claim (group commit). Results read as ratios of claims/s.
//
//	go test -run '^$' -bench BenchmarkClaim -benchtime 3000x -count 3 ./reservation/
func BenchmarkClaim(b *testing.B) {
	groupBench(b, opClaim, []int{16, 64})
}

// BenchmarkReleaseGroup: the same for releases (the pool has room, so
// every released unit goes back to it): alone is the release before
// groups, engine is Release.
//
//	go test -run '^$' -bench BenchmarkReleaseGroup -benchtime 3000x -count 3 ./reservation/
func BenchmarkReleaseGroup(b *testing.B) {
	groupBench(b, opRelease, []int{16})
}

func groupBench(b *testing.B, op string, concs []int) {
	cfg := testenv.NewDatabase(b).Config()
	cfg.InterpolateParams = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		b.Fatal(err)
	}
	db := conntag.OpenDB(connector)
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(80)
	db.SetMaxIdleConns(80)
	setupEngine, err := New(db, Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := setupEngine.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	var shop atomic.Uint64
	for _, items := range []int{1, 1000} {
		for _, conc := range concs {
			for _, s := range []string{"alone", "engine"} {
				b.Run(fmt.Sprintf("items=%d/conc=%d/%s", items, conc, s), func(b *testing.B) {
					// A shop per case: no case finds another's rows.
					shopID := shop.Add(1)
					e, err := New(db, Config{PoolSize: max(b.N, 1000)})
					if err != nil {
						b.Fatal(err)
					}
					ctx := b.Context()
					ids := holds(b, e, shopID, items, b.N)
					end := func(id string) error {
						if op == opRelease {
							return e.Release(ctx, shopID, id)
						}
						return e.Claim(ctx, shopID, id)
					}
					if s == "alone" {
						end = func(id string) error {
							if op == opRelease {
								return releaseAlone(ctx, e, shopID, id)
							}
							return claimAlone(ctx, e, shopID, id)
						}
					}
					b.ReportAllocs()
					b.ResetTimer()
					start := time.Now()
					var next atomic.Int64
					var wg sync.WaitGroup
					for range conc {
						wg.Go(func() {
							for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
								if err := end(ids[i-1]); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), op+"s/s")
				})
			}
		}
	}
}

// holds reserves n holds of one unit each, spread round robin over items
// items of shop, and returns their ids.
func holds(b *testing.B, e *Engine, shopID uint64, items, n int) []string {
	ctx := b.Context()
	per := int64(n/items + 1)
	for item := range items {
		key := ItemKey{shopID, uint64(item + 1), 1}
		if err := e.Receive(ctx, StockParams{ItemKey: key, Quantity: per}); err != nil {
			b.Fatal(err)
		}
	}
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				id := fmt.Sprint("h", i)
				key := ItemKey{shopID, uint64(int(i)%items + 1), 1}
				if _, err := e.Reserve(ctx, cart(id, key, 1)); err != nil {
					b.Error(err)
					return
				}
				ids[i-1] = id
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return ids
}

// claimAlone is Claim before groups: one transaction per claim.
func claimAlone(ctx context.Context, e *Engine, shopID uint64, id string) error {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Claim)
	token := newToken()
	return e.retry(ctx, opClaim, true, token, func(r *retrier) error { return e.claimOnce(ctx, r, shopID, id, token) })
}

// releaseAlone is Release before groups: one transaction per release.
func releaseAlone(ctx context.Context, e *Engine, shopID uint64, id string) error {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Release)
	token := newToken()
	return e.retry(ctx, opRelease, true, token, func(r *retrier) error { return e.releaseOnce(ctx, r, shopID, id, token) })
}

// releaseOnce is one attempt of releaseAlone.
func (e *Engine) releaseOnce(ctx context.Context, r *retrier, shopID uint64, id string, token uint64) error {
	tx, err := e.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	state, _, err := lockState(ctx, tx, r, shopID, id, token)
	if err != nil {
		return err
	}
	switch state {
	case StateClaimed:
		return ErrClaimed
	case StateReleased, StateExpired:
		return nil
	}
	lines, err := endHold(ctx, tx, shopID, id, StateReleased, token)
	if err != nil {
		return err
	}
	pooled, err := e.returnUnits(ctx, tx, lines)
	if err != nil {
		return err
	}
	return r.commit(ctx, tx, func() {
		e.stats.releases.Add(1)
		e.returned(pooled)
	})
}
