package reservation

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdtime/holdtime/testenv"
)

// sale runs buyers against one hot item until the ledger says sold out and
// no hold is left, abandoning a share of holds (TTL 1 µs: due at once, so the
// sweeper returns them without the test sleeping). It returns the number of
// successful claims.
func sale(t *testing.T, e *Engine, key ItemKey, buyers int, abandon float64) int64 {
	t.Helper()
	ctx := t.Context()
	var claimed atomic.Int64
	var wg sync.WaitGroup
	var ids atomic.Int64
	for b := range buyers {
		wg.Go(func() {
			for range 10_000 { // bounded: the stock runs out long before
				id := fmt.Sprintf("b%d-%d", b, ids.Add(1))
				p := cart(id, key, 1+rand.Int64N(2))
				abandoned := rand.Float64() < abandon
				if abandoned {
					p.TTL = time.Microsecond
				}
				_, err := e.Reserve(ctx, p)
				if errors.Is(err, ErrInsufficientStock) {
					if n, _ := e.ExpireDue(ctx); n > 0 {
						continue
					}
					p.Lines[0].Quantity = 1
					if _, err := e.Reserve(ctx, p); errors.Is(err, ErrInsufficientStock) {
						if held(t, e, key) == 0 {
							return
						}
						e.ExpireDue(ctx)
						continue
					} else if err != nil {
						t.Errorf("reserve: %v", err)
						return
					}
				} else if err != nil {
					t.Errorf("reserve: %v", err)
					return
				}
				if abandoned {
					continue
				}
				for { // a claim is retried with the same id until it has an answer
					err := e.Claim(ctx, key.ShopID, id)
					if err == nil {
						claimed.Add(p.Lines[0].Quantity)
						break
					}
					if !errors.Is(err, ErrRetryable) {
						t.Errorf("claim: %v", err)
						return
					}
				}
			}
			t.Errorf("buyer %d never saw the sale end", b)
		})
	}
	wg.Wait()
	return claimed.Load()
}

// held reads the held quantity; TestKilledConnections kills its
// connection too, so it tries a few times.
func held(t *testing.T, e *Engine, key ItemKey) int64 {
	var err error
	for range 10 {
		var n int64
		err = e.db.QueryRowContext(t.Context(), `SELECT COALESCE(SUM(quantity), 0) FROM inventory_reserved_quantities
			WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?`, key.ShopID, key.ItemID, key.GroupID).Scan(&n)
		if err == nil {
			return n
		}
	}
	t.Error(err)
	return -1
}

func TestFlashSaleInvariants(t *testing.T) {
	for _, s := range []Strategy{StrategySkipLocked, StrategyForUpdate, StrategyCounter} {
		t.Run(string(s), func(t *testing.T) {
			e, db := setup(t, Config{Strategy: s, PoolSize: 20})
			key := ItemKey{1, 42, 1}
			receive(t, e, key, 150)
			claimed := sale(t, e, key, 16, 0.2)
			a := checkBooks(t, db, s, key, 150, claimed)
			if a.claimed != 150 || a.held != 0 {
				t.Errorf("undersold: demand exceeded stock but %d of 150 sold, %d still held", a.claimed, a.held)
			}
			st := e.Stats()
			t.Logf("stats %+v", st)
		})
	}
}

// TestKilledConnections kills the engine's connections server-side while a
// sale runs and a clerk writes stock off through the same pool. Every
// operation is retried (idempotent by reservation id and AdjustmentID), and
// the books still balance: every write-off the clerk was told applied is in
// the ledger once. A sale in which no kill landed proves nothing, so the
// sale is repeated (on fresh stock) until one has, a few times at most.
func TestKilledConnections(t *testing.T) {
	d := testenv.NewDatabase(t)
	db := d.Open(t)
	db.SetMaxOpenConns(32)
	e, err := New(db, Config{PoolSize: 15, RetryBudget: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Stock arrives between sales through a pool nobody kills, so that a
	// sale starts from a known stock.
	stock, err := New(d.Open(t), Config{})
	if err != nil {
		t.Fatal(err)
	}
	key := ItemKey{1, 7, 1}
	admin := testenv.Shared(t).Admin()
	var kills atomic.Int64
	var received int64 // stocked, less what the clerk wrote off
	killer := func() (stop func()) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				var id int64
				err := admin.QueryRowContext(ctx, `SELECT id FROM information_schema.PROCESSLIST
					WHERE db = ? AND id <> CONNECTION_ID() AND info LIKE '%inventory%' ORDER BY RAND() LIMIT 1`, d.Name).Scan(&id)
				if err == nil {
					if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err == nil {
						kills.Add(1)
					}
				}
			}
		}()
		return func() { cancel(); <-done }
	}
	// clerk writes off a unit at a time, with an id, until stopped; it
	// returns the units written off per Adjust.
	clerk := func(sale int) (stop func() int64) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan int64)
		go func() {
			var off int64
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("writeoff-%d-%d", sale, i)
				err := e.Adjust(ctx, StockParams{ItemKey: key, Quantity: -1, AdjustmentID: id})
				for errors.Is(err, ErrOutcomeUnknown) && ctx.Err() == nil { // the same id: safe
					err = e.Adjust(ctx, StockParams{ItemKey: key, Quantity: -1, AdjustmentID: id})
				}
				switch {
				case err == nil:
					off++
				case errors.Is(err, ErrInsufficientStock), ctx.Err() != nil:
				default:
					t.Errorf("write-off: %v", err)
				}
				for errors.Is(err, ErrOutcomeUnknown) { // stopped before it knew: ask until it does
					err = e.Adjust(t.Context(), StockParams{ItemKey: key, Quantity: -1, AdjustmentID: id})
					if err == nil {
						off++
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
			}
			done <- off
		}()
		return func() int64 { cancel(); return <-done }
	}
	var claimed, writtenOff int64
	for sales := 1; ; sales++ {
		receive(t, stock, key, 120)
		received += 120
		stop := killer()
		writeOff := clerk(sales)
		claimed += sale(t, e, key, 8, 0.2)
		off := writeOff()
		received -= off
		writtenOff += off
		stop()
		if kills.Load() > 0 {
			break
		}
		if sales == 3 {
			t.Fatalf("no connection was killed mid-statement in %d sales: the fault never fired", sales)
		}
	}
	// A KILL takes effect on the server after the statement that sent it
	// returns: an idle connection of db may still die under the next read.
	// The books are read on a pool that nobody killed.
	a := checkBooks(t, d.Open(t), StrategySkipLocked, key, received, claimed)
	if a.claimed != received {
		t.Errorf("undersold under kills: %d of %d sold (%+v)", a.claimed, received, a)
	}
	t.Logf("killed %d connections mid-statement; %d units written off; retries %d", kills.Load(), writtenOff, e.Stats().Retries)
}

// TestRefillRacesReserve starts many reserves on an empty pool at once:
// one refill runs, the others wait on the ledger lock and find units.
func TestRefillRacesReserve(t *testing.T) {
	e, db := setup(t, Config{PoolSize: 50})
	key := ItemKey{1, 9, 1}
	receive(t, e, key, 1000)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 32 {
		wg.Go(func() {
			<-start
			if _, err := e.Reserve(t.Context(), cart(fmt.Sprint("r", i), key, 1)); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	a := checkBooks(t, db, StrategySkipLocked, key, 1000, 0)
	if a.held != 32 {
		t.Errorf("held %d, want 32", a.held)
	}
	if st := e.Stats(); st.RefilledUnits > 50+32 {
		t.Errorf("refills were not single flight: %d units pooled for a pool of 50 (%+v)", st.RefilledUnits, st)
	}
}

// TestClaimRacesExpiry: every hold ends exactly one way, claimed or expired.
func TestClaimRacesExpiry(t *testing.T) {
	e, db := setup(t, Config{PoolSize: 100})
	key := ItemKey{1, 11, 1}
	receive(t, e, key, 60)
	ctx := t.Context()
	for i := range 60 {
		p := cart(fmt.Sprint("h", i), key, 1)
		p.TTL = time.Minute
		if i%2 == 0 {
			p.TTL = time.Microsecond // due at once: expiry must win even if the claim locks first
		}
		if _, err := e.Reserve(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var claimed, expired atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 5 {
			e.ExpireDue(ctx)
		}
	})
	for i := range 60 {
		wg.Go(func() {
			err := e.Claim(ctx, 1, fmt.Sprint("h", i))
			switch {
			case err == nil:
				claimed.Add(1)
			case errors.Is(err, ErrExpired):
				expired.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if claimed.Load() != 30 || expired.Load() != 30 {
		t.Fatalf("claimed %d, expired %d: want 30 each (holds before expires_at win, due ones lose)", claimed.Load(), expired.Load())
	}
	a := checkBooks(t, db, StrategySkipLocked, key, 60, claimed.Load())
	if a.held != 0 || a.pooled+a.ledgerOnly() != expired.Load() {
		t.Errorf("books %+v after %d claims and %d expiries", a, claimed.Load(), expired.Load())
	}
	// The losers' answers are stable.
	for i := range 60 {
		err := e.Claim(ctx, 1, fmt.Sprint("h", i))
		if err != nil && !errors.Is(err, ErrExpired) {
			t.Fatal(err)
		}
	}
	t.Logf("claimed %d, expired %d", claimed.Load(), expired.Load())
}

// TestLockWaitTimeoutIsRetryable holds a reservation's row lock from
// another connection: the claim times out (1205), retries within the budget
// and then reports an error matching ErrRetryable and ErrLockWaitTimeout.
func TestLockWaitTimeoutIsRetryable(t *testing.T) {
	d := testenv.NewDatabase(t)
	cfg := d.Config()
	cfg.Params = map[string]string{"innodb_lock_wait_timeout": "1"}
	db := openConfig(t, cfg.FormatDSN())
	e, err := New(db, Config{RetryBudget: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key := ItemKey{1, 1, 1}
	receive(t, e, key, 5)
	if _, err := e.Reserve(ctx, cart("r", key, 1)); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT * FROM inventory_reservations WHERE shop_id = 1 AND reservation_id = 'r' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	err = e.Claim(ctx, 1, "r")
	if !errors.Is(err, ErrRetryable) || !errors.Is(err, ErrLockWaitTimeout) {
		t.Fatalf("claim under a held lock = %v, want ErrRetryable and ErrLockWaitTimeout", err)
	}
	tx.Rollback()
	if err := e.Claim(ctx, 1, "r"); err != nil {
		t.Fatalf("claim once the lock is gone: %v", err)
	}
	checkBooks(t, db, StrategySkipLocked, key, 5, 1)
}

func openConfig(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
