package flashsale

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdtime/holdtime/reservation/redisstock"
	"github.com/holdtime/holdtime/testenv"
)

// redisBackend starts a Redis and a database for one test and returns the
// Redis design on them.
func redisBackend(t *testing.T, order redisstock.ClaimOrder, p testenv.Persistence) (*RedisBackend, *testenv.Redis) {
	t.Helper()
	r := testenv.NewRedis(t, testenv.RedisOptions{Persistence: p})
	db, err := OpenDB(Config{MySQL: testenv.NewDatabase(t).Config()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, PoolSize: 32})
	t.Cleanup(func() { rdb.Close() })
	b, err := NewRedisBackend(redisstock.Config{Redis: rdb, DB: db, ClaimOrder: order, ExpiryInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return b, r
}

// faultSale is the sale every fault test runs: demand twice the stock, one
// unit per cart, so each fault misplaces exactly one unit.
func faultSale() Config {
	return Config{Buyers: 120, Concurrency: 8, Items: 2, Stock: 30, PaymentDelay: time.Millisecond}
}

// A claim killed between its halves and driven again: ledger-first counts
// one unit sold twice in the ledger (undersold), Redis-first never counts
// it (oversold), exactly one unit per killed claim.
func TestRedisKilledClaims(t *testing.T) {
	for _, order := range []redisstock.ClaimOrder{redisstock.ClaimLedgerFirst, redisstock.ClaimRedisFirst} {
		t.Run(string(order), func(t *testing.T) {
			b, _ := redisBackend(t, order, testenv.PersistenceNone)
			cfg := faultSale()
			cfg.Backend, cfg.KillClaims = b, 0.3
			r, err := Run(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", r)
			if r.KilledClaims == 0 || r.Paid != r.Stock || r.FailedCalls != 0 || r.Leaked != 0 {
				t.Fatalf("want kills, every unit paid for, no failures or leaks: %+v", r)
			}
			over, under := r.Oversold, r.Undersold
			if order == redisstock.ClaimRedisFirst {
				over, under = under, over
			}
			if under != r.KilledClaims || over != 0 {
				t.Fatalf("%s: %d killed claims, %d oversold, %d undersold: want exactly one unit misplaced per killed claim, "+
					"the other way never", order, r.KilledClaims, r.Oversold, r.Undersold)
			}
		})
	}
}

// A Redis crash restored from the last snapshot (taken after stocking)
// sells the units sold before the crash a second time. A claim caught by
// the crash between its halves also leaves the ledger counting a sale whose
// hold Redis no longer knows (undersold).
func TestRedisRestartFromSnapshot(t *testing.T) {
	b, rs := redisBackend(t, redisstock.ClaimLedgerFirst, testenv.PersistenceSnapshot)
	cfg := faultSale()
	cfg.Backend, cfg.Restarts, cfg.Restart, cfg.AfterStock = b, 1, rs.Restart, rs.Save
	r, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.Restarts != 1 || r.Paid <= r.Stock || r.Oversold != r.Paid-r.Stock+max(0, r.Paid-r.Sold) ||
		r.Undersold != max(0, r.Sold-r.Paid) {
		t.Fatalf("want the restart to sell more than stocked (oversold = paid - stock), and the ledger's extra sales "+
			"undersold: %+v", r)
	}
}

// A Redis without persistence comes back empty: no counter, nothing sells.
func TestRedisRestartWithoutPersistence(t *testing.T) {
	b, rs := redisBackend(t, redisstock.ClaimLedgerFirst, testenv.PersistenceNone)
	cfg := faultSale()
	// More stock than the buyers before the restart can buy, so units are
	// left in Redis when it loses them (with faultSale's 60 the first half
	// of the buyers could buy them all first: nothing left to undersell).
	cfg.Backend, cfg.Restarts, cfg.Restart, cfg.Stock = b, 1, rs.Restart, 60
	r, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.Restarts != 1 || r.Undersold == 0 || r.Oversold != 0 || r.Undersold != r.Stock-r.Paid {
		t.Fatalf("want the restart to undersell what was not sold by then: %+v", r)
	}
}

// The engine under the same faults: claims killed mid-transaction and every
// connection of the sale KILLed twice. Nothing oversold, undersold or
// leaked.
func TestEngineUnderFaults(t *testing.T) {
	d := testenv.NewDatabase(t)
	admin := d.Target.Admin()
	cfg := faultSale()
	cfg.MySQL, cfg.KillClaims, cfg.Restarts = d.Config(), 0.5, 2
	cfg.Restart = func(ctx context.Context) error { return KillConnections(ctx, admin, d.Name) }
	r, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.KilledClaims == 0 || r.Restarts != 2 {
		t.Fatalf("the faults did not happen: %+v", r)
	}
	if r.Oversold != 0 || r.Undersold != 0 || r.Leaked != 0 || r.Paid != r.Stock || r.Sold != r.Paid {
		t.Fatalf("the engine's books do not balance under faults: %+v", r)
	}
}
