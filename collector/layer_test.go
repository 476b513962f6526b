package collector

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelmetric "go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// layeredCollector is a collector with an app (OTLP), two ProxySQL
// instances (one with an events log) and a MySQL server, whose figures the
// test sets: "report_export" holds a pooled connection idle outside a
// transaction (only the app sees it), "checkout" keeps transactions open
// (every layer sees it), "cron" is another client of the server.
func layeredCollector(t *testing.T) *Collector {
	t.Helper()
	c, err := New(Config{
		OTLP:     OTLPConfig{Enabled: true},
		ProxySQL: []ProxySQLConfig{{Name: "px1", DSN: "admin:admin@tcp(127.0.0.1:1)/", EventsLog: "/nonexistent/events.log"}, {Name: "px2", DSN: "admin:admin@tcp(127.0.0.1:1)/"}},
		MySQL:    []MySQLConfig{{Name: "db", DSN: "monitor:pw@tcp(127.0.0.1:1)/"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.closeTargets() })
	st := c.st
	add := func(target string, src Source, tag string, f figures) { st.addOne(target, src, tag, &f) }
	add("app", SourceOTLP, "report_export", figures{Hold: 61.2, Idle: 61, Active: 0.2, Stmts: 10})
	add("px1", SourceProxySQLEvents, "report_export", figures{Hold: 0.2, Active: 0.2, Stmts: 10})
	add("px1", SourceProxySQLProcesslist, "report_export", figures{Hold: 0.25, Active: 0.25})
	add("px1", SourceProxySQLDigest, "report_export", figures{Active: 0.2, Stmts: 10})
	add("db", SourceMySQL, "report_export", figures{Hold: 0.2, Active: 0.2, Stmts: 10})

	add("app", SourceOTLP, "checkout", figures{Hold: 31, Idle: 20, Active: 11, Stmts: 300})
	add("px1", SourceProxySQLEvents, "checkout", figures{Hold: 15, Idle: 10, Active: 5, Stmts: 150})
	add("px1", SourceProxySQLProcesslist, "checkout", figures{Hold: 16, Idle: 11, Active: 5})
	add("px2", SourceProxySQLProcesslist, "checkout", figures{Hold: 14, Idle: 9, Active: 5})
	add("db", SourceMySQL, "checkout", figures{Hold: 30, Idle: 19, Active: 11, Stmts: 300})

	add("db", SourceMySQL, "cron", figures{Hold: 6, Active: 6, Stmts: 1})
	st.setGauges("db", SourceMySQL, func(sr *series, g *gauges) { g.sessions = map[string]int{"checkout": 2, "cron": 1} })
	st.setGauges("px1", SourceProxySQLProcesslist, func(sr *series, g *gauges) {
		g.sessions = map[string]int{"checkout": 1}
		g.pinned = map[[2]string]int{{"checkout", PinReasonTransaction}: 1}
	})
	for _, k := range []seriesKey{{"px1", SourceProxySQLProcesslist}, {"px1", SourceProxySQLEvents}, {"px2", SourceProxySQLProcesslist}, {"db", SourceMySQL}} {
		st.success(k.target, k.source)
	}
	st.success("app", SourceOTLP)
	// The figures above cover the whole minute.
	for _, sr := range st.series {
		sr.since = st.now().Add(-time.Hour)
	}
	return c
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", url, err, b)
	}
	return resp.StatusCode
}

// TestTopRanksByLayer: a tag holding a pooled connection idle outside a
// transaction is first in the default ranking (its app layer), while the
// server ranking shows the server's holders; each layer is its headline
// source (never a sum of sources), targets of a layer add up, and an
// absent layer is absent.
func TestTopRanksByLayer(t *testing.T) {
	c := layeredCollector(t)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()

	var def TopResponse
	if code := getJSON(t, srv.URL+"/api/v1/top?window=1m", &def); code != 200 {
		t.Fatalf("status %d", code)
	}
	if def.Layer != LayerMax || len(def.Rows) != 3 {
		t.Fatalf("layer %q, %d rows: %+v", def.Layer, len(def.Rows), def.Rows)
	}
	hog := def.Rows[0]
	if hog.Tag != "report_export" || hog.Layer != LayerApp || hog.Source != SourceOTLP {
		t.Errorf("first row %s ranked by %s from %s; want report_export by its app layer", hog.Tag, hog.Layer, hog.Source)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6*max(1, want) }
	if !near(hog.HoldSeconds, 61.2) || !near(hog.IdleShare, 61/61.2) {
		t.Errorf("report_export top-level figures %+v; want the app layer's", hog)
	}
	if p := hog.Layers[LayerProxy]; p == nil || !near(p.HoldSeconds, 0.2) || p.Source != SourceProxySQLEvents {
		t.Errorf("report_export proxy layer %+v; want the events log's 0.2 s alone (not events + processlist + digest)", p)
	}
	checkout := def.Rows[1]
	if checkout.Tag != "checkout" || checkout.Layer != LayerApp {
		t.Errorf("second row %s by %s", checkout.Tag, checkout.Layer)
	}
	// Two ProxySQL instances are two pools: the events log of px1 (its
	// headline) plus the processlist of px2 (its only source).
	p := checkout.Layers[LayerProxy]
	if p == nil || !near(p.HoldSeconds, 15+14) || strings.Join(p.Targets, ",") != "px1,px2" || p.Source != "mixed" {
		t.Errorf("checkout proxy layer %+v; want 29 s from px1 (events) and px2 (processlist)", p)
	}
	if p != nil && (p.Sessions != 1 || p.PinnedSessions != 1) {
		t.Errorf("checkout proxy sessions %d pins %d; want 1 and 1 from the processlist", p.Sessions, p.PinnedSessions)
	}
	if s := checkout.Layers[LayerServer]; s == nil || !near(s.HoldSeconds, 30) || s.Sessions != 2 {
		t.Errorf("checkout server layer %+v", s)
	}
	cron := def.Rows[2]
	if cron.Tag != "cron" || cron.Layer != LayerServer || len(cron.Layers) != 1 {
		t.Errorf("cron row %+v; want only a server layer", cron)
	}
	// Occupancy and statements/s divide by the same covered span.
	for _, r := range def.Rows {
		for l, lf := range r.Layers {
			if lf.CoveredSeconds < 50 || !near(lf.Occupancy*lf.CoveredSeconds, lf.HoldSeconds) ||
				!near(lf.StatementsPerSecond*lf.CoveredSeconds, lf.Statements) {
				t.Errorf("%s %s: occupancy %.3f, statements/s %.3f over %.1f s for %.1f s held, %v statements",
					r.Tag, l, lf.Occupancy, lf.StatementsPerSecond, lf.CoveredSeconds, lf.HoldSeconds, lf.Statements)
			}
		}
	}
	if def.CoveredSeconds < 50 || def.Layers[LayerProxy] == nil || len(def.Layers[LayerProxy].Headlines) != 2 {
		t.Errorf("covered %.1f s, layers %+v", def.CoveredSeconds, def.Layers)
	}

	var server TopResponse
	getJSON(t, srv.URL+"/api/v1/top?window=1m&layer=server", &server)
	var order []string
	for _, r := range server.Rows {
		order = append(order, r.Tag)
		if r.Layer != LayerServer || r.Source != SourceMySQL {
			t.Errorf("layer=server row %s from %s %s", r.Tag, r.Layer, r.Source)
		}
	}
	if strings.Join(order, ",") != "checkout,cron,report_export" {
		t.Errorf("server ranking %v; want checkout, cron, report_export", order)
	}
	var app TopResponse
	getJSON(t, srv.URL+"/api/v1/top?layer=app", &app)
	if len(app.Rows) != 2 {
		t.Errorf("layer=app: %d rows; cron (no app figure) must be left out", len(app.Rows))
	}

	// An absent layer is an absent key, never zeros.
	resp, err := http.Get(srv.URL + "/api/v1/top?filter=cron")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var generic struct {
		Rows []struct {
			Layers map[string]json.RawMessage `json:"layers"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(raw, &generic); err != nil || len(generic.Rows) != 1 || len(generic.Rows[0].Layers) != 1 ||
		generic.Rows[0].Layers["server"] == nil {
		t.Errorf("cron's row names layers that never saw it: %s", raw)
	}

	var bad map[string]any
	if code := getJSON(t, srv.URL+"/api/v1/top?layer=database", &bad); code != 400 {
		t.Errorf("layer=database: status %d, want 400", code)
	}
	if v, _ := json.Marshal(bad["valid"]); string(v) != `["app","proxy","server","max"]` || !strings.Contains(bad["error"].(string), "layer") {
		t.Errorf("layer=database: %v; want the valid layers listed", bad)
	}
}

// TestLayerMetrics: the layer counters are the headline source's, the
// layer_source gauge names it, and the per-source HELP says not to sum.
func TestLayerMetrics(t *testing.T) {
	c := layeredCollector(t)
	want := map[string]float64{
		`holdtime_collector_layer_hold_seconds_total{conn_tag="checkout",layer="app",target="app"}`:        31,
		`holdtime_collector_layer_hold_seconds_total{conn_tag="checkout",layer="proxy",target="px1"}`:      15,
		`holdtime_collector_layer_hold_seconds_total{conn_tag="checkout",layer="proxy",target="px2"}`:      14,
		`holdtime_collector_layer_hold_seconds_total{conn_tag="checkout",layer="server",target="db"}`:      30,
		`holdtime_collector_layer_hold_seconds_total{conn_tag="cron",layer="server",target="db"}`:          6,
		`holdtime_collector_layer_hold_seconds_total{conn_tag="report_export",layer="app",target="app"}`:   61.2,
		`holdtime_collector_layer_hold_seconds_total{conn_tag="report_export",layer="proxy",target="px1"}`: 0.2,
		`holdtime_collector_layer_hold_seconds_total{conn_tag="report_export",layer="server",target="db"}`: 0.2,
		`holdtime_collector_layer_idle_hold_seconds_total{conn_tag="checkout",layer="proxy",target="px1"}`: 10,
		`holdtime_collector_layer_statements_total{conn_tag="checkout",layer="proxy",target="px1"}`:        150,
		`holdtime_collector_layer_sessions{conn_tag="checkout",layer="proxy",target="px1"}`:                1,
		`holdtime_collector_layer_sessions{conn_tag="checkout",layer="server",target="db"}`:                2,
		`holdtime_collector_layer_source{layer="app",source="otlp",target="app"}`:                          1,
		`holdtime_collector_layer_source{layer="proxy",source="proxysql_events",target="px1"}`:             1,
		`holdtime_collector_layer_source{layer="proxy",source="proxysql_processlist",target="px2"}`:        1,
		`holdtime_collector_layer_source{layer="server",source="mysql",target="db"}`:                       1,
	}
	got, help := gather(t, c)
	for series, v := range want {
		if g, ok := got[series]; !ok || math.Abs(g-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", series, g, ok, v)
		}
	}
	n := 0
	for series := range got {
		if strings.HasPrefix(series, "holdtime_collector_layer_hold_seconds_total{") {
			n++
		}
	}
	if n != 8 {
		t.Errorf("%d layer hold series, want 8: one per headline (target, layer, tag)", n)
	}
	if !strings.Contains(help["holdtime_collector_hold_seconds_total"], "never sum this over source") {
		t.Errorf("HELP of the per-source hold does not say not to sum over source: %q", help["holdtime_collector_hold_seconds_total"])
	}
}

// gather returns every series of c's registry as name{labels} (labels
// sorted) -> value, and every family's HELP.
func gather(t *testing.T, c *Collector) (map[string]float64, map[string]string) {
	t.Helper()
	mfs, err := c.cfg.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out, help := map[string]float64{}, map[string]string{}
	for _, mf := range mfs {
		help[mf.GetName()] = mf.GetHelp()
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"=\""+lp.GetValue()+"\"")
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out, help
}

// TestOTLPSourceHealth: the receiver waits (up 0, no last success) until
// the first export, is up while exports arrive, its last success advances
// with every export, and it goes back to waiting, not stale, when none
// arrives for PushIdle. /readyz does not wait for an app.
func TestOTLPSourceHealth(t *testing.T) {
	c, err := New(Config{OTLP: OTLPConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	c.st.now = func() time.Time { return now }
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	metric := func(name string, labels ...string) (float64, bool) {
		t.Helper()
		mfs, err := c.cfg.Gatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				for i := 0; i < len(labels); i += 2 {
					found := false
					for _, lp := range m.GetLabel() {
						found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
					}
					if !found {
						continue next
					}
				}
				return m.GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	state := func() SourceStatus { return c.Sources()[0] }
	if up, _ := metric("holdtime_source_up", "source", "otlp"); up != 0 {
		t.Errorf("source_up{otlp} %v before any export; want 0", up)
	}
	if w, _ := metric("holdtime_source_state", "source", "otlp", "state", StateWaiting); w != 1 || state().State != StateWaiting || state().Reason != "no_spans_yet" {
		t.Errorf("before any export: state %+v, waiting gauge %v", state(), w)
	}
	if _, ok := metric("holdtime_source_last_success_timestamp_seconds", "source", "otlp"); ok {
		t.Error("a last success before any export")
	}
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/readyz %d while the OTLP receiver waits for its first export", resp.StatusCode)
	}
	export := func() {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/traces", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("export: %d", resp.StatusCode)
		}
	}
	export()
	first, _ := metric("holdtime_source_last_success_timestamp_seconds", "source", "otlp")
	if up, _ := metric("holdtime_source_up", "source", "otlp"); up != 1 || state().State != StateUp || first != 1_800_000_000 {
		t.Errorf("after an export: up %v, state %+v, last success %v", up, state(), first)
	}
	now = now.Add(90 * time.Second)
	export()
	if second, _ := metric("holdtime_source_last_success_timestamp_seconds", "source", "otlp"); second != first+90 {
		t.Errorf("last success %v after a second export 90 s later; want %v", second, first+90)
	}
	now = now.Add(PushIdle + time.Second)
	if s := state(); s.State != StateWaiting || s.Reason != "no_spans_recently" || s.Up ||
		!strings.Contains(s.Fix, "/v1/traces") || strings.Contains(s.Fix, "/v1/metrics") {
		t.Errorf("no export for %v: %+v; want waiting, naming /v1/traces only", PushIdle, s)
	}
}

// TestOTLPMetricsWaitingNamesBoth: with OTLPConfig.Metrics the receiver's
// waiting states name /v1/metrics (the counters) as well as /v1/traces.
func TestOTLPMetricsWaitingNamesBoth(t *testing.T) {
	c, err := New(Config{OTLP: OTLPConfig{Enabled: true, Metrics: true}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	c.st.now = func() time.Time { return now }
	both := func(s SourceStatus) bool {
		return strings.Contains(s.Fix, "/v1/metrics") && strings.Contains(s.Fix, "/v1/traces")
	}
	if s := c.Sources()[0]; s.Reason != "no_spans_yet" || !both(s) {
		t.Errorf("before any export: %+v; want both paths named", s)
	}
	c.st.success("app", SourceOTLP)
	now = now.Add(PushIdle + time.Second)
	if s := c.Sources()[0]; s.Reason != "no_spans_recently" || !both(s) {
		t.Errorf("no export for %v: %+v; want both paths named", PushIdle, s)
	}
}

// TestOTLPMetricSeriesGauge: a collector taking counters on /v1/metrics
// says on /metrics how many series it remembers, from a real OTLP
// exporter's exports: one per (tag, counter); without --otlp-metrics there
// is no such gauge.
func TestOTLPMetricSeriesGauge(t *testing.T) {
	c, err := New(Config{OTLP: OTLPConfig{Enabled: true, Metrics: true}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	ctx := context.Background()
	exp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(srv.URL+"/v1/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Hour))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	hold, err := mp.Meter("test").Float64Counter("holdtime.connection.hold_time")
	if err != nil {
		t.Fatal(err)
	}
	for i, tag := range []string{"checkout", "search", "refill"} {
		hold.Add(ctx, float64(i+1), otelmetric.WithAttributes(attribute.String("conn_tag", tag)))
	}
	const name = `holdtime_collector_otlp_metric_series{target="app"}`
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := gather(t, c); got[name] != 3 {
		t.Errorf("%s = %v after one export of 3 tags' hold counters, want 3", name, got[name])
	}
	plain, err := New(Config{OTLP: OTLPConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := gather(t, plain); hasKey(got, name) {
		t.Errorf("%s without OTLPConfig.Metrics", name)
	}
}

func hasKey(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

// TestTwoCollectorsOnOneRegistryFailClearly: the second collector given the
// same registry says why, and what to do.
func TestTwoCollectorsOnOneRegistryFailClearly(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := Config{Registerer: reg, OTLP: OTLPConfig{Enabled: true, Metrics: true}}
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "give each Collector its own registry") {
		t.Errorf("a second collector on the same registry: %v", err)
	}
}
