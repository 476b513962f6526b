package reservation

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/holdtime/holdtime/testenv"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// setup returns a migrated engine on a fresh database.
func setup(t *testing.T, cfg Config) (*Engine, *sql.DB) {
	t.Helper()
	db := testenv.NewDatabase(t).Open(t)
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(64)
	e, err := New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return e, db
}

func receive(t testing.TB, e *Engine, key ItemKey, n int64) {
	t.Helper()
	if err := e.Receive(t.Context(), StockParams{ItemKey: key, Quantity: n}); err != nil {
		t.Fatal(err)
	}
}

func cart(id string, key ItemKey, qty int64) ReserveParams {
	return ReserveParams{ShopID: key.ShopID, ReservationID: id,
		Lines: []Line{{ItemID: key.ItemID, Quantity: qty, GroupIDs: []uint64{key.GroupID}}}}
}

// account is one item/group's books: every unit is exactly one of these.
type account struct {
	onHand, claimed, pooled, held int64
	orphanHeld                    int64 // held quantities whose reservation is not held: leaked
}

func (a account) ledgerOnly() int64 { return a.onHand - a.pooled - a.held }

func books(t *testing.T, db *sql.DB, strategy Strategy, key ItemKey) account {
	t.Helper()
	var a account
	ctx := t.Context()
	k := []any{key.ShopID, key.ItemID, key.GroupID}
	err := db.QueryRowContext(ctx, `SELECT on_hand, claimed FROM inventory_ledger
		WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?`, k...).Scan(&a.onHand, &a.claimed)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	q := countUnits
	if strategy == StrategyCounter {
		q = countCounter
	}
	if err := db.QueryRowContext(ctx, q, append(k, k...)...).Scan(&a.pooled, &a.held); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(SUM(q.quantity), 0) FROM inventory_reserved_quantities q
		JOIN inventory_reservations r ON r.shop_id = q.shop_id AND r.reservation_id = q.reservation_id
		WHERE r.state <> 'held' AND q.shop_id = ? AND q.inventory_item_id = ? AND q.inventory_group_id = ?`, k...).
		Scan(&a.orphanHeld); err != nil {
		t.Fatal(err)
	}
	return a
}

// checkBooks asserts the invariants for an item stocked with received units
// and claimed claims (as counted by the callers of Claim).
func checkBooks(t *testing.T, db *sql.DB, strategy Strategy, key ItemKey, received, claimed int64) account {
	t.Helper()
	a := books(t, db, strategy, key)
	if a.claimed != claimed {
		t.Errorf("ledger claimed %d, callers saw %d successful claims", a.claimed, claimed)
	}
	if a.claimed > received {
		t.Errorf("oversold: claimed %d of %d received", a.claimed, received)
	}
	if a.onHand+a.claimed != received {
		t.Errorf("on hand %d + claimed %d != received %d", a.onHand, a.claimed, received)
	}
	if a.ledgerOnly() < 0 || a.pooled < 0 || a.held < 0 {
		t.Errorf("units counted twice: %+v (ledger-only %d)", a, a.ledgerOnly())
	}
	if a.orphanHeld != 0 {
		t.Errorf("leaked: %d units held by reservations that are not held", a.orphanHeld)
	}
	return a
}

func TestReserveClaimRelease(t *testing.T) {
	for _, s := range []Strategy{StrategySkipLocked, StrategyForUpdate, StrategyCounter} {
		t.Run(string(s), func(t *testing.T) {
			e, db := setup(t, Config{Strategy: s, PoolSize: 10})
			ctx := t.Context()
			key := ItemKey{1, 100, 7}
			receive(t, e, key, 25)

			res, err := e.Reserve(ctx, cart("r1", key, 3))
			if err != nil {
				t.Fatal(err)
			}
			if res.State != StateHeld || len(res.Lines) != 1 || res.Lines[0].Quantity != 3 {
				t.Fatalf("reserve = %+v", res)
			}
			again, err := e.Reserve(ctx, cart("r1", key, 3))
			if err != nil || again.ID != "r1" || again.Lines[0].Quantity != 3 {
				t.Fatalf("retried reserve = %+v, %v", again, err)
			}
			if n, _ := e.Available(ctx, key); n != 22 {
				t.Fatalf("available = %d, want 22", n)
			}
			checkBooks(t, db, s, key, 25, 0)

			if err := e.Claim(ctx, 1, "r1"); err != nil {
				t.Fatal(err)
			}
			if err := e.Claim(ctx, 1, "r1"); err != nil {
				t.Fatalf("second claim: %v", err)
			}
			if err := e.Release(ctx, 1, "r1"); !errors.Is(err, ErrClaimed) {
				t.Fatalf("release after claim = %v, want ErrClaimed", err)
			}
			if err := e.Claim(ctx, 1, "nope"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("claim unknown = %v, want ErrNotFound", err)
			}

			if _, err := e.Reserve(ctx, cart("r2", key, 5)); err != nil {
				t.Fatal(err)
			}
			if err := e.Release(ctx, 1, "r2"); err != nil {
				t.Fatal(err)
			}
			if err := e.Release(ctx, 1, "r2"); err != nil {
				t.Fatalf("second release: %v", err)
			}
			if err := e.Claim(ctx, 1, "r2"); !errors.Is(err, ErrReleased) {
				t.Fatalf("claim after release = %v, want ErrReleased", err)
			}

			// The pool holds 10; 22 are sellable: a line bigger than the pool
			// refills it inline beyond PoolSize.
			if _, err := e.Reserve(ctx, cart("r3", key, 22)); err != nil {
				t.Fatalf("reserve 22 with pool 10: %v", err)
			}
			if _, err := e.Reserve(ctx, cart("r4", key, 23)); !errors.Is(err, ErrInsufficientStock) {
				t.Fatalf("reserve beyond stock = %v, want ErrInsufficientStock", err)
			}
			if err := e.Claim(ctx, 1, "r3"); err != nil {
				t.Fatal(err)
			}
			checkBooks(t, db, s, key, 25, 25)
		})
	}
}

func TestMigrateIdempotent(t *testing.T) {
	e, _ := setup(t, Config{})
	if err := e.Migrate(t.Context()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
}

func TestRunStops(t *testing.T) {
	e, _ := setup(t, Config{RefillInterval: time.Millisecond, ExpiryInterval: time.Millisecond})
	before := goleak.IgnoreCurrent()
	receive(t, e, ItemKey{1, 1, 1}, 5)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
}
