package conntag

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/holdtime/holdtime/internal/stubdriver"
	"github.com/holdtime/holdtime/testenv"
)

// TestConnInterfacesExact checks every combination: conntag's connection
// has an optional interface exactly when the driver's connection has it,
// plus the two it always has.
func TestConnInterfacesExact(t *testing.T) {
	in, err := newInstr(newConfig([]Option{WithoutMetrics()}))
	if err != nil {
		t.Fatal(err)
	}
	for caps := range 1 << numCaps {
		// A driver connection with exactly caps: conntag's own wrapper
		// around a connection that has them all is one.
		full, err := stubdriver.Connector{}.Connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		driverConn := wrapConn(&conn{inner: full, in: in}, uint8(caps))
		if got := capsOf(driverConn); got != uint8(caps) {
			t.Fatalf("wrapConn(%08b) has interfaces %08b", caps, got)
		}
		_, dc := in.newConn(driverConn)
		if got := capsOf(dc); got != uint8(caps) {
			t.Errorf("driver connection with %08b: conntag's has %08b", caps, got)
		}
		if _, ok := dc.(driver.SessionResetter); !ok {
			t.Errorf("%08b: no SessionResetter", caps)
		}
		if _, ok := dc.(driver.Validator); !ok {
			t.Errorf("%08b: no Validator", caps)
		}
		if Unwrap(dc) != driverConn {
			t.Errorf("%08b: Unwrap does not return the driver's connection", caps)
		}
	}
}

// legacyConnector's connections have only the pre-context interfaces, as
// drivers written before Go 1.8.
type legacyConnector struct{ seen *[]string }

func (l legacyConnector) Connect(context.Context) (driver.Conn, error) { return legacyConn(l), nil }
func (legacyConnector) Driver() driver.Driver                          { return nil }

type legacyConn struct{ seen *[]string }

func (legacyConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("no prepare") }
func (legacyConn) Close() error                        { return nil }
func (legacyConn) Begin() (driver.Tx, error)           { return nil, errors.New("no tx") }
func (l legacyConn) Exec(q string, _ []driver.Value) (driver.Result, error) {
	*l.seen = append(*l.seen, q)
	return driver.RowsAffected(1), nil
}

// TestLegacyExecerTagged: database/sql calls a legacy Execer without a
// context; the statement carries the hold's tag, from the borrow.
func TestLegacyExecerTagged(t *testing.T) {
	var seen []string
	db := OpenDB(legacyConnector{&seen}, WithMeterProvider(sdkmetric.NewMeterProvider()))
	defer db.Close()
	ctx := WithTag(context.Background(), "legacy_path")
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Raw(func(dc any) error {
		if _, ok := dc.(driver.ExecerContext); ok {
			t.Error("conntag's connection has ExecerContext; the driver's has not")
		}
		if _, ok := dc.(driver.Execer); !ok { //nolint:staticcheck // the legacy interface under test
			t.Error("conntag's connection lacks the driver's Execer")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecContext(ctx, "UPDATE t SET a = 1"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if len(seen) != 1 || seen[0] != "UPDATE t SET a = 1 /* conn_tag:legacy_path */" {
		t.Errorf("the driver saw %q", seen)
	}
}

// TestErrSkipPerStatement: with interpolateParams=true, the driver declines
// to interpolate one statement (its value would take it over the packet
// limit); database/sql prepares that one. The next statement with
// arguments must go as a plain, interpolated query again: the server's own
// counters of prepared statements are the truth.
func TestErrSkipPerStatement(t *testing.T) {
	d := testenv.NewDatabase(t)
	cfg := d.Config()
	cfg.InterpolateParams = true
	cfg.MaxAllowedPacket = 64 << 10
	db, err := Open("mysql", cfg.FormatDSN(), WithMeterProvider(sdkmetric.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := WithTag(context.Background(), "skip_once")
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prepares := func() int {
		var name string
		var n int
		if err := c.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var n int
	before := prepares()
	if err := c.QueryRowContext(ctx, "SELECT LENGTH(?)", strings.Repeat("y", 65<<10)).Scan(&n); err != nil || n != 65<<10 {
		t.Fatalf("SELECT LENGTH(?) of 65 KiB: %d, %v", n, err)
	}
	afterSkip := prepares()
	if afterSkip != before+1 {
		t.Fatalf("the statement the driver declined to interpolate: %d prepares, want 1", afterSkip-before)
	}
	for i := range 3 {
		if err := c.QueryRowContext(ctx, "SELECT ?", i).Scan(&n); err != nil || n != i {
			t.Fatalf("SELECT ?: %d, %v", n, err)
		}
		if _, err := c.ExecContext(ctx, "DO ?", i); err != nil {
			t.Fatal(err)
		}
	}
	if got := prepares(); got != afterSkip {
		t.Errorf("after one ErrSkip, %d later statements with arguments were prepared, want 0 (interpolated)", got-afterSkip)
	}
}

// TestStatementCacheBounded: a large statement is tagged but not kept, so
// an idle pooled connection pins no more than the bound.
func TestStatementCacheBounded(t *testing.T) {
	var last string
	db := OpenDB(stubdriver.Connector{OnStatement: func(q string) { last = q }}, WithoutMetrics())
	defer db.Close()
	ctx := WithTag(context.Background(), "big")
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := "SELECT '" + strings.Repeat("x", 1<<20) + "'"
	for _, q := range []string{"SELECT 1", big} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
		if want := q + " /* conn_tag:big */"; last != want {
			t.Fatalf("sent %.40q…, want the tagged text", last)
		}
	}
	err = c.Raw(func(dc any) error {
		var pinned int
		for _, tx := range dc.(baseConn).base().texts {
			pinned += len(tx.query) + len(tx.sent)
		}
		if limit := textCacheSize * 2 * (maxCachedText + 64); pinned > limit {
			t.Errorf("the connection pins %d bytes of statement text, over %d", pinned, limit)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOversizeSentUntagged: a statement that fits the packet limit only
// without its tag goes untagged and is counted, against the driver's limit
// (from the DSN) and the server's (asked). The control sends the tagged
// text itself, which the limit refuses.
func TestOversizeSentUntagged(t *testing.T) {
	d := testenv.NewDatabase(t)
	var serverLimit int
	if err := d.Target.Admin().QueryRow("SELECT @@GLOBAL.max_allowed_packet").Scan(&serverLimit); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		limit int // the payload limit: command byte + text
		dsn   func(*mysql.Config)
	}{
		{"driver", 64 << 10, func(c *mysql.Config) { c.MaxAllowedPacket = 64 << 10 }},
		{"server", serverLimit - 1, func(*mysql.Config) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := d.Config()
			tc.dsn(cfg)
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			db, err := Open("mysql", cfg.FormatDSN(), WithMeterProvider(mp))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			// Its text is 20 bytes under the limit: its tag is more.
			stmt := "SELECT LENGTH('" + strings.Repeat("x", tc.limit-1-20-len("SELECT LENGTH('')")) + "')"
			ctx := WithTag(context.Background(), "bulk_load")
			var n int
			if err := db.QueryRowContext(ctx, stmt).Scan(&n); err != nil {
				t.Fatalf("a statement within the limit untagged failed: %v", err)
			}
			f := &fixture{reader: reader}
			if got := f.metrics(t)["holdtime.client.untagged_oversize"][""].sum; got != 1 {
				t.Errorf("untagged_oversize = %v, want 1", got)
			}
			// The control: the same statement tagged, through the driver.
			raw, err := sql.Open("mysql", cfg.FormatDSN())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			if err := raw.QueryRow(stmt + " /* conn_tag:bulk_load */").Scan(&n); err == nil {
				t.Errorf("control: the tagged statement passed the %s limit; the test does not test it", tc.name)
			}
			// A statement well under the limit keeps its tag.
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if got := f.metrics(t)["holdtime.client.untagged_oversize"][""].sum; got != 1 {
				t.Errorf("untagged_oversize = %v after a small statement, want 1", got)
			}
		})
	}
}

// TestDriverFaithful: db.Driver() has DriverContext like the driver, Unwrap
// reaches the driver's connection through Raw, and the legacy Execer hands
// back the driver's own result type.
func TestDriverFaithful(t *testing.T) {
	d := testenv.NewDatabase(t)
	cfg := d.Config()
	cfg.MultiStatements = true
	db, err := Open("mysql", cfg.FormatDSN(), WithMeterProvider(sdkmetric.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, ok := db.Driver().(driver.DriverContext); !ok {
		t.Error("db.Driver() lacks the driver's DriverContext")
	}
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Raw(func(dc any) error {
		inner := Unwrap(dc.(driver.Conn))
		if _, ok := inner.(baseConn); ok {
			t.Error("Unwrap returned conntag's connection")
		}
		ex, ok := dc.(driver.Execer) //nolint:staticcheck // the legacy interface under test
		if !ok {
			t.Fatal("conntag's connection lacks go-sql-driver/mysql's Execer")
		}
		res, err := ex.Exec("DO 1; DO 2", nil)
		if err != nil {
			return err
		}
		if r, ok := res.(mysql.Result); !ok || len(r.AllRowsAffected()) != 2 {
			t.Errorf("Exec returned %T, not the driver's result of two statements", res)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
