package flashsale

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/redisstock"
	"github.com/holdtime/holdtime/testenv"
)

// BenchmarkCheckout: concurrent reserves of one unit of a hot item
// (reserve), and checkouts that also claim it (checkout), without faults,
// on the engine (skip_locked, the baseline) and on the Redis design it
// replaced, both against real servers and the same database. ns/op is per
// reserve or checkout; engine/redis reads as how much faster the Redis
// design is when nothing goes wrong.
func BenchmarkCheckout(b *testing.B) {
	rs := testenv.NewRedis(b, testenv.RedisOptions{Persistence: testenv.PersistenceNone})
	db, err := OpenDB(Config{MySQL: testenv.NewDatabase(b).Config(), Concurrency: 16})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1, PoolSize: 32})
	b.Cleanup(func() { rdb.Close() })
	engine, err := reservation.New(db, reservation.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := engine.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	redisDesign, err := NewRedisBackend(redisstock.Config{Redis: rdb, DB: db})
	if err != nil {
		b.Fatal(err)
	}
	if err := redisDesign.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	var shop atomic.Uint64
	shop.Store(1)
	for _, bc := range []struct {
		name  string
		b     Backend
		claim bool
	}{{"reserve/engine", EngineBackend(engine, db), false}, {"reserve/redis", redisDesign, false},
		{"checkout/engine", EngineBackend(engine, db), true}, {"checkout/redis", redisDesign, true}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := b.Context()
			k := reservation.ItemKey{ShopID: shop.Add(1), ItemID: 1, GroupID: 1}
			if err := bc.b.Receive(ctx, k, int64(b.N)+1000); err != nil {
				b.Fatal(err)
			}
			var id atomic.Int64
			b.SetParallelism(4) // 4 x GOMAXPROCS buyers at once
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p := reservation.ReserveParams{ShopID: k.ShopID, ReservationID: fmt.Sprintf("b%d", id.Add(1)),
						Lines: []reservation.Line{{ItemID: 1, Quantity: 1, GroupIDs: []uint64{1}}}}
					if _, err := bc.b.Reserve(ctx, p); err != nil {
						b.Error(err)
						return
					}
					if !bc.claim {
						continue
					}
					if err := bc.b.Claim(ctx, k.ShopID, p.ReservationID); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
