package benchcmp

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/XSAM/otelsql"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/internal/stubdriver"
)

// BenchmarkOverhead runs the same statement through the stub driver raw,
// through otelsql and through conntag. Read each wrapper's overhead as its
// ns/op minus raw's, and compare the two overheads.
//
// Comparable work: both record metrics through an SDK MeterProvider with a
// manual reader, and both put the caller's context into the statement as a
// comment: conntag its tag, otelsql (whose commenter writes propagated
// context) a baggage member carrying the same tag. otelsql's tracer is the
// default no-op one, so it creates no recording spans.
func BenchmarkOverhead(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())

	member, err := baggage.NewMember("conn_tag", "checkout_completion")
	if err != nil {
		b.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		b.Fatal(err)
	}
	ctx := baggage.ContextWithBaggage(conntag.WithTag(context.Background(), "checkout_completion"), bag)

	cases := []struct {
		name string
		open func() *sql.DB
	}{
		{"raw", func() *sql.DB { return sql.OpenDB(stubdriver.Connector{}) }},
		{"otelsql", func() *sql.DB {
			return otelsql.OpenDB(stubdriver.Connector{},
				otelsql.WithMeterProvider(mp),
				otelsql.WithSQLCommenter(true),
				otelsql.WithTextMapPropagator(propagation.Baggage{}))
		}},
		{"conntag", func() *sql.DB { return conntag.OpenDB(stubdriver.Connector{}, conntag.WithMeterProvider(mp)) }},
		{"conntag_histograms", func() *sql.DB {
			return conntag.OpenDB(stubdriver.Connector{}, conntag.WithMeterProvider(mp), conntag.WithHistograms())
		}},
	}
	for _, c := range cases {
		db := c.open()
		b.Run("exec/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := db.ExecContext(ctx, "UPDATE t SET a = 1 WHERE id = 7"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("query/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			var v int64
			for b.Loop() {
				if err := db.QueryRowContext(ctx, "SELECT a FROM t WHERE id = 7").Scan(&v); err != nil {
					b.Fatal(err)
				}
			}
		})
		db.Close()
	}
}

// TestComparableWork checks that both wrappers really put the tag into the
// statement text in the benchmark's setup, so the comparison is fair.
func TestComparableWork(t *testing.T) {
	member, _ := baggage.NewMember("conn_tag", "checkout_completion")
	bag, _ := baggage.New(member)
	ctx := baggage.ContextWithBaggage(conntag.WithTag(context.Background(), "checkout_completion"), bag)
	for name, open := range map[string]func(stubdriver.Connector) *sql.DB{
		"otelsql": func(c stubdriver.Connector) *sql.DB {
			return otelsql.OpenDB(c, otelsql.WithSQLCommenter(true), otelsql.WithTextMapPropagator(propagation.Baggage{}))
		},
		"conntag": func(c stubdriver.Connector) *sql.DB { return conntag.OpenDB(c) },
	} {
		var seen string
		db := open(stubdriver.Connector{OnStatement: func(q string) { seen = q }})
		if _, err := db.ExecContext(ctx, "UPDATE t SET a = 1"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if !strings.Contains(seen, "checkout_completion") {
			t.Errorf("%s sent %q: no tag in the statement", name, seen)
		}
		t.Logf("%s sends %q", name, seen)
	}
}
