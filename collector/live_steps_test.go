package collector

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// The steps the live tests share: a ProxySQL in front of a test database,
// a collector running until the test ends, conntag clients whose hold
// spans go to a collector, tagged client goroutines.

// runUntilCleanup runs c until the test ends.
func runUntilCleanup(t *testing.T, c *Collector) {
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// proxySQLFor starts a ProxySQL in front of d, closed when the test ends.
func proxySQLFor(t *testing.T, d *testenv.Database) *testenv.ProxySQL {
	t.Helper()
	px, err := testenv.StartProxySQL(context.Background(), testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return px
}

// qBehindProxySQL is a database with table q of five rows (id 1 to 5, n
// 0) and a ProxySQL in front of it whose backends are open (warmProxySQL).
func qBehindProxySQL(t *testing.T) (*testenv.Database, *testenv.ProxySQL) {
	t.Helper()
	d := testenv.NewDatabase(t)
	px := proxySQLFor(t, d)
	admin := d.Open(t)
	for _, q := range []string{
		"CREATE TABLE q (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO q VALUES (1,0),(2,0),(3,0),(4,0),(5,0)",
	} {
		if _, err := admin.ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	warmProxySQL(t, px)
	return d, px
}

// spansTo is a tracer provider that exports its spans to the OTLP
// receiver at url in batches of batchTimeout, each span naming the
// address appAddr the app dials; shut down when the test ends.
func spansTo(t *testing.T, url, appAddr string, batchTimeout time.Duration) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(url))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(batchTimeout)),
		sdktrace.WithSpanProcessor(newDialledAddress(t, appAddr)))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp
}

// openConntagDB is a conntag client of cfg whose hold spans name their
// ProxySQL session and go to tp; closed when the test ends.
func openConntagDB(t *testing.T, cfg *mysql.Config, tp *sdktrace.TracerProvider) *sql.DB {
	t.Helper()
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := conntag.OpenDB(connector, conntag.WithTracerProvider(tp), conntag.WithSessionID(), conntag.WithoutMetrics())
	t.Cleanup(func() { db.Close() })
	return db
}

// taggedClients runs client goroutines, each under a tag; a client's
// error fails the test.
type taggedClients struct {
	t  *testing.T
	wg sync.WaitGroup
}

// run starts body with a context carrying tag.
func (c *taggedClients) run(tag string, body func(ctx context.Context) error) {
	c.wg.Go(func() {
		if err := body(conntag.WithTag(context.Background(), tag)); err != nil {
			c.t.Errorf("%s: %v", tag, err)
		}
	})
}

// wait waits for every client to return.
func (c *taggedClients) wait() { c.wg.Wait() }
