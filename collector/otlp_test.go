package collector

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector/internal/otlp"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// holdSpan is a conntag hold span as conntag writes it: tag, active and
// idle seconds, session id, start and end times.
type holdSpan struct {
	tag          string
	start, end   uint64
	attrs        []*commonpb.KeyValue
	name, status string
}

func dbl(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

func i64(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// validHold returns the attributes of a plausible 1 s hold, 0.25 s active.
func validHold(tag string) (uint64, uint64, []*commonpb.KeyValue) {
	end := uint64(time.Now().UnixNano())
	return end - 1e9, end, []*commonpb.KeyValue{str(otlp.AttrConnTag, tag), dbl(otlp.AttrActiveSeconds, 0.25),
		dbl(otlp.AttrIdleSeconds, 0.75), i64(otlp.AttrSessionID, 7)}
}

func exportRequest(spans ...*tracepb.Span) *coltrace.ExportTraceServiceRequest {
	return &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}}
}

func span(name string, start, end uint64, attrs ...*commonpb.KeyValue) *tracepb.Span {
	return &tracepb.Span{Name: name, StartTimeUnixNano: start, EndTimeUnixNano: end, Attributes: attrs}
}

// post sends req to h as protobuf or JSON and returns the status and the
// decoded response.
func post(t testing.TB, h http.Handler, req *coltrace.ExportTraceServiceRequest, format string) (int, *coltrace.ExportTraceServiceResponse) {
	t.Helper()
	var body []byte
	var err error
	ct := "application/x-protobuf"
	if format == "json" {
		ct = "application/json"
		body, err = protojson.Marshal(req)
	} else {
		body, err = proto.Marshal(req)
	}
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(body))
	r.Header.Set("Content-Type", ct)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	resp := &coltrace.ExportTraceServiceResponse{}
	if w.Code == http.StatusOK {
		unmarshal := proto.Unmarshal
		if format == "json" {
			unmarshal = protojson.Unmarshal
		}
		if err := unmarshal(w.Body.Bytes(), resp); err != nil {
			t.Fatalf("response is not an ExportTraceServiceResponse: %v", err)
		}
	}
	return w.Code, resp
}

// getTop fetches /api/v1/top and fails unless it is a 200 with a whole
// TopResponse.
func getTop(t testing.TB, h http.Handler, query string) TopResponse {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/v1/top?"+query, nil))
	var doc TopResponse
	if w.Code != http.StatusOK {
		t.Fatalf("/api/v1/top?%s: %d %s", query, w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatalf("/api/v1/top?%s: 200 with a body that is not its JSON (%v): %q", query, err, w.Body)
	}
	return doc
}

func getMetrics(t testing.TB, h http.Handler) string {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", w.Code, w.Body)
	}
	return w.Body.String()
}

// TestOTLPRejectsBadNumbers sends one hold span per case with one numeric
// attribute set to NaN, ±Inf, a negative or a huge value: the span is
// rejected (partial success), the tag gets no figures, and /api/v1/top and
// /metrics stay whole and finite. A valid span sent next still counts.
func TestOTLPRejectsBadNumbers(t *testing.T) {
	type override func(start, end *uint64, attrs []*commonpb.KeyValue) []*commonpb.KeyValue
	set := func(kv *commonpb.KeyValue) override {
		return func(_, _ *uint64, attrs []*commonpb.KeyValue) []*commonpb.KeyValue {
			for i, a := range attrs {
				if a.Key == kv.Key {
					attrs[i] = kv
					return attrs
				}
			}
			return append(attrs, kv)
		}
	}
	drop := func(key string) override {
		return func(_, _ *uint64, attrs []*commonpb.KeyValue) []*commonpb.KeyValue {
			out := attrs[:0]
			for _, a := range attrs {
				if a.Key != key {
					out = append(out, a)
				}
			}
			return out
		}
	}
	both := func(a, b override) override {
		return func(s, e *uint64, attrs []*commonpb.KeyValue) []*commonpb.KeyValue { return b(s, e, a(s, e, attrs)) }
	}
	times := func(f func(start, end *uint64)) override {
		return func(s, e *uint64, attrs []*commonpb.KeyValue) []*commonpb.KeyValue { f(s, e); return attrs }
	}
	cases := map[string]override{}
	for _, v := range []struct {
		name string
		v    float64
	}{{"NaN", math.NaN()}, {"+Inf", math.Inf(1)}, {"-Inf", math.Inf(-1)}, {"negative", -1}, {"huge", 1e300}, {"max", math.MaxFloat64}} {
		cases["active "+v.name] = set(dbl(otlp.AttrActiveSeconds, v.v))
		cases["idle "+v.name] = set(dbl(otlp.AttrIdleSeconds, v.v))
		cases["active only "+v.name] = both(drop(otlp.AttrIdleSeconds), set(dbl(otlp.AttrActiveSeconds, v.v)))
		cases["idle only "+v.name] = both(drop(otlp.AttrActiveSeconds), set(dbl(otlp.AttrIdleSeconds, v.v)))
		cases["session id double "+v.name] = set(dbl(otlp.AttrSessionID, v.v))
	}
	cases["session id negative"] = set(i64(otlp.AttrSessionID, -5))
	cases["session id fraction"] = set(dbl(otlp.AttrSessionID, 7.5))
	cases["active int negative"] = set(i64(otlp.AttrActiveSeconds, -3))
	cases["active int huge"] = set(i64(otlp.AttrActiveSeconds, math.MaxInt64))
	cases["end before start"] = times(func(s, e *uint64) { *s, *e = *e, *s })
	cases["timestamps only, end before start"] = both(both(drop(otlp.AttrActiveSeconds), drop(otlp.AttrIdleSeconds)),
		times(func(s, e *uint64) { *s, *e = *e, *s }))
	cases["timestamps only, huge"] = both(both(drop(otlp.AttrActiveSeconds), drop(otlp.AttrIdleSeconds)),
		times(func(s, e *uint64) { *s, *e = 0, math.MaxUint64 }))
	cases["huge times"] = times(func(s, e *uint64) { *s, *e = math.MaxUint64-1e9, math.MaxUint64 })
	cases["zero start"] = times(func(s, _ *uint64) { *s = 0 })

	for name, mod := range cases {
		for _, format := range []string{"protobuf", "json"} {
			t.Run(name+"/"+format, func(t *testing.T) {
				c, err := New(Config{OTLP: OTLPConfig{Enabled: true}})
				if err != nil {
					t.Fatal(err)
				}
				h := c.Handler()
				start, end, attrs := validHold("poison")
				attrs = mod(&start, &end, attrs)
				code, resp := post(t, h, exportRequest(span(otlp.SpanHold, start, end, attrs...)), format)
				if code != http.StatusOK || resp.GetPartialSuccess().GetRejectedSpans() != 1 {
					t.Errorf("status %d, partial success %v; want 200 with the span rejected", code, resp.GetPartialSuccess())
				}
				start, end, attrs = validHold("good")
				if code, resp := post(t, h, exportRequest(span(otlp.SpanHold, start, end, attrs...)), format); code != 200 || resp.GetPartialSuccess() != nil {
					t.Errorf("valid span after it: %d %v", code, resp.GetPartialSuccess())
				}
				for _, w := range []string{"10s", "1m", "5m"} {
					doc := getTop(t, h, "window="+w)
					if len(doc.Rows) != 1 || doc.Rows[0].Tag != "good" || doc.Rows[0].HoldSeconds != 1 || doc.Rows[0].ActiveSeconds != 0.25 {
						t.Errorf("window %s: rows %+v; want only good, 1 s held, 0.25 s active", w, doc.Rows)
					}
				}
				m := getMetrics(t, h)
				if strings.Contains(m, "NaN") || strings.Contains(m, "Inf") || strings.Contains(m, `conn_tag="poison"`) {
					t.Errorf("/metrics shows the rejected span:\n%s", m)
				}
				if !strings.Contains(m, `holdtime_collector_malformed_rows_total{source="otlp",target="app"} 1`) {
					t.Errorf("rejected span not counted as malformed:\n%s", m)
				}
			})
		}
	}
}

// TestTopNeverWritesPartial200: whatever the store holds, /api/v1/top
// answers a whole JSON document, or a 500 with a JSON error, never a 200
// with an empty or cut body.
func TestTopNeverWritesPartial200(t *testing.T) {
	c, err := New(Config{OTLP: OTLPConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	c.st.addOne("app", SourceOTLP, "ok", &figures{Hold: 1})
	// Values no source can add any more: the handler must cope anyway.
	c.st.mu.Lock()
	e := c.st.entryFor(c.st.get("app", SourceOTLP), "poisoned", 1)
	e.addAt(c.st.now().Unix(), &figures{Hold: math.NaN()})
	c.st.mu.Unlock()
	w := httptest.NewRecorder()
	c.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/v1/top?window=10s", nil))
	body, _ := io.ReadAll(w.Body)
	var doc struct {
		Error string `json:"error"`
	}
	if w.Code != http.StatusInternalServerError || json.Unmarshal(body, &doc) != nil || doc.Error == "" {
		t.Errorf("got %d %q; want 500 with a JSON error", w.Code, body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	fmt.Fprintln(io.Discard, doc.Error)
}

// TestOTLPOverflowCountsSpans: past MaxTags, every span whose tag goes to
// the overflow tag counts once, however the spans are batched, and tags the
// store keeps get all their spans.
func TestOTLPOverflowCountsSpans(t *testing.T) {
	c, err := New(Config{OTLP: OTLPConfig{Enabled: true}, MaxTags: 10})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler()
	request := func(tags []int, per int) *coltrace.ExportTraceServiceRequest {
		var spans []*tracepb.Span
		for _, i := range tags {
			for range per {
				start, end, attrs := validHold(fmt.Sprintf("tag%02d", i))
				spans = append(spans, span(otlp.SpanHold, start, end, attrs...))
			}
		}
		return exportRequest(spans...)
	}
	var up, down []int
	for i := 1; i <= 15; i++ {
		up = append(up, i)
		down = append([]int{i}, down...)
	}
	post(t, h, request(up, 3), "protobuf")   // tags 11-15 overflow: 15 spans
	post(t, h, request(down, 2), "protobuf") // tags 11-15 again: 10 spans
	sr := c.st.series[seriesKey{"app", SourceOTLP}]
	if sr.overflow != 25 {
		t.Errorf("overflow counted %v, want 25 (one per span)", sr.overflow)
	}
	for i := 1; i <= 10; i++ {
		if e := sr.tags[fmt.Sprintf("tag%02d", i)]; e == nil {
			t.Errorf("tag%02d: kept %v, want 5 spans of 1 s", i, e != nil)
		} else if e.total.Hold != 5 {
			t.Errorf("tag%02d: %+v, want 5 spans of 1 s", i, e.total)
		}
	}
	if e := sr.tags[OverflowTag]; e == nil {
		t.Errorf("overflow tag: kept %v, want 25 s", e != nil)
	} else if e.total.Hold != 25 {
		t.Errorf("overflow tag: %+v, want 25 s", e.total)
	}
}

// TestOTLPActiveCappedAtHold: a hold span claiming more active time than
// it lasted counts its hold as active, no more, and no negative idle.
func TestOTLPActiveCappedAtHold(t *testing.T) {
	c, _ := New(Config{OTLP: OTLPConfig{Enabled: true}})
	end := uint64(time.Now().UnixNano())
	post(t, c.Handler(), exportRequest(span(otlp.SpanHold, end-1e9, end, str(otlp.AttrConnTag, "a"), dbl(otlp.AttrActiveSeconds, 5))), "protobuf")
	post(t, c.Handler(), exportRequest(span(otlp.SpanHold, end-1e9, end, str(otlp.AttrConnTag, "i"), dbl(otlp.AttrIdleSeconds, 5))), "protobuf")
	sr := c.st.series[seriesKey{"app", SourceOTLP}]
	if got := sr.tags["a"].total; got != (figures{Hold: 1, Active: 1}) {
		t.Errorf("active-only span: %+v, want hold 1 active 1", got)
	}
	if got := sr.tags["i"].total; got != (figures{Hold: 1, Idle: 1}) {
		t.Errorf("idle-only span: %+v, want hold 1 idle 1", got)
	}
}

// TestOTLPRejectedSpansMakeNoSeries: spans that fail validation, and
// statement spans without an operation, leave no series behind.
func TestOTLPRejectedSpansMakeNoSeries(t *testing.T) {
	c, _ := New(Config{OTLP: OTLPConfig{Enabled: true}})
	end := uint64(time.Now().UnixNano())
	post(t, c.Handler(), exportRequest(
		span(otlp.SpanHold, end, end-1e9, str(otlp.AttrConnTag, "backwards")),
		span(otlp.SpanHold, end-1e9, end, str(otlp.AttrConnTag, "nan"), dbl(otlp.AttrActiveSeconds, math.NaN())),
		span("SELECT", end-1e9, end, str(otlp.AttrConnTag, "no_operation")),
	), "protobuf")
	m := getMetrics(t, c.Handler())
	for _, tag := range []string{"backwards", "nan", "no_operation"} {
		if strings.Contains(m, `conn_tag="`+tag+`"`) {
			t.Errorf("series for %s:\n%s", tag, m)
		}
	}
}

// TestOTLPContentEncoding: gzip and identity are read; any other encoding
// is answered 415, not decoded as if it were plain.
func TestOTLPContentEncoding(t *testing.T) {
	c, _ := New(Config{OTLP: OTLPConfig{Enabled: true}})
	start, end, attrs := validHold("enc")
	plain, _ := proto.Marshal(exportRequest(span(otlp.SpanHold, start, end, attrs...)))
	var gz, fl bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	fw, _ := flate.NewWriter(&fl, flate.DefaultCompression)
	fw.Write(plain)
	fw.Close()
	for _, tc := range []struct {
		enc  string
		body []byte
		code int
	}{
		{"", plain, 200},
		{"identity", plain, 200},
		{"gzip", gz.Bytes(), 200},
		{"GZIP", gz.Bytes(), 200},
		{"deflate", fl.Bytes(), 415},
		{"br", plain, 415},
		{"zstd", plain, 415},
		{"gzip, br", gz.Bytes(), 415},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(tc.body))
		r.Header.Set("Content-Type", "application/x-protobuf")
		if tc.enc != "" {
			r.Header.Set("Content-Encoding", tc.enc)
		}
		w := httptest.NewRecorder()
		c.Handler().ServeHTTP(w, r)
		if w.Code != tc.code {
			t.Errorf("Content-Encoding %q: %d %s, want %d", tc.enc, w.Code, w.Body, tc.code)
		}
		if tc.code == 415 && !strings.Contains(w.Body.String(), "gzip") {
			t.Errorf("Content-Encoding %q: 415 without saying what is accepted: %s", tc.enc, w.Body)
		}
	}
}
