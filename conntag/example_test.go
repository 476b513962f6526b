package conntag_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"sort"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// exampleDSN is a fresh database on the test server; in your code it is
// your own DSN.
func exampleDSN() string {
	target, err := testenv.SharedTarget()
	if err != nil {
		log.Fatal(err)
	}
	d, err := target.CreateDatabase(context.Background(), "example")
	if err != nil {
		log.Fatal(err)
	}
	return d.DSN()
}

// The one-line adoption: conntag.Open where you had sql.Open. The result is
// a plain *sql.DB; statements run under conntag.WithTag carry the tag.
func ExampleOpen() {
	dsn := exampleDSN()

	db, err := conntag.Open("mysql", dsn) // was: sql.Open("mysql", dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	ctx := conntag.WithTag(context.Background(), "checkout_completion")
	// The server's processlist shows the running statement as it arrived.
	var text string
	err = db.QueryRowContext(ctx,
		"SELECT INFO FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()").Scan(&text)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(text)
	// Output: SELECT INFO FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID() /* conn_tag:checkout_completion */
}

// Prometheus in a few lines: an OpenTelemetry Prometheus exporter on your
// registry, handed to conntag as its MeterProvider. Occupancy per tag is
// rate(holdtime_connection_hold_time_seconds_total[1m]).
func Example_prometheus() {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		log.Fatal(err)
	}
	connector, err := mysql.NewConnector(mustConfig(exampleDSN()))
	if err != nil {
		log.Fatal(err)
	}
	db := conntag.OpenDB(connector, conntag.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))))
	defer db.Close()
	// Serve it: http.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{})).
	server := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	defer server.Close()

	ctx := conntag.WithTag(context.Background(), "inventory_reserve")
	for range 3 {
		if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
			log.Fatal(err)
		}
	}
	families, err := registry.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "holdtime_connection_holds_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "conn_tag" {
					fmt.Printf("%s{conn_tag=%q} %v\n", mf.GetName(), l.GetValue(), m.GetCounter().GetValue())
				}
			}
		}
	}
	// Output: holdtime_connection_holds_total{conn_tag="inventory_reserve"} 3
}

// OpenTelemetry: your MeterProvider for metrics and, when you want them,
// your TracerProvider for a span per statement and per hold.
func Example_openTelemetry() {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	db, err := conntag.Open("mysql", exampleDSN(),
		conntag.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		conntag.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))),
		conntag.WithHistograms(),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	ctx := conntag.WithTag(context.Background(), "admin_report")
	if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	var names []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names = append(names, m.Name)
		}
	}
	sort.Strings(names)
	fmt.Println(strings.Join(names, "\n"))
	for _, s := range spans.Ended() {
		fmt.Println("span:", s.Name())
	}
	// Output:
	// db.client.connection.count
	// db.client.connection.create_time
	// db.client.connection.max
	// db.client.connection.use_time
	// db.client.operation.duration
	// holdtime.client.operation_time
	// holdtime.client.operations
	// holdtime.connection.active_time
	// holdtime.connection.hold_time
	// holdtime.connection.holds
	// holdtime.connection.idle_time
	// holdtime.pool.wait_time
	// holdtime.pool.waits
	// span: SELECT
	// span: db.connection.hold
}

// Spans only where they pay: a hold span (which names the ProxySQL session
// behind it, with WithSessionID) only for holds of 200 ms or more, or idle
// for 1 s or more (add a Rate for a share of the others); no span per
// statement. The counters still count every hold.
func ExampleWithHoldSpanSampling() {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	db, err := conntag.Open("mysql", exampleDSN(),
		conntag.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		conntag.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))),
		conntag.WithoutStatementSpans(),
		conntag.WithHoldSpanSampling(conntag.SpanSampling{MinHold: 200 * time.Millisecond, MinIdle: time.Second}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	ctx := conntag.WithTag(context.Background(), "order_export")
	if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil { // a short hold: no span
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "SELECT SLEEP(0.25)"); err != nil { // a long hold: a span
		log.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "holdtime.connection.holds" {
				fmt.Println("holds counted:", m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
			}
		}
	}
	for _, s := range spans.Ended() {
		fmt.Println("span:", s.Name())
	}
	// Output:
	// holds counted: 2
	// span: db.connection.hold
}

func mustConfig(dsn string) *mysql.Config {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		log.Fatal(err)
	}
	return cfg
}
