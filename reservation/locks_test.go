package reservation

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
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
