package reservation

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/holdtime/holdtime/locks"
	"github.com/holdtime/holdtime/testenv"
)

// TestOneRowLockPerUnit: a reserve of N units locks exactly N unit rows
// (another transaction can lock every other pooled unit), and a refill inserting units of
// the same item from another connection does not wait on those locks (no
// gap locks under READ COMMITTED): its lock wait timeout is 1 s, and it must
// succeed while the reserve is still open.
func TestOneRowLockPerUnit(t *testing.T) {
	d := testenv.NewDatabase(t)
	cfg := d.Config()
	cfg.Params = map[string]string{"innodb_lock_wait_timeout": "1"}
	db := openConfig(t, cfg.FormatDSN())
	e, err := New(db, Config{PoolSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key := ItemKey{1, 5, 1}
	receive(t, e, key, 500)
	if _, err := e.Refill(ctx, key); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{1, 5, 20} {
		p := cart(fmt.Sprint("r", n), key, n)
		p.InTx = func(ctx context.Context, tx *sql.Tx) error {
			// INNODB_TRX is a cache refreshed at most every 100 ms and
			// MariaDB's trx_rows_locked undercounts after a DELETE, so the
			// test relies on what another transaction can lock: every pooled
			// unit but the n this reserve holds.
			otx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return err
			}
			defer otx.Rollback()
			rows, err := otx.QueryContext(ctx, removeUnitsSelect, key.ShopID, key.ItemID, key.GroupID, 1_000_000)
			if err != nil {
				return err
			}
			ids, err := scanIDs(rows)
			if err != nil {
				return err
			}
			var pooled int64
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM inventory_reservation_units`).Scan(&pooled); err != nil {
				return err
			}
			if int64(len(ids)) != pooled-n {
				t.Errorf("with %d units reserved, another transaction locked %d of %d pooled units, want %d",
					n, len(ids), pooled, pooled-n)
			}
			otx.Rollback()
			// A refill of the same item while the units are locked.
			rtx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return err
			}
			defer rtx.Rollback()
			if err := e.addToPool(ctx, rtx, key, 10); err != nil {
				t.Errorf("refill insert blocked by the reserve's locks: %v", err)
			}
			return nil
		}
		if _, err := e.Reserve(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
}

// countingConnector counts statements that read the unit pool.
type countingConnector struct {
	driver.Connector
	unitFetches atomic.Int64
}

func (c *countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: c}, nil
}

type countingConn struct {
	driver.Conn
	c *countingConnector
}

func (cc *countingConn) count(query string) {
	if strings.Contains(query, "FROM inventory_reservation_units") && strings.HasPrefix(query, "(SELECT") {
		cc.c.unitFetches.Add(1)
	}
}

func (cc *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cc.count(query)
	return cc.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (cc *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return cc.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (cc *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return cc.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

// TestOneRoundTripPerFetch: carts of 1 to 20 lines fetch their units in one
// statement (one round trip with interpolateParams).
func TestOneRoundTripPerFetch(t *testing.T) {
	cfg := testenv.NewDatabase(t).Config()
	cfg.InterpolateParams = true
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	counter := &countingConnector{Connector: inner}
	db := sql.OpenDB(counter)
	t.Cleanup(func() { db.Close() })
	e, err := New(db, Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for item := range uint64(20) {
		key := ItemKey{1, item, 1}
		receive(t, e, key, 100)
		if _, err := e.Refill(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	for _, lines := range []int{1, 2, 5, 20} {
		p := ReserveParams{ShopID: 1, ReservationID: fmt.Sprint("cart", lines)}
		for i := range lines {
			p.Lines = append(p.Lines, Line{ItemID: uint64(i), Quantity: 2, GroupIDs: []uint64{1}})
		}
		before := counter.unitFetches.Load()
		if _, err := e.Reserve(ctx, p); err != nil {
			t.Fatal(err)
		}
		if got := counter.unitFetches.Load() - before; got != 1 {
			t.Errorf("cart of %d lines: %d unit fetch statements, want 1", lines, got)
		}
	}
}

// TestReserveLocksOneRecordPerUnit reads the reserve's own locks from the
// server (InnoDB's lock output through package locks, while the reserve's
// transaction is open, from its InTx): a cart of N units, on one item or
// several, holds exactly N record locks on the unit pool, all on its
// primary key, and no other lock on that table but the table's intention
// lock. The delete of the units, by full primary key through the primary
// key, adds none (by id it locked each unit's record in the id index too).
func TestReserveLocksOneRecordPerUnit(t *testing.T) {
	d := testenv.NewDatabase(t)
	ctx := t.Context()
	reader, err := locks.New(d.Target.Admin(), locks.Config{ParseTag: func(q string) (string, bool) {
		_, rest, ok := strings.Cut(q, "/* conn_tag:")
		tag, _, _ := strings.Cut(rest, " */")
		return tag, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Target.Flavor == testenv.MariaDB {
		was, err := reader.LockOutputEnabled(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := reader.SetLockOutput(ctx, true); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reader.SetLockOutput(context.Background(), was) })
	}
	cfg := d.Config()
	cfg.InterpolateParams = true
	db := openConfig(t, cfg.FormatDSN())
	e, err := New(db, Config{PoolSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	a, b := ItemKey{1, 1, 1}, ItemKey{1, 2, 1}
	for _, k := range []ItemKey{a, b} {
		receive(t, e, k, 100)
		if _, err := e.Refill(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	units := d.Name + ".inventory_reservation_units"
	for i, lines := range [][]Line{
		{{ItemID: a.ItemID, Quantity: 1, GroupIDs: []uint64{1}}},
		{{ItemID: a.ItemID, Quantity: 7, GroupIDs: []uint64{1}}},
		{{ItemID: a.ItemID, Quantity: 3, GroupIDs: []uint64{1}}, {ItemID: b.ItemID, Quantity: 4, GroupIDs: []uint64{1}}},
	} {
		var want int
		for _, l := range lines {
			want += int(l.Quantity)
		}
		inspected := false
		p := ReserveParams{ShopID: 1, ReservationID: fmt.Sprint("c", i), Lines: lines}
		p.InTx = func(ctx context.Context, tx *sql.Tx) error {
			var id int64
			if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				return err
			}
			// INNODB_TRX is a cache the server refreshes only after 100 ms
			// without a read: poll it until the transaction shows.
			var tr *locks.Transaction
			for deadline := time.Now().Add(20 * time.Second); tr == nil; {
				s, err := reader.Read(ctx)
				if err != nil {
					return err
				}
				for j := range s.Transactions {
					if s.Transactions[j].ThreadID == id {
						tr = &s.Transactions[j]
					}
				}
				if tr == nil {
					if time.Now().After(deadline) {
						return fmt.Errorf("transaction of connection %d never showed in INNODB_TRX", id)
					}
					time.Sleep(150 * time.Millisecond)
				}
			}
			if !tr.LocksKnown || tr.LocksPartial {
				return fmt.Errorf("locks of the reserve not readable: known %v, partial %v", tr.LocksKnown, tr.LocksPartial)
			}
			primary := 0
			for _, l := range tr.Locks {
				switch {
				case l.Table != units || l.Kind == locks.KindTableIntention:
				case l.Index == "PRIMARY" && l.Kind == locks.KindRecord && !l.Waiting:
					primary += l.Rows
				default:
					t.Errorf("cart %d: a lock on the unit pool other than a unit's record: %v", i, l)
				}
			}
			if primary != want {
				t.Errorf("cart %d of %d units: %d record locks on the pool's primary key, want %d; locks %v", i, want, primary, want, tr.Locks)
			}
			inspected = true
			return nil
		}
		if _, err := e.Reserve(ctx, p); err != nil {
			t.Fatal(err)
		}
		if !inspected {
			t.Fatalf("cart %d: its transaction was not inspected", i)
		}
	}
}
