package reservation

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// TestReserveSameKeyTwice: two parts of one cart on the same item/group must
// take distinct units. FOR UPDATE SKIP LOCKED does not skip rows the same
// transaction locked, so one fetch branch per part would hand both parts the
// same units and hold more than it took.
func TestReserveSameKeyTwice(t *testing.T) {
	line := func(item, qty int64, groups ...uint64) Line {
		return Line{ItemID: uint64(item), Quantity: qty, GroupIDs: groups}
	}
	for _, tc := range []struct {
		name  string
		stock map[uint64]int64 // by group, item 5
		lines []Line
		held  map[uint64]int64 // by group, after the reserve
	}{
		{name: "two lines of one item", stock: map[uint64]int64{1: 10},
			lines: []Line{line(5, 3, 1), line(5, 3, 1)}, held: map[uint64]int64{1: 6}},
		// The first line runs short in group 1 and moves its rest onto
		// group 2, where the second line already is.
		{name: "replan onto another line's group", stock: map[uint64]int64{1: 1, 2: 10},
			lines: []Line{line(5, 3, 1, 2), line(5, 2, 2)}, held: map[uint64]int64{1: 1, 2: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := setup(t, Config{PoolSize: 10})
			ctx := t.Context()
			var total int64
			for g, n := range tc.stock {
				receive(t, e, ItemKey{1, 5, g}, n)
				total += n
			}
			res, err := e.Reserve(ctx, ReserveParams{ShopID: 1, ReservationID: "dup", Lines: tc.lines})
			if err != nil {
				t.Fatal(err)
			}
			var held int64
			for g, want := range tc.held {
				key := ItemKey{1, 5, g}
				if a := checkBooks(t, db, StrategySkipLocked, key, tc.stock[g], 0); a.held != want {
					t.Errorf("group %d: held %d, want %d (%+v)", g, a.held, want, a)
				}
				held += want
			}
			if got := sumLines(res.Lines); got != held {
				t.Errorf("reservation lines %+v hold %d, want %d", res.Lines, got, held)
			}
			// Sell the rest one unit at a time: the books must end with
			// every unit sold once, none twice.
			sold := held
			if err := e.Claim(ctx, 1, "dup"); err != nil {
				t.Fatal(err)
			}
			for g, n := range tc.stock {
				key := ItemKey{1, 5, g}
				for i := range n + 1 {
					id := "rest-" + string(rune('a'+g)) + "-" + string(rune('a'+i))
					_, err := e.Reserve(ctx, cart(id, key, 1))
					if errors.Is(err, ErrInsufficientStock) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					if err := e.Claim(ctx, 1, id); err != nil {
						t.Fatal(err)
					}
					sold++
				}
			}
			if sold != total {
				t.Errorf("sold %d of %d stocked", sold, total)
			}
			for g := range tc.stock {
				key := ItemKey{1, 5, g}
				a := books(t, db, StrategySkipLocked, key)
				checkBooks(t, db, StrategySkipLocked, key, tc.stock[g], a.claimed)
				if a.claimed != tc.stock[g] || a.pooled != 0 {
					t.Errorf("group %d: %+v after selling out %d", g, a, tc.stock[g])
				}
			}
		})
	}
}

// TestReserveSameKeyShort: two lines of one item that together need more
// than the ledger has are ErrInsufficientStock at once, not contention
// retried until the budget runs out.
func TestReserveSameKeyShort(t *testing.T) {
	e, db := setup(t, Config{PoolSize: 10, RetryBudget: time.Second})
	key := ItemKey{1, 5, 1}
	receive(t, e, key, 5)
	p := ReserveParams{ShopID: 1, ReservationID: "short", Lines: []Line{
		{ItemID: 5, Quantity: 3, GroupIDs: []uint64{1}}, {ItemID: 5, Quantity: 3, GroupIDs: []uint64{1}}}}
	if _, err := e.Reserve(t.Context(), p); !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("reserve 3+3 of 5 = %v, want ErrInsufficientStock", err)
	}
	if a := checkBooks(t, db, StrategySkipLocked, key, 5, 0); a.held != 0 {
		t.Errorf("held %d after a failed reserve", a.held)
	}
	// One inline refill ran and pooled all 5 units; the ledger then said no.
	if st := e.Stats(); st.InlineRefills != 1 || st.RefilledUnits != 5 {
		t.Errorf("inline refills %d (want 1), refilled units %d (want 5)", st.InlineRefills, st.RefilledUnits)
	}
	// Another reserve finds the pool short again: its inline refill adds
	// nothing, and is counted all the same.
	if _, err := e.Reserve(t.Context(), cart("seven", key, 7)); !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("reserve 7 of 5 = %v, want ErrInsufficientStock", err)
	}
	if st := e.Stats(); st.InlineRefills != 2 || st.RefilledUnits != 5 {
		t.Errorf("inline refills %d (want 2), refilled units %d (want 5)", st.InlineRefills, st.RefilledUnits)
	}
	// A line that can move on gives way to one that cannot.
	receive(t, e, ItemKey{1, 5, 2}, 5)
	p.ReservationID = "moves"
	p.Lines[0].GroupIDs = []uint64{1, 2}
	res, err := e.Reserve(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if sumLines(res.Lines) != 6 {
		t.Errorf("lines %+v, want 6 units", res.Lines)
	}
	checkBooks(t, db, StrategySkipLocked, key, 5, 0)
	checkBooks(t, db, StrategySkipLocked, ItemKey{1, 5, 2}, 5, 0)
}

// TestReserveGroupFallback: a line takes what its first location group has
// and the rest from the next.
func TestReserveGroupFallback(t *testing.T) {
	for _, s := range []Strategy{StrategySkipLocked, StrategyForUpdate, StrategyCounter} {
		for _, tc := range []struct {
			name  string
			first int64 // stock of group 1; -1: no ledger row; -2: stocked, then adjusted to 0
			want  []ReservedLine
		}{
			{name: "first short", first: 2, want: []ReservedLine{{6, 1, 2}, {6, 2, 3}}},
			{name: "first covers", first: 9, want: []ReservedLine{{6, 1, 5}}},
			{name: "first unknown", first: -1, want: []ReservedLine{{6, 2, 5}}},
			{name: "first empty", first: -2, want: []ReservedLine{{6, 2, 5}}},
		} {
			t.Run(string(s)+"/"+tc.name, func(t *testing.T) {
				e, db := setup(t, Config{Strategy: s, PoolSize: 10})
				ctx := t.Context()
				g1, g2 := ItemKey{1, 6, 1}, ItemKey{1, 6, 2}
				switch {
				case tc.first > 0:
					receive(t, e, g1, tc.first)
				case tc.first == -2:
					receive(t, e, g1, 4)
					if _, err := e.Reserve(ctx, cart("warm", g1, 1)); err != nil { // pools the units
						t.Fatal(err)
					}
					if err := e.Release(ctx, 1, "warm"); err != nil {
						t.Fatal(err)
					}
					if err := e.Adjust(ctx, StockParams{ItemKey: g1, Quantity: -4}); err != nil {
						t.Fatal(err)
					}
				}
				receive(t, e, g2, 10)
				p := ReserveParams{ShopID: 1, ReservationID: "r", Lines: []Line{{ItemID: 6, Quantity: 5, GroupIDs: []uint64{1, 2}}}}
				res, err := e.Reserve(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				got := slices.Clone(res.Lines)
				slices.SortFunc(got, func(a, b ReservedLine) int { return int(a.GroupID) - int(b.GroupID) })
				if !slices.Equal(got, tc.want) {
					t.Errorf("lines %+v, want %+v", got, tc.want)
				}
				if err := e.Claim(ctx, 1, "r"); err != nil {
					t.Fatal(err)
				}
				var claimed1 int64
				for _, l := range tc.want {
					if l.GroupID == 1 {
						claimed1 = l.Quantity
					}
				}
				checkBooks(t, db, s, g1, max(tc.first, 0), claimed1)
				checkBooks(t, db, s, g2, 10, 5-claimed1)
				// Both groups together cannot cover one more than they have.
				p.ReservationID = "too-many"
				p.Lines[0].Quantity = max(tc.first, 0) + 10 - 5 + 1
				if _, err := e.Reserve(ctx, p); !errors.Is(err, ErrInsufficientStock) {
					t.Errorf("reserve beyond both groups = %v, want ErrInsufficientStock", err)
				}
			})
		}
	}
}

// TestReserveRetriesInTxDeadlock: a deadlock or lock wait timeout in the
// caller's in-transaction work is retried like one in the engine's own
// statements; other errors, a duplicate key of the caller's included, abort
// Reserve with the caller's error.
func TestReserveRetriesInTxDeadlock(t *testing.T) {
	e, db := setup(t, Config{PoolSize: 10})
	ctx := t.Context()
	key := ItemKey{1, 8, 1}
	receive(t, e, key, 10)

	calls := 0
	p := cart("deadlocked-once", key, 2)
	p.InTx = func(context.Context, *sql.Tx) error {
		calls++
		if calls == 1 {
			return &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
		}
		return nil
	}
	if _, err := e.Reserve(ctx, p); err != nil {
		t.Fatalf("reserve after a deadlock in InTx: %v", err)
	}
	if calls != 2 {
		t.Errorf("InTx ran %d times, want 2", calls)
	}

	for _, callerErr := range []error{
		errors.New("order rejected"),
		&mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'o-1' for key 'PRIMARY'"},
	} {
		p := cart("fails", key, 1)
		calls := 0
		p.InTx = func(context.Context, *sql.Tx) error { calls++; return callerErr }
		_, err := e.Reserve(ctx, p)
		if !errors.Is(err, callerErr) || errors.Is(err, ErrRetryable) || errors.Is(err, ErrNotFound) || calls != 1 {
			t.Errorf("InTx error %v: Reserve = %v after %d calls, want the caller's error after 1", callerErr, err, calls)
		}
	}
	if a := checkBooks(t, db, StrategySkipLocked, key, 10, 0); a.held != 2 {
		t.Errorf("held %d, want 2", a.held)
	}
}

// TestDeleteUnitsCountsRows: deleting units that are not there (or the same
// unit twice) is an error, never a hold on units nobody took.
func TestDeleteUnitsCountsRows(t *testing.T) {
	e, _ := setup(t, Config{PoolSize: 10})
	ctx := t.Context()
	key := ItemKey{1, 9, 1}
	receive(t, e, key, 3)
	if _, err := e.Refill(ctx, key); err != nil {
		t.Fatal(err)
	}
	tx, err := e.begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, removeUnitsSelect, key.ShopID, key.ItemID, key.GroupID, 3)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := scanIDs(rows)
	if err != nil || len(ids) != 3 {
		t.Fatalf("ids %v, %v", ids, err)
	}
	if err := deleteUnits(ctx, tx, []keyUnits{{key, append(ids, ids[0])}}); err == nil {
		t.Fatal("deleting 3 units listed 4 times succeeded")
	}
}

func sumLines(lines []ReservedLine) int64 {
	var n int64
	for _, l := range lines {
		n += l.Quantity
	}
	return n
}
