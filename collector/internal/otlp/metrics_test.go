package otlp

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/holdtime/holdtime/collector/internal/source"
)

// recordingSink sums what a receiver writes, per tag.
type recordingSink struct {
	mu        sync.Mutex
	tags      map[string]*source.TagDelta
	success   int
	malformed int
}

func newRecordingSink() *recordingSink { return &recordingSink{tags: map[string]*source.TagDelta{}} }

func (s *recordingSink) Add(batch map[string]*source.TagDelta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tag, d := range batch {
		if s.tags[tag] == nil {
			s.tags[tag] = &source.TagDelta{}
		}
		s.tags[tag].Add(&d.Figures)
		s.tags[tag].Obs += d.Obs
	}
}
func (s *recordingSink) Success()        { s.mu.Lock(); s.success++; s.mu.Unlock() }
func (s *recordingSink) Malformed(n int) { s.mu.Lock(); s.malformed += n; s.mu.Unlock() }

func (s *recordingSink) figures(tag string) source.Figures {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.tags[tag]; d != nil {
		return d.Figures
	}
	return source.Figures{}
}

// t0 is when the test receivers start; points are seconds after it.
var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// noStart is a point's start for "no start time".
const noStart = -1e9

func at(sec float64) uint64 {
	return uint64(t0.Add(time.Duration(sec * float64(time.Second))).UnixNano())
}

func kv(k string, v any) *commonpb.KeyValue {
	switch x := v.(type) {
	case string:
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: x}}}
	case int:
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(x)}}}
	}
	panic("kv: unsupported type")
}

// pt is one data point: a double unless asInt.
type pt struct {
	tag          string // "-": no conn_tag attribute
	start, time  float64
	value        float64
	asInt, error bool
}

func (p pt) proto() *metricspb.NumberDataPoint {
	var attrs []*commonpb.KeyValue
	if p.tag != "-" {
		attrs = append(attrs, kv(AttrConnTag, p.tag))
	}
	attrs = append(attrs, kv("db.client.connection.pool.name", "main"))
	if p.error {
		attrs = append(attrs, kv(AttrErrorType, "error"))
	}
	dp := &metricspb.NumberDataPoint{Attributes: attrs, TimeUnixNano: at(p.time)}
	if p.start != noStart {
		dp.StartTimeUnixNano = at(p.start)
	}
	if p.asInt {
		dp.Value = &metricspb.NumberDataPoint_AsInt{AsInt: int64(p.value)}
	} else {
		dp.Value = &metricspb.NumberDataPoint_AsDouble{AsDouble: p.value}
	}
	return dp
}

func sum(name string, temporality metricspb.AggregationTemporality, points ...pt) *metricspb.Metric {
	m := &metricspb.Metric{Name: name, Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{IsMonotonic: true, AggregationTemporality: temporality}}}
	for _, p := range points {
		m.GetSum().DataPoints = append(m.GetSum().DataPoints, p.proto())
	}
	return m
}

const (
	cumulative = metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
	delta      = metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA
)

func hold(points ...pt) *metricspb.Metric { return sum(MetricHoldTime, cumulative, points...) }

// export is one request from the app whose resource is instance.
func export(instance string, metrics ...*metricspb.Metric) *colmetrics.ExportMetricsServiceRequest {
	return &colmetrics.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{
		Resource:     &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", "shop"), kv("service.instance.id", instance)}},
		ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: metrics}},
	}}}
}

func newTestReceiver(sink *recordingSink) *MetricsReceiver {
	now := t0.Add(time.Hour)
	return &MetricsReceiver{Sink: sink, MaxTags: 100, MaxBody: 1 << 20, Started: t0, Now: func() time.Time { return now }}
}

// metricsCase is a run of exports to one receiver, and the hold each tag
// must have been credited at the end (every tag credited named in want).
type metricsCase struct {
	name  string
	steps []metricsStep
	want  map[string]float64 // hold per tag
}

// metricsStep is one export and how many of its points must be rejected.
type metricsStep struct {
	req      *colmetrics.ExportMetricsServiceRequest
	rejected int64
}

// runMetricsCases runs each case on a new receiver.
func runMetricsCases(t *testing.T, cases []metricsCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sink := newRecordingSink()
			m := newTestReceiver(sink)
			var rejected int64
			for i, s := range c.steps {
				rej := m.ingest(s.req)
				if got := rej.total(); got != s.rejected {
					t.Errorf("step %d: %d points rejected (%s), want %d", i, got, rej.message(), s.rejected)
				}
				rejected += rej.total()
			}
			if sink.malformed != int(rejected) {
				t.Errorf("sink counted %d malformed, want %d", sink.malformed, rejected)
			}
			for tag, want := range c.want {
				if got := sink.figures(tag).Hold; math.Abs(got-want) > 1e-9 {
					t.Errorf("tag %q: hold %v, want %v", tag, got, want)
				}
			}
			for tag := range sink.tags {
				if _, ok := c.want[tag]; !ok {
					t.Errorf("unexpected tag %q: %+v", tag, sink.tags[tag].Figures)
				}
			}
		})
	}
}

func TestMetricsCumulativeDeltas(t *testing.T) {
	runMetricsCases(t, []metricsCase{
		{"a series that began after the receiver is credited whole, then by difference", []metricsStep{
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 11, value: 4}))},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 21, value: 9}))},
		}, map[string]float64{"checkout": 9}},
		{"a series that began before the receiver: its first point is only a baseline", []metricsStep{
			{req: export("a", hold(pt{tag: "checkout", start: -100, time: 11, value: 400}))},
			{req: export("a", hold(pt{tag: "checkout", start: -100, time: 21, value: 403}))},
		}, map[string]float64{"checkout": 3}},
		{"duplicates and exports out of order add nothing", []metricsStep{
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 11, value: 4}))},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 21, value: 9}))},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 21, value: 9}))},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 11, value: 4}))},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 31, value: 10}))},
		}, map[string]float64{"checkout": 10}},
		{"a restart (new start time) is a new series, credited from zero", []metricsStep{
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 11, value: 4}))},
			{req: export("a", hold(pt{tag: "checkout", start: 15, time: 21, value: 2}))},
			{req: export("a", hold(pt{tag: "checkout", start: 15, time: 31, value: 5}))},
		}, map[string]float64{"checkout": 9}},
		{"a counter that goes down without a new start time is rejected and rebased", []metricsStep{
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 11, value: 4}))},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 21, value: 2})), rejected: 1},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 31, value: 3}))},
		}, map[string]float64{"checkout": 5}},
		{"without start times a drop is a restart (Prometheus' rule)", []metricsStep{
			{req: export("a", hold(pt{tag: "checkout", start: noStart, time: 11, value: 4}))},
			{req: export("a", hold(pt{tag: "checkout", start: noStart, time: 21, value: 6}))},
			{req: export("a", hold(pt{tag: "checkout", start: noStart, time: 31, value: 1}))},
		}, map[string]float64{"checkout": 3}},
		{"two app instances with the same tag are summed", []metricsStep{
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 11, value: 4}))},
			{req: export("b", hold(pt{tag: "checkout", start: 1, time: 11, value: 6}))},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 21, value: 5}))},
		}, map[string]float64{"checkout": 11}},
		{"replicas with identical resources are told apart by start time", []metricsStep{
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 11, value: 4}))},
			{req: export("a", hold(pt{tag: "checkout", start: 2, time: 12, value: 6}))},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 21, value: 5}))},
			{req: export("a", hold(pt{tag: "checkout", start: 2, time: 22, value: 8}))},
		}, map[string]float64{"checkout": 13}},
		{"delta temporality adds each point once", []metricsStep{
			{req: export("a", sum(MetricHoldTime, delta, pt{tag: "checkout", start: 1, time: 11, value: 4}))},
			{req: export("a", sum(MetricHoldTime, delta, pt{tag: "checkout", start: 11, time: 21, value: 2}))},
			{req: export("a", sum(MetricHoldTime, delta, pt{tag: "checkout", start: 11, time: 21, value: 2}))},
			{req: export("a", sum(MetricHoldTime, delta, pt{tag: "checkout", start: 21, time: 31, value: 1}))},
			// An empty interval is no delta: received again, it could not be told from new.
			{req: export("a", sum(MetricHoldTime, delta, pt{tag: "checkout", start: 31, time: 31, value: 1})), rejected: 1},
		}, map[string]float64{"checkout": 7}},
	})
}

func TestMetricsCreditsOnlyPointsACounterCouldSend(t *testing.T) {
	runMetricsCases(t, []metricsCase{
		{"tags outside the grammar and missing tags are rejected, never guessed", []metricsStep{
			{req: export("a", hold(pt{tag: "check out", start: 1, time: 11, value: 4}, pt{tag: "-", start: 1, time: 11, value: 4},
				pt{tag: "", start: 1, time: 11, value: 4}, pt{tag: strings.Repeat("x", 65), start: 1, time: 11, value: 4},
				pt{tag: "ok", start: 1, time: 11, value: 1})), rejected: 4},
		}, map[string]float64{"ok": 1, "check_out": 0, "": 0}},
		{"absurd values are rejected; what follows is measured from before them", []metricsStep{
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 11, value: 4}))},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 21, value: 1e300})), rejected: 1},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 25, value: math.NaN()})), rejected: 1},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 26, value: math.Inf(1)})), rejected: 1},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 27, value: -1})), rejected: 1},
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 31, value: 6}))},
		}, map[string]float64{"checkout": 6}},
		{"a first point more than 10,000 connections can hold is rejected", []metricsStep{
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 11, value: 10_001 * 11})), rejected: 1},
			{req: export("a", hold(pt{tag: "other", start: 1, time: 11, value: 10_000 * 10}))},
		}, map[string]float64{"checkout": 0, "other": 100_000}},
		{"points from the future or before their start are rejected", []metricsStep{
			{req: export("a", hold(pt{tag: "checkout", start: 1, time: 3600 + 600, value: 4})), rejected: 1},
			{req: export("a", hold(pt{tag: "checkout", start: 20, time: 11, value: 4})), rejected: 1},
		}, map[string]float64{"checkout": 0}},
		{"a gauge or a non-monotonic sum under a conntag name is rejected", []metricsStep{
			{req: export("a", &metricspb.Metric{Name: MetricHoldTime, Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{
				DataPoints: []*metricspb.NumberDataPoint{pt{tag: "checkout", start: 1, time: 11, value: 4}.proto()}}}}), rejected: 1},
			{req: export("a", &metricspb.Metric{Name: MetricHoldTime, Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{AggregationTemporality: cumulative,
				DataPoints: []*metricspb.NumberDataPoint{pt{tag: "checkout", start: 1, time: 11, value: 4}.proto()}}}}), rejected: 1},
		}, map[string]float64{"checkout": 0}},
		{"other metrics are ignored", []metricsStep{
			{req: export("a", sum("http.server.requests", cumulative, pt{tag: "-", start: 1, time: 11, value: 4}))},
		}, map[string]float64{}},
	})
}

func TestMetricsEveryFigure(t *testing.T) {
	sink := newRecordingSink()
	m := newTestReceiver(sink)
	req := export("a",
		hold(pt{tag: "checkout", start: 1, time: 11, value: 4}),
		sum(MetricActiveTime, cumulative, pt{tag: "checkout", start: 1, time: 11, value: 1}),
		sum(MetricIdleTime, cumulative, pt{tag: "checkout", start: 1, time: 11, value: 3}),
		sum(MetricHolds, cumulative, pt{tag: "checkout", start: 1, time: 11, value: 20, asInt: true}),
		sum(MetricOperations, cumulative, pt{tag: "checkout", start: 1, time: 11, value: 50, asInt: true},
			pt{tag: "checkout", start: 1, time: 11, value: 2, asInt: true, error: true}),
	)
	if rej := m.ingest(req); rej.total() != 0 {
		t.Fatal(rej.message())
	}
	got := sink.tags["checkout"]
	want := source.Figures{Hold: 4, Active: 1, Idle: 3, Stmts: 52, Errors: 2}
	if got == nil || got.Figures != want || got.Obs != 20 {
		t.Fatalf("got %+v, want %+v with 20 holds", got, want)
	}
}

func TestMetricsSeriesBound(t *testing.T) {
	sink := newRecordingSink()
	m := newTestReceiver(sink)
	m.MaxSeries = 2
	rej := m.ingest(export("a", hold(pt{tag: "a", start: 1, time: 11, value: 1}, pt{tag: "b", start: 1, time: 11, value: 1},
		pt{tag: "c", start: 1, time: 11, value: 1})))
	if rej.n[pointTooMany] != 1 || m.Series() != 2 {
		t.Fatalf("%s; %d series remembered, want 2", rej.message(), m.Series())
	}
	// Series unseen for ten minutes are forgotten, freeing room.
	now := t0.Add(2 * time.Hour)
	m.Now = func() time.Time { return now }
	m.ingest(export("a"))
	if m.Series() != 0 {
		t.Fatalf("%d series remembered after they went quiet, want 0", m.Series())
	}
}

func TestMetricsHTTP(t *testing.T) {
	sink := newRecordingSink()
	m := newTestReceiver(sink)
	m.Now = nil
	m.Started = time.Now().Add(-time.Minute)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	start := uint64(time.Now().Add(-30 * time.Second).UnixNano())
	mk := func(tag string, v float64) *colmetrics.ExportMetricsServiceRequest {
		p := pt{tag: tag, value: v}.proto()
		p.StartTimeUnixNano, p.TimeUnixNano = start, uint64(time.Now().UnixNano())
		return &colmetrics.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{ScopeMetrics: []*metricspb.ScopeMetrics{{
			Metrics: []*metricspb.Metric{{Name: MetricHoldTime, Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{
				IsMonotonic: true, AggregationTemporality: cumulative, DataPoints: []*metricspb.NumberDataPoint{p}}}}}}}}}}
	}
	post := func(ct string, body []byte, gz bool) *http.Response {
		t.Helper()
		if gz {
			var b bytes.Buffer
			w := gzip.NewWriter(&b)
			w.Write(body)
			w.Close()
			body = b.Bytes()
		}
		r, _ := http.NewRequest("POST", srv.URL, bytes.NewReader(body))
		r.Header.Set("Content-Type", ct)
		if gz {
			r.Header.Set("Content-Encoding", "gzip")
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	pb, _ := proto.Marshal(mk("pb", 2))
	js, _ := protojson.Marshal(mk("js", 3))
	bad, _ := proto.Marshal(mk("bad tag", 3))
	for _, r := range []*http.Response{post("application/x-protobuf", pb, false), post("application/json", js, true)} {
		if r.StatusCode != 200 {
			t.Fatalf("status %s", r.Status)
		}
	}
	if sink.figures("pb").Hold != 2 || sink.figures("js").Hold != 3 {
		t.Fatalf("pb %v, js %v: want 2 and 3", sink.figures("pb"), sink.figures("js"))
	}
	r := post("application/x-protobuf", bad, false)
	var resp colmetrics.ExportMetricsServiceResponse
	var b bytes.Buffer
	b.ReadFrom(r.Body)
	if err := proto.Unmarshal(b.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if ps := resp.GetPartialSuccess(); ps.GetRejectedDataPoints() != 1 || !strings.Contains(ps.GetErrorMessage(), `first bad tag "bad tag"`) {
		t.Fatalf("partial success %v", ps)
	}
	if r := post("text/plain", pb, false); r.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain: %s", r.Status)
	}
	if r := post("application/x-protobuf", []byte("garbage\xff"), false); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("garbage: %s", r.Status)
	}
	if sink.success != 3 || sink.malformed != 2 {
		t.Fatalf("%d successes, %d malformed: want 3 and 2", sink.success, sink.malformed)
	}
}

// TestMetricsOldTimestampsBuyNothing: the rate bound measures a point's
// interval on the receiver's clock too. A delta point that claims to start
// 40 years ago, or a cumulative baseline dated 40 years ago, cannot credit
// more than the receiver's age (or the time since it last heard of the
// series) allows.
func TestMetricsOldTimestampsBuyNothing(t *testing.T) {
	const years40 = -40 * 365 * 86400
	for name, steps := range map[string][]*colmetrics.ExportMetricsServiceRequest{
		"a delta point starting 40 years ago": {
			export("a", sum(MetricHoldTime, delta, pt{tag: "checkout", start: years40, time: 11, value: 1e12})),
		},
		"a cumulative baseline dated 40 years ago": {
			export("a", hold(pt{tag: "checkout", start: noStart, time: years40, value: 0})),
			export("a", hold(pt{tag: "checkout", start: noStart, time: 11, value: 1e12})),
		},
	} {
		t.Run(name, func(t *testing.T) {
			sink := newRecordingSink()
			m := newTestReceiver(sink)
			var rejected int64
			for _, req := range steps {
				rejected += m.ingest(req).n[pointTooFast]
			}
			if got := sink.figures("checkout").Hold; got != 0 || rejected != 1 {
				t.Errorf("credited %v s of hold, %d points rejected as too fast; want 0 and 1", got, rejected)
			}
		})
	}
	// What the receiver's clock allows still counts: 10 connections over
	// the 60 s since the receiver last heard of the series.
	sink := newRecordingSink()
	m := newTestReceiver(sink)
	now := t0.Add(time.Hour)
	m.Now = func() time.Time { return now }
	m.ingest(export("a", hold(pt{tag: "checkout", start: noStart, time: years40, value: 0})))
	now = now.Add(time.Minute)
	if rej := m.ingest(export("a", hold(pt{tag: "checkout", start: noStart, time: 11, value: 600}))); rej.total() != 0 {
		t.Fatal(rej.message())
	}
	if got := sink.figures("checkout").Hold; got != 600 {
		t.Errorf("credited %v s, want 600", got)
	}
}

// TestMetricsForgottenSeriesIsNotCreditedTwice: an app started after the
// receiver goes quiet for longer than the receiver remembers a series (a
// partition, a paused pod); when it comes back, its counter's past is not
// credited a second time. What it counted while unseen cannot be placed
// in time and is not credited either: a lower figure, never a doubled one.
func TestMetricsForgottenSeriesIsNotCreditedTwice(t *testing.T) {
	sink := newRecordingSink()
	m := newTestReceiver(sink)
	now := t0.Add(70 * time.Second)
	m.Now = func() time.Time { return now }
	m.ingest(export("a", hold(pt{tag: "checkout", start: 30, time: 60, value: 30})))
	now = now.Add(15 * time.Minute)
	m.ingest(export("b")) // another app's export: the sweep forgets "a"'s series
	if m.Series() != 0 {
		t.Fatalf("%d series remembered after 15 minutes unseen, want 0", m.Series())
	}
	m.ingest(export("a", hold(pt{tag: "checkout", start: 30, time: 960, value: 40})))
	now = now.Add(time.Minute)
	m.ingest(export("a", hold(pt{tag: "checkout", start: 30, time: 1020, value: 45})))
	if got := sink.figures("checkout").Hold; got != 35 {
		t.Errorf("credited %v s; want 35 (30 before the gap, 5 after it; the 10 of the gap cannot be placed, the 30 must not count twice)", got)
	}
}

// TestMetricsSeriesMemoryIsBoundedByCount: a resource with a 200 KB
// attribute and 200 tags costs what 200 series cost, not 200 copies of
// the attribute.
func TestMetricsSeriesMemoryIsBoundedByCount(t *testing.T) {
	m := newTestReceiver(newRecordingSink())
	var points []pt
	for i := range 200 {
		points = append(points, pt{tag: fmt.Sprintf("t%d", i), start: 1, time: 11, value: 1})
	}
	req := export("a", hold(points...))
	req.ResourceMetrics[0].Resource.Attributes = append(req.ResourceMetrics[0].Resource.Attributes, kv("big", strings.Repeat("x", 200<<10)))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if rej := m.ingest(req); rej.total() != 0 {
		t.Fatal(rej.message())
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if m.Series() != 200 {
		t.Fatalf("%d series, want 200", m.Series())
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 2<<20 {
		t.Errorf("200 series kept %d KB of heap; want well under 2 MB (a copy of the 200 KB attribute per series is 40 MB)", grew>>10)
	}
	runtime.KeepAlive(req)
}

// TestMetricsSeriesIsAGaugeScrapedDuringExports: Series, registered as the
// collector registers it (a GaugeFunc on the collector's registry), says
// how many series the receiver remembers, and may be read at scrape time
// while exports arrive: it only grows while new series come, and ends at
// one series per tag exported.
func TestMetricsSeriesIsAGaugeScrapedDuringExports(t *testing.T) {
	m := newTestReceiver(newRecordingSink())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "holdtime_collector_otlp_metric_series",
		Help:        "Counter series the OTLP metrics receiver remembers.",
		ConstLabels: prometheus.Labels{"target": "app"},
	}, func() float64 { return float64(m.Series()) }))
	scrape := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
			t.Fatalf("gathered %v, %v; want one gauge", mfs, err)
		}
		return mfs[0].GetMetric()[0].GetGauge().GetValue()
	}
	const tags = 200
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range tags {
			if rej := m.ingest(export("a", hold(pt{tag: fmt.Sprintf("tag_%d", i), start: 1, time: 11, value: 1}))); rej.total() != 0 {
				t.Errorf("export %d: %s", i, rej.message())
			}
		}
	}()
	last := 0.0
	for exporting := true; exporting; {
		select {
		case <-done:
			exporting = false
		default:
		}
		n := scrape()
		if n < last || n > tags {
			t.Fatalf("scraped %v series after %v; want a count that only grows, to %d", n, last, tags)
		}
		last = n
	}
	if n := scrape(); n != tags {
		t.Fatalf("scraped %v series after %d exports of one tag each, want %d", n, tags, tags)
	}
}
