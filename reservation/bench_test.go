package reservation

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// minimalReserve is the smallest correct SKIP LOCKED reserve of one unit:
// the same statements as the engine, none of its bookkeeping.
func minimalReserve(ctx context.Context, db *sql.DB, key ItemKey, id string, work time.Duration) error {
	for {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		var unit uint64
		err = tx.QueryRowContext(ctx, `SELECT id FROM inventory_reservation_units WHERE shop_id = ? AND inventory_item_id = ?
			AND inventory_group_id = ? ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`, key.ShopID, key.ItemID, key.GroupID).Scan(&unit)
		if err == sql.ErrNoRows {
			tx.Rollback()
			continue
		}
		if err == nil {
			_, err = tx.ExecContext(ctx, `DELETE u FROM inventory_reservation_units u FORCE INDEX (PRIMARY)
				WHERE u.shop_id = ? AND u.inventory_item_id = ? AND u.inventory_group_id = ? AND u.id = ?`,
				key.ShopID, key.ItemID, key.GroupID, unit)
		}
		if err == nil {
			_, err = tx.ExecContext(ctx, insertReservation, key.ShopID, id, int64(time.Minute/time.Microsecond), newToken())
		}
		if err == nil {
			_, err = tx.ExecContext(ctx, insertReservedPrefix+insertReservedRow, key.ShopID, id, key.ItemID, key.GroupID, 1)
		}
		if err == nil && work > 0 {
			time.Sleep(work)
		}
		if err == nil {
			err = tx.Commit()
		}
		tx.Rollback()
		return err
	}
}

// BenchmarkRelease: concurrent releases of holds on one hot item whose pool
// is full, so every released unit stays in the ledger. engine is Release
// (pool row lock and count, tokens); minimal_release is the same release
// without them (lock the reservation, read and delete its quantities,
// insert its units, set its state), the engine's release before the pool
// bound: results read as the bound's cost.
//
//	go test -run '^$' -bench BenchmarkRelease -benchtime 2000x -count 3 ./reservation/
func BenchmarkRelease(b *testing.B) {
	cfg := testenv.NewDatabase(b).Config()
	cfg.InterpolateParams = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		b.Fatal(err)
	}
	db := conntag.OpenDB(connector)
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(40)
	setupEngine, err := New(db, Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := setupEngine.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	var item atomic.Uint64
	for _, conc := range []int{1, 16} {
		for _, s := range []string{"minimal_release", "engine"} {
			b.Run(fmt.Sprintf("conc=%d/%s", conc, s), func(b *testing.B) {
				e, err := New(db, Config{PoolSize: 1000})
				if err != nil {
					b.Fatal(err)
				}
				ctx := b.Context()
				key := ItemKey{1, item.Add(1), 1}
				receive(b, e, key, int64(b.N)+1000)
				// b.N holds of one unit, then a full pool.
				ids := make(chan string, b.N)
				var next atomic.Int64
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
							id := fmt.Sprint(key.ItemID, "-", i)
							if _, err := e.Reserve(ctx, cart(id, key, 1)); err != nil {
								b.Error(err)
								return
							}
							ids <- id
						}
					})
				}
				wg.Wait()
				close(ids)
				if _, err := e.Refill(ctx, key); err != nil {
					b.Fatal(err)
				}
				release := func(id string) error { return e.Release(ctx, 1, id) }
				if s == "minimal_release" {
					release = func(id string) error { return minimalRelease(conntag.WithTag(ctx, "inventory_release"), db, e, id) }
				}
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				wg = sync.WaitGroup{}
				for range conc {
					wg.Go(func() {
						for id := range ids {
							if err := release(id); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "releases/s")
			})
		}
	}
}

// minimalRelease is a release without the pool bound and tokens: what
// Release did before both.
func minimalRelease(ctx context.Context, db *sql.DB, e *Engine, id string) error {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var state string
	var due bool
	var ended uint64
	if err := tx.QueryRowContext(ctx, lockReservation, 1, id).Scan(&state, &due, &ended); err != nil {
		return err
	}
	lines, err := readHeld(ctx, tx, 1, id)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, deleteReserved, 1, id); err != nil {
		return err
	}
	for _, l := range lines {
		if err := e.addToPool(ctx, tx, l.key, l.qty); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, setState, StateReleased, 0, 1, id); err != nil {
		return err
	}
	return tx.Commit()
}
