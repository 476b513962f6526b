package migration_test

import (
	"context"
	"database/sql"
	"log/slog"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/migration"
	"github.com/holdtime/holdtime/reservation/redisstock"
)

// Wiring a migration: the Redis design and the engine on one database, the
// smallest shops shadowed first, the kill switch next to /metrics.
func Example() {
	ctx := context.Background()
	var db *sql.DB             // conntag.Open("mysql", dsn)
	var rdb *redis.Client      // redis.NewClient(&redis.Options{Addr: "redis:6379"})
	var metrics *http.ServeMux // the app's metrics server
	if db == nil {
		return // (an example: nothing to connect to)
	}
	store, _ := redisstock.New(redisstock.Config{Redis: rdb, DB: db})
	engine, _ := reservation.New(db, reservation.Config{})
	router, _ := migration.New(migration.Config{Redis: store, Engine: engine, DB: db,
		ShopsByVolume: []uint64{17, 4, 9, 1}, // lowest volume first
		Rollout:       migration.Rollout{Shadow: migration.Plan{Percent: 50}},
		Logger:        slog.Default()})
	_ = router.Migrate(ctx)
	go router.Run(ctx)
	metrics.Handle("/killswitch", router.Handler())

	// Checkout calls the router as it called the Redis design.
	_, _ = router.Reserve(ctx, reservation.ReserveParams{ShopID: 4, ReservationID: "order-1",
		Lines: []reservation.Line{{ItemID: 7, Quantity: 1, GroupIDs: []uint64{1}}}})
	_ = router.Claim(ctx, 4, "order-1")

	// Later: shop 17 and the smallest half of all shops on MySQL.
	_ = router.SetRollout(ctx, migration.Rollout{Shadow: migration.Plan{Percent: 100},
		MySQL: migration.Plan{Percent: 50, Shops: []uint64{17}}})
	// Output:
}
