package locks_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/holdtime/holdtime/locks"
	"github.com/holdtime/holdtime/reservation"
)

// TestFlashSaleLocks runs a flash sale through the reservation engine: 8
// buyers at once reserve 1 to 3 units each from one item. Every few
// reserves, one inspects its own transaction before it commits (InTx): the
// unit pool's clustered index holds exactly one record lock per unit it
// reserved (1.0), and no transaction of the sale holds a gap, next-key,
// supremum or insert-intention lock. The reserved quantity is the
// independent truth.
func TestFlashSaleLocks(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	engine, err := reservation.New(e.tagged, reservation.Config{PoolSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key := reservation.ItemKey{ShopID: 1, ItemID: 42, GroupID: 1}
	if err := engine.Receive(ctx, reservation.StockParams{ItemKey: key, Quantity: 2000}); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Refill(ctx, key); err != nil {
		t.Fatal(err)
	}
	units := e.d.Name + ".inventory_reservation_units"
	var (
		inspect   sync.Mutex // one inspection at a time: see waitFor on INNODB_TRX's cache
		inspected atomic.Int64
		mu        sync.Mutex
		failures  []string
		snapshots []*locks.Snapshot
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	check := func(ctx context.Context, tx *sql.Tx, qty int64) error {
		if !inspect.TryLock() {
			return nil // another reserve is being inspected
		}
		defer inspect.Unlock()
		var id int64
		if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			return err
		}
		s := e.readUntil("the reserve's transaction", func(s *locks.Snapshot) bool { return trxOf(s, id) != nil })
		mu.Lock()
		snapshots = append(snapshots, s)
		mu.Unlock()
		tr := trxOf(s, id)
		primary, secondary := 0, 0
		for _, l := range tr.Locks {
			switch {
			case l.Table != units || l.Index == "":
			case l.Index == "PRIMARY" && l.Kind == locks.KindRecord:
				primary += l.Rows
			case l.Index != "PRIMARY" && l.Kind == locks.KindRecord:
				secondary += l.Rows
			}
		}
		if tr.Tag != "inventory_reserve" || tr.Isolation != "READ COMMITTED" || !tr.LocksKnown || tr.LocksPartial {
			fail("reserve transaction: tag %q isolation %q locks known %v partial %v", tr.Tag, tr.Isolation, tr.LocksKnown, tr.LocksPartial)
		}
		if float64(primary)/float64(qty) != 1.0 {
			fail("reserve of %d units: %d record locks on the pool's clustered index (%.2f per unit), want 1.0; locks %v",
				qty, primary, float64(primary)/float64(qty), tr.Locks)
		}
		if secondary > 0 {
			t.Logf("reserve of %d units: its DELETE by id also locked %d records of the pool's secondary index", qty, secondary)
		}
		inspected.Add(1)
		return nil
	}
	const buyers, perBuyer = 8, 12
	var wg sync.WaitGroup
	var reserved atomic.Int64
	for b := range buyers {
		wg.Go(func() {
			for i := range perBuyer {
				qty := int64(1 + (b+i)%3)
				p := reservation.ReserveParams{ShopID: key.ShopID, ReservationID: fmt.Sprintf("b%d-%d", b, i),
					Lines: []reservation.Line{{ItemID: key.ItemID, Quantity: qty, GroupIDs: []uint64{key.GroupID}}}}
				if i%3 == 0 {
					p.InTx = func(ctx context.Context, tx *sql.Tx) error { return check(ctx, tx, qty) }
				}
				if _, err := engine.Reserve(ctx, p); err != nil {
					fail("reserve: %v", err)
					return
				}
				reserved.Add(qty)
			}
		})
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	if inspected.Load() < 3 {
		t.Fatalf("only %d reserves inspected", inspected.Load())
	}
	// Every snapshot shows every transaction open at that moment, the
	// inspected one and the buyers' others.
	gapLike, seen := 0, 0
	for _, s := range snapshots {
		for _, tr := range s.Transactions {
			if !strings.HasPrefix(tr.Tag, "inventory_") {
				continue
			}
			seen++
			if n := rowsOf(&tr, locks.KindGap, locks.KindNextKey, locks.KindSupremum, locks.KindInsertIntention); n > 0 {
				gapLike += n
				t.Errorf("%s transaction holds %d gap-type locks: %v", tr.Tag, n, tr.Locks)
			}
		}
		if h := hintOf(s, locks.HintGapLocks, "inventory_reserve"); h != nil {
			t.Errorf("gap hint during the sale: %s", h.Text)
		}
	}
	t.Logf("%d units reserved; %d reserves inspected; %d transactions of the sale in %d snapshots; %d gap-type locks",
		reserved.Load(), inspected.Load(), seen, len(snapshots), gapLike)
}
