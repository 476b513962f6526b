package conntag

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Open opens a *sql.DB through the registered driver driverName (for
// example "mysql"), wrapped so that every statement carries its context's
// tag and every hold is measured. It is sql.Open with options: keep passing
// the *sql.DB to your code and libraries.
func Open(driverName, dsn string, opts ...Option) (*sql.DB, error) {
	// database/sql offers no lookup of a registered driver by name; opening
	// a handle (which connects to nothing) and asking for its driver is the
	// supported way.
	probe, err := sql.Open(driverName, "")
	if err != nil {
		return nil, fmt.Errorf("conntag: %w (is the driver imported, e.g. _ \"github.com/go-sql-driver/mysql\"?)", err)
	}
	d := probe.Driver()
	_ = probe.Close()

	var inner driver.Connector
	if dc, ok := d.(driver.DriverContext); ok {
		inner, err = dc.OpenConnector(dsn)
		if err != nil {
			// Driver errors about a DSN may quote it; don't add it again.
			return nil, fmt.Errorf("conntag: open connector for %s: %w", driverName, err)
		}
	} else {
		inner = dsnConnector{dsn: dsn, driver: d}
	}
	return openDB(inner, opts)
}

// OpenDB is sql.OpenDB for a wrapped connector, for drivers configured with
// a connector (mysql.NewConnector). If the options are invalid (an OTel
// instrument cannot be created), it panics: OpenDB has no error to return,
// like sql.OpenDB. Use Open to get the error instead.
func OpenDB(c driver.Connector, opts ...Option) *sql.DB {
	db, err := openDB(c, opts)
	if err != nil {
		panic(err)
	}
	return db
}

func openDB(inner driver.Connector, opts []Option) (*sql.DB, error) {
	in, err := newInstr(newConfig(opts))
	if err != nil {
		return nil, fmt.Errorf("conntag: create instruments: %w", err)
	}
	db := sql.OpenDB(&connector{inner: inner, in: in, drv: &wrappedDriver{inner: inner.Driver(), in: in}})
	if err := in.registerCallbacks(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("conntag: register metrics callback: %w", err)
	}
	return db, nil
}

// connector wraps a driver.Connector. database/sql calls Close on it when
// the *sql.DB is closed, which unregisters the metric callbacks.
type connector struct {
	inner driver.Connector
	in    *instr
	drv   *wrappedDriver
}

var (
	_ driver.Connector = (*connector)(nil)
	_ io.Closer        = (*connector)(nil)
)

// Connect opens a new connection. A connection opened for a caller whose
// context carries a tag starts a hold for that tag now; one the pool opens
// in the background (no tag) starts its hold at its first driver call.
func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	if !c.in.measure {
		ci, err := c.inner.Connect(ctx)
		if err != nil {
			return nil, err
		}
		return &conn{inner: ci, in: c.in}, nil
	}
	tagged := c.in.taggedState(ctx)
	ts := tagged
	if ts == nil {
		ts = c.in.deflt
	}
	start := time.Now()
	ci, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if c.in.cfg.metrics {
		c.in.inst.createTime.Record(ctx, time.Since(start).Seconds(), ts.metrics.holdOpts...)
	}
	cn := &conn{inner: ci, in: c.in}
	if c.in.cfg.sessionID && c.in.tracer != nil {
		if cn.sessionID, err = sessionID(ctx, ci); err != nil {
			ci.Close()
			return nil, err
		}
	}
	c.in.track(cn)
	if tagged != nil {
		c.in.borrow(ctx, cn, tagged)
	}
	return cn, nil
}

func (c *connector) Driver() driver.Driver { return c.drv }

func (c *connector) Close() error {
	err := c.in.close()
	if cl, ok := c.inner.(io.Closer); ok {
		err = errors.Join(err, cl.Close())
	}
	return err
}

// wrappedDriver is what (*sql.DB).Driver returns.
type wrappedDriver struct {
	inner driver.Driver
	in    *instr
}

func (d *wrappedDriver) Open(name string) (driver.Conn, error) {
	ci, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	cn := &conn{inner: ci, in: d.in}
	if d.in.measure {
		d.in.track(cn)
	}
	return cn, nil
}

// dsnConnector adapts a driver without DriverContext.
type dsnConnector struct {
	dsn    string
	driver driver.Driver
}

func (t dsnConnector) Connect(context.Context) (driver.Conn, error) { return t.driver.Open(t.dsn) }
func (t dsnConnector) Driver() driver.Driver                        { return t.driver }

// sessionIDQuery must be sent exactly so: ProxySQL answers only this text
// itself; with a comment added it would go to the backend.
const sessionIDQuery = "SELECT CONNECTION_ID()"

// sessionID asks a new connection for its session id (see WithSessionID).
func sessionID(ctx context.Context, ci driver.Conn) (int64, error) {
	qc, ok := ci.(driver.QueryerContext)
	if !ok {
		return 0, nil
	}
	rows, err := qc.QueryContext(ctx, sessionIDQuery, nil)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	dest := make([]driver.Value, 1)
	if err := rows.Next(dest); err != nil {
		return 0, err
	}
	switch v := dest[0].(type) {
	case int64:
		return v, nil
	case uint64:
		return int64(v), nil
	case []byte:
		return strconv.ParseInt(string(v), 10, 64)
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("conntag: %s returned %T", sessionIDQuery, dest[0])
}
