package collector

import (
	"context"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// TestAppServerJoin: a transaction whose only statements are prepared
// statements' executions (MariaDB records no text for them), held idle,
// directly on the server. The server cannot tell its tag; conntag's hold
// span names the connection (holdtime.session_id = CONNECTION_ID()), and
// the server layer takes the tag from it: within 15 % of the client's
// measure, almost nothing unknown.
func TestAppServerJoin(t *testing.T) {
	d := testenv.NewDatabase(t)
	ctx := context.Background()
	if _, err := d.Open(t).ExecContext(ctx, "CREATE TABLE q (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	d.Open(t).ExecContext(ctx, "INSERT INTO q VALUES (1, 0)")
	c, err := New(Config{
		MySQL: []MySQLConfig{{Name: "db", DSN: d.Target.Config("").FormatDSN(), Interval: 250 * time.Millisecond, TagGrace: 3 * time.Second}},
		OTLP:  OTLPConfig{Enabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	polls := countPolls(c)
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- c.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	polls.wait(t, "db", SourceMySQL, 2)

	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(200*time.Millisecond)))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	connector, err := mysql.NewConnector(d.Config())
	if err != nil {
		t.Fatal(err)
	}
	db := conntag.OpenDB(connector, conntag.WithTracerProvider(tp), conntag.WithSessionID(), conntag.WithoutMetrics())
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	tctx := conntag.WithTag(ctx, "binary_txn")
	var client float64
	for range 3 {
		start := time.Now()
		tx, err := db.BeginTx(tctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		// An argument: go-sql-driver prepares and executes (binary protocol).
		if _, err := tx.ExecContext(tctx, "UPDATE q SET n = n + 1 WHERE id = ?", 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1200 * time.Millisecond) // idle inside the transaction
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		client += time.Since(start).Seconds()
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	waitSettledMySQL(t, polls, func() string {
		c.st.mu.Lock()
		defer c.st.mu.Unlock()
		return formatFloat(holdOf(c.st, "db", SourceMySQL, "binary_txn")) + formatFloat(holdOf(c.st, "db", SourceMySQL, UnknownTag))
	})
	c.st.mu.Lock()
	got, unknown := holdOf(c.st, "db", SourceMySQL, "binary_txn"), holdOf(c.st, "db", SourceMySQL, UnknownTag)
	c.st.mu.Unlock()
	t.Logf("binary_txn: client %.2f s, server layer %.2f s (%+.1f%%), unknown %.2f s", client, got, pct(got, client), unknown)
	if math.Abs(pct(got, client)) > 15 {
		t.Errorf("binary_txn server hold %.2f s, the client measured %.2f s", got, client)
	}
	if unknown > 0.05*client {
		t.Errorf("unknown %.2f s", unknown)
	}
}

func formatFloat(f float64) string { return time.Duration(f * 1e9).String() }

// waitSettledMySQL waits until state stops changing over 15 MySQL polls.
func waitSettledMySQL(t *testing.T, polls *pollCount, state func() string) {
	t.Helper()
	prev, same := "", 0
	for i := 0; i < 200 && same < 15; i++ {
		polls.wait(t, "db", SourceMySQL, 1)
		if s := state(); s == prev {
			same++
		} else {
			prev, same = s, 0
		}
	}
}
