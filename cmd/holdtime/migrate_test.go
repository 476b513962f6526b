package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/flashsale"
	"github.com/holdtime/holdtime/reservation/migration"
	"github.com/holdtime/holdtime/reservation/redisstock"
	"github.com/holdtime/holdtime/testenv"
)

// The operator's commands against an app's database and Redis: status,
// reconcile naming a drift and --repair bringing it to zero, backfill of a
// shop still on Redis, a dry run; flags read from HOLDTIME_*.
func TestMigrateCommands(t *testing.T) {
	testenv.Require(t)
	testenv.RequireRedis(t)
	ctx := context.Background()
	d := testenv.NewDatabase(t)
	rs := testenv.NewRedis(t, testenv.RedisOptions{})
	db, err := flashsale.OpenDB(flashsale.Config{MySQL: d.Config()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { rdb.Close() })
	b, err := flashsale.NewMigration(ctx, flashsale.MigrationConfig{DB: db, Redis: rdb, QuietPeriod: -1})
	if err != nil {
		t.Fatal(err)
	}
	const shadowed, onRedis = 31, 32
	k := reservation.ItemKey{ShopID: shadowed, ItemID: 1, GroupID: 1}
	if err := b.R.Receive(ctx, k, 10); err != nil {
		t.Fatal(err)
	}
	if err := b.Redis.Receive(ctx, reservation.ItemKey{ShopID: onRedis, ItemID: 1, GroupID: 1}, 5); err != nil {
		t.Fatal(err)
	}
	if err := b.R.SetRollout(ctx, migration.Rollout{Shadow: migration.Plan{Shops: []uint64{shadowed}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.R.Reserve(ctx, reservation.ReserveParams{ShopID: shadowed, ReservationID: "r1",
		Lines: []reservation.Line{{ItemID: 1, Quantity: 2, GroupIDs: []uint64{1}}}}); err != nil {
		t.Fatal(err)
	}
	// MySQL, the shadow, loses 3 units.
	if err := b.Engine.Adjust(ctx, reservation.StockParams{ItemKey: k, Quantity: -3}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOLDTIME_DSN", d.Config().FormatDSN())
	t.Setenv("HOLDTIME_REDIS", rs.Addr)

	code, out, errOut := runCLI(t, "migrate", "status")
	if code != 0 || !strings.Contains(out, "31    shadow") {
		t.Fatalf("status: exit %d %s\n%s", code, errOut, out)
	}
	code, out, errOut = runCLI(t, "migrate", "reconcile")
	if code == 0 || !strings.Contains(out, "DRIFT") || !strings.Contains(out, " 8      5 ") || !strings.Contains(errOut, "shops 31 drift") {
		t.Fatalf("reconcile of a drifted shop: exit %d %s\n%s", code, errOut, out)
	}
	code, out, errOut = runCLI(t, "migrate", "reconcile", "--repair")
	if code != 0 || strings.Contains(out, "DRIFT") || !strings.Contains(out, " 8      8 ") {
		t.Fatalf("reconcile --repair: exit %d %s\n%s", code, errOut, out)
	}
	// A Redis claim (the truth's) that dies between its halves: reconcile
	// names it, --repair settles it as sold in both systems.
	if _, err := b.R.Reserve(ctx, reservation.ReserveParams{ShopID: shadowed, ReservationID: "r2",
		Lines: []reservation.Line{{ItemID: 1, Quantity: 1, GroupIDs: []uint64{1}}}}); err != nil {
		t.Fatal(err)
	}
	dying, err := redisstock.New(redisstock.Config{Redis: rdb, DB: db, BetweenClaimHalves: func(context.Context, uint64, string) error {
		return errors.New("the process died between the halves of the claim")
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := dying.Claim(ctx, shadowed, "r2"); err == nil {
		t.Fatal("the claim did not die")
	}
	code, out, errOut = runCLI(t, "migrate", "reconcile")
	if code == 0 || !strings.Contains(out, "shop 31 DRIFT: redis claims stuck between their halves (claiming): r2") {
		t.Fatalf("reconcile with a stuck claim: exit %d %s\n%s", code, errOut, out)
	}
	code, out, errOut = runCLI(t, "migrate", "reconcile", "--repair")
	if code != 0 || strings.Contains(out, "DRIFT") || !strings.Contains(out, " 7      7 ") {
		t.Fatalf("reconcile --repair of a stuck claim: exit %d %s\n%s", code, errOut, out)
	}
	// A shop on Redis alone: backfill gives MySQL its units.
	code, out, errOut = runCLI(t, "migrate", "backfill", "--shop", "32")
	if code != 0 || !strings.Contains(out, "32  redis") || !strings.Contains(out, " 5      5 ") {
		t.Fatalf("backfill: exit %d %s\n%s", code, errOut, out)
	}
	if n, err := b.Engine.Available(ctx, reservation.ItemKey{ShopID: onRedis, ItemID: 1, GroupID: 1}); err != nil || n != 5 {
		t.Fatalf("engine after backfill: %d, %v", n, err)
	}
	code, out, errOut = runCLI(t, "migrate", "dryrun", "--shops-by-volume", "31,32", "--mysql-percent", "100")
	if code != 0 || !strings.Contains(out, "31    shadow  mysql") || !strings.Contains(out, "32    redis   mysql") {
		t.Fatalf("dryrun: exit %d %s\n%s", code, errOut, out)
	}
	// Defaults without the app's database: a clear error.
	t.Setenv("HOLDTIME_DSN", "")
	if code, _, errOut = runCLI(t, "migrate", "reconcile"); code == 0 || !strings.Contains(errOut, "give --dsn") {
		t.Fatalf("no database: exit %d %q", code, errOut)
	}
}
