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
//
// With go-sql-driver/mysql, the DSN's maxAllowedPacket is the driver's
// packet limit conntag keeps tagged statements within (see OpenDB for a
// connector).
func Open(driverName, dsn string, opts ...Option) (*sql.DB, error) {
	// database/sql offers no lookup of a registered driver by name: a handle
	// opened with the same DSN (which connects to nothing and reports a bad
	// DSN as sql.Open would) hands over its driver.
	h, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("conntag: %w (is the driver imported, e.g. _ \"github.com/go-sql-driver/mysql\"?)", err)
	}
	d := h.Driver()
	_ = h.Close()

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
	cfg := newConfig(opts)
	if cfg.clientPacket < 0 {
		cfg.clientPacket = clientPacketLimit(dsn)
	}
	if cfg.serverAddr == nil {
		WithServerAddress(dsnServerAddress(dsn))(&cfg)
	}
	return openDB(inner, cfg)
}

// OpenDB is sql.OpenDB for a wrapped connector, for drivers configured with
// a connector (mysql.NewConnector). If the options are invalid (an OTel
// instrument cannot be created), it panics: OpenDB has no error to return,
// like sql.OpenDB. Use Open to get the error instead.
//
// A connector does not show its configuration: conntag takes the driver's
// packet limit to be go-sql-driver/mysql's default (64 MiB) and learns the
// server's; a Config.MaxAllowedPacket set lower is not seen (use Open, or
// WithMaxAllowedPacket).
func OpenDB(c driver.Connector, opts ...Option) *sql.DB {
	db, err := openDB(c, newConfig(opts))
	if err != nil {
		panic(err)
	}
	return db
}

func openDB(inner driver.Connector, cfg config) (*sql.DB, error) {
	in, err := newInstr(cfg)
	if err != nil {
		return nil, fmt.Errorf("conntag: create instruments: %w", err)
	}
	c := &connector{inner: inner, in: in}
	c.drv = newDriver(inner.Driver(), c)
	if hp := cfg.holdProfile; hp != nil {
		hp.addPool(in) // removed in connector.Close
	}
	db := sql.OpenDB(c)
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
	drv   driver.Driver
}

var (
	_ driver.Connector = (*connector)(nil)
	_ io.Closer        = (*connector)(nil)
)

// Connect opens a new connection. A connection opened for a caller whose
// context carries a tag starts a hold for that tag now; one the pool opens
// in the background (no tag) starts its hold at its first driver call.
func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	return c.connect(ctx, c.inner.Connect)
}

func (c *connector) connect(ctx context.Context, dial func(context.Context) (driver.Conn, error)) (driver.Conn, error) {
	if !c.in.measure {
		ci, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		_, dc := c.in.newConn(ci)
		return dc, nil
	}
	tagged := c.in.taggedState(ctx)
	ts := tagged
	if ts == nil {
		ts = c.in.deflt
	}
	start := time.Now()
	ci, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	if c.in.cfg.metrics {
		c.in.inst.createTime.Record(ctx, time.Since(start).Seconds(), ts.metrics.holdOpts...)
	}
	cn, dc := c.in.newConn(ci)
	cn.dialNanos = int64(time.Since(start))
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
	return dc, nil
}

func (c *connector) Driver() driver.Driver { return c.drv }

func (c *connector) Close() error {
	if hp := c.in.cfg.holdProfile; hp != nil {
		hp.removePool(c.in)
	}
	err := c.in.close()
	if cl, ok := c.inner.(io.Closer); ok {
		err = errors.Join(err, cl.Close())
	}
	return err
}

// wrappedDriver is what (*sql.DB).Driver returns: conntag's driver, which
// has driver.DriverContext exactly when the wrapped driver has it. Its Open
// and OpenConnector give connections tagged and measured like the pool's
// (with the pool's options); the wrapped driver itself is not reachable
// from the *sql.DB.
type wrappedDriver struct {
	inner driver.Driver
	c     *connector
}

type wrappedDriverContext struct{ *wrappedDriver }

func newDriver(inner driver.Driver, c *connector) driver.Driver {
	d := &wrappedDriver{inner: inner, c: c}
	if _, ok := inner.(driver.DriverContext); ok {
		return wrappedDriverContext{d}
	}
	return d
}

func (d *wrappedDriver) Open(name string) (driver.Conn, error) {
	return d.c.connect(context.Background(), func(context.Context) (driver.Conn, error) { return d.inner.Open(name) })
}

// OpenConnector returns a connector for name through conntag, sharing the
// pool's measurements.
func (d wrappedDriverContext) OpenConnector(name string) (driver.Connector, error) {
	ic, err := d.inner.(driver.DriverContext).OpenConnector(name)
	if err != nil {
		return nil, err
	}
	return &sharedConnector{inner: ic, c: d.c}, nil
}

// sharedConnector opens connections for another *sql.DB with the pool's
// measurements; closing it leaves them to the pool.
type sharedConnector struct {
	inner driver.Connector
	c     *connector
}

func (s *sharedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	return s.c.connect(ctx, s.inner.Connect)
}

func (s *sharedConnector) Driver() driver.Driver { return s.c.drv }

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
