package conntag

import (
	"context"
	"net"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/holdtime/holdtime/testenv"
)

func TestDSNServerAddress(t *testing.T) {
	for dsn, want := range map[string]string{
		"user:pass@tcp(127.0.0.1:6033)/shop":              "127.0.0.1:6033",
		"user:p@ss/w(rd)@tcp(proxysql:6033)/shop?loc=UTC": "proxysql:6033",
		"tcp([::1]:3306)/":                                "[::1]:3306",
		"user@tcp(db)/":                                   "db",
		"user:pass@unix(/run/mysqld/mysqld.sock)/shop":    "",
		"/shop":     "",
		"not a dsn": "",
		"user:pass@tcp(127.0.0.1:6033)/shop?timeout=5s&x=/y": "",
	} {
		if got := dsnServerAddress(dsn); got != want {
			t.Errorf("dsnServerAddress(%q) = %q, want %q", dsn, got, want)
		}
	}
	for in, want := range map[string]string{"127.0.0.1:6033": "127.0.0.1 6033", "db": "db 3306", "[::1]:3306": "::1 3306"} {
		host, port, ok := splitServerAddress(in)
		if got := host + " " + strconv.Itoa(port); !ok || got != want {
			t.Errorf("splitServerAddress(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "host:0", "host:99999", ":3306", "/tmp/sock"} {
		if _, _, ok := splitServerAddress(bad); ok {
			t.Errorf("splitServerAddress(%q) accepted", bad)
		}
	}
}

// TestHoldSpansNameTheServerAddress: Open reads the address from the DSN,
// OpenDB takes it from WithServerAddress, and the hold span carries it as
// OpenTelemetry's server.address and server.port.
func TestHoldSpansNameTheServerAddress(t *testing.T) {
	d := testenv.NewDatabase(t)
	host, port, err := net.SplitHostPort(d.Config().Addr)
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, rec *tracetest.SpanRecorder) {
		t.Helper()
		found := false
		for _, s := range rec.Ended() {
			if s.Name() != "db.connection.hold" {
				continue
			}
			attrs := map[string]string{}
			for _, kv := range s.Attributes() {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			found = true
			if attrs["server.address"] != host || attrs["server.port"] != port {
				t.Errorf("hold span server.address %q server.port %q, want %s %s", attrs["server.address"], attrs["server.port"], host, port)
			}
		}
		if !found {
			t.Error("no hold span")
		}
	}
	t.Run("Open", func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		db, err := Open("mysql", d.DSN(), WithTracerProvider(trace.NewTracerProvider(trace.WithSpanProcessor(rec))), WithoutMetrics())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(WithTag(context.Background(), "x"), "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		check(t, rec)
	})
	t.Run("OpenDB", func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		f := newFixture(t, WithTracerProvider(trace.NewTracerProvider(trace.WithSpanProcessor(rec))), WithServerAddress(d.Config().Addr))
		if _, err := f.db.ExecContext(WithTag(context.Background(), "x"), "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		check(t, rec)
	})
}
