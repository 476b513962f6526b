package collector

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector/internal/otlp"
	"github.com/holdtime/holdtime/conntag"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// counters is every counter the store exposes, by name.
type counters map[string]float64

func snapshot(st *store) counters {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := counters{}
	for k, sr := range st.series {
		p := k.target + "/" + string(k.source) + "/"
		out[p+"overflow"] = sr.overflow
		out[p+"malformed"] = sr.malformed
		for tag, e := range sr.tags {
			q := p + tag + "/"
			out[q+"hold"], out[q+"idle"], out[q+"active"] = e.total.Hold, e.total.Idle, e.total.Active
			out[q+"stmts"], out[q+"errors"] = e.total.Stmts, e.total.Errors
			for r, v := range e.pinnedSecs {
				out[q+"pinned/"+r] = v
			}
		}
	}
	return out
}

// checkCounters fails unless every counter is finite, not negative, and
// at least what it was in prev (a counter that disappeared went back to
// zero).
func checkCounters(t *testing.T, when string, prev, cur counters) {
	t.Helper()
	for k, v := range cur {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Fatalf("%s: counter %s = %v", when, k, v)
		}
		if v < prev[k] {
			t.Fatalf("%s: counter %s went from %v to %v", when, k, prev[k], v)
		}
	}
	for k, v := range prev {
		if _, ok := cur[k]; !ok && v != 0 {
			t.Fatalf("%s: counter %s (%v) disappeared", when, k, v)
		}
	}
}

// checkAPI fails unless /api/v1/top answers every window and sort with a
// whole JSON document of finite figures, and (with metrics) /metrics has
// no NaN.
func checkAPI(t *testing.T, when string, h http.Handler, metrics bool) {
	t.Helper()
	for _, q := range []string{"window=10s", "window=1m&sort=idle_share", "window=5m&sort=tag&limit=3", "window=10s&source=otlp"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/v1/top?"+q, nil))
		var doc TopResponse
		if w.Code != http.StatusOK || !json.Valid(w.Body.Bytes()) || json.Unmarshal(w.Body.Bytes(), &doc) != nil {
			t.Fatalf("%s: /api/v1/top?%s: %d %q", when, q, w.Code, w.Body)
		}
		for _, r := range doc.Rows {
			// Every tag is in conntag's grammar or one of the collector's
			// own names: nothing a sender wrote reaches a terminal or a
			// label raw.
			if !conntag.ValidTag(r.Tag) {
				t.Fatalf("%s: /api/v1/top?%s: tag %q outside the grammar", when, q, r.Tag)
			}
			for _, v := range []float64{r.Occupancy, r.HoldSeconds, r.IdleHoldSeconds, r.ActiveSeconds, r.IdleShare, r.Statements, r.Errors} {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("%s: /api/v1/top?%s row %+v", when, q, r)
				}
			}
		}
	}
	if !metrics {
		return
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK || strings.Contains(w.Body.String(), "NaN") {
		t.Fatalf("%s: /metrics: %d\n%s", when, w.Code, w.Body)
	}
	for _, m := range regexp.MustCompile(`conn_tag="((?:[^"\\]|\\.)*)"`).FindAllStringSubmatch(w.Body.String(), -1) {
		if !conntag.ValidTag(m[1]) {
			t.Fatalf("%s: /metrics has conn_tag=%q, outside the grammar", when, m[1])
		}
	}
}

// otlpSeeds are the table tests' requests: valid spans, every bad number,
// statement spans.
func otlpSeeds() []*coltrace.ExportTraceServiceRequest {
	var out []*coltrace.ExportTraceServiceRequest
	start, end, attrs := validHold("seed")
	out = append(out, exportRequest(span(otlp.SpanHold, start, end, attrs...), span("SELECT", start, end, str(otlp.AttrConnTag, "seed"), str(otlp.AttrOperationName, "SELECT"))))
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, 1e300} {
		for _, k := range []string{otlp.AttrActiveSeconds, otlp.AttrIdleSeconds, otlp.AttrSessionID} {
			out = append(out, exportRequest(span(otlp.SpanHold, start, end, str(otlp.AttrConnTag, "bad"), dbl(k, v))))
		}
	}
	out = append(out, exportRequest(span(otlp.SpanHold, end, start, str(otlp.AttrConnTag, "backwards"))))
	out = append(out, exportRequest(span(otlp.SpanHold, 0, math.MaxUint64, str(otlp.AttrConnTag, "huge"))))
	out = append(out, exportRequest(span(otlp.SpanHold, start, end, str(otlp.AttrConnTag, "x\x1b[2J\n\u202e"))))
	out = append(out, exportRequest(span(otlp.SpanHold, end-7*24*3600e9, end, str(otlp.AttrConnTag, "week"))))
	out = append(out, exportRequest(span(otlp.SpanHold, end-3600e9, end, str(otlp.AttrConnTag, "hour")))) // believed, clipped
	return out
}

// FuzzOTLPReceiver posts arbitrary bodies, as protobuf or JSON, plain or
// gzip, after a valid export: the answer is a proper status, no counter
// decreases or becomes NaN, and /api/v1/top stays valid JSON.
func FuzzOTLPReceiver(f *testing.F) {
	for _, req := range otlpSeeds() {
		pb, _ := proto.Marshal(req)
		js, _ := protojson.Marshal(req)
		f.Add(pb, false, false)
		f.Add(js, true, false)
		f.Add(pb, false, true)
	}
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"db.connection.hold","startTimeUnixNano":"1","endTimeUnixNano":"2","attributes":[{"key":"conn_tag","value":{"stringValue":"x"}},{"key":"holdtime.hold.active_seconds","value":{"doubleValue":"NaN"}}]}]}]}]}`), true, false)
	f.Add([]byte("\xff\xff\xff"), false, false)
	f.Fuzz(func(t *testing.T, body []byte, asJSON, gz bool) {
		born := time.Now()
		c, err := New(Config{OTLP: OTLPConfig{Enabled: true, MaxBodyBytes: 1 << 20}, MaxTags: 4})
		if err != nil {
			t.Fatal(err)
		}
		h := c.Handler()
		post(t, h, otlpSeeds()[0], "protobuf")
		// The physical bound: each hold span is credited at most the
		// collector's age plus 10 s (the seed's one span, then the body's
		// spans, posted twice).
		spans := 1 + 2*holdSpans(body, asJSON)
		prev := snapshot(c.st)
		ct := "application/x-protobuf"
		if asJSON {
			ct = "application/json"
		}
		send := body
		if gz {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(body)
			zw.Close()
			send = b.Bytes()
		}
		for i := range 2 {
			r := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(send))
			r.Header.Set("Content-Type", ct)
			if gz {
				r.Header.Set("Content-Encoding", "gzip")
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			switch w.Code {
			case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			default:
				t.Fatalf("post %d: status %d %q", i, w.Code, w.Body)
			}
			cur := snapshot(c.st)
			checkCounters(t, fmt.Sprintf("post %d", i), prev, cur)
			checkAPI(t, fmt.Sprintf("post %d", i), h, i == 1)
			prev = cur
		}
		doc := getTop(t, h, "window=5m")
		var held float64
		for _, r := range doc.Rows {
			held += r.HoldSeconds
		}
		if limit := float64(spans) * (time.Since(born).Seconds() + 10); held > limit {
			t.Fatalf("%.1f s held from %d hold spans in %.3f s: above the physical bound %.1f s", held, spans, time.Since(born).Seconds(), limit)
		}
		// Memory stays bounded: at most MaxTags tags and the collector's
		// own names.
		if len(doc.Rows) > 4+3 {
			t.Fatalf("%d rows with MaxTags 4", len(doc.Rows))
		}
	})
}

// holdSpans counts the hold spans a fuzzed body carries when it decodes
// (gzip is applied to the body as given, so the body itself is the
// message); 0 when it does not decode.
func holdSpans(body []byte, asJSON bool) int {
	var req coltrace.ExportTraceServiceRequest
	var err error
	if asJSON {
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(body, &req)
	} else {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		return 0
	}
	n := 0
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				if sp.GetName() == otlp.SpanHold {
					n++
				}
			}
		}
	}
	return n
}

// eventsSeeds are the table tests' lines: a real log's, absurd times,
// the tailer test's, garbage.
func eventsSeeds(tb testing.TB) [][]byte {
	b, err := os.ReadFile("testdata/states_eventslog_events.json")
	if err != nil {
		tb.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	now := time.Now().UnixMicro()
	seeds := [][]byte{
		[]byte(strings.Join(lines[:40], "")),
		[]byte(sampleLine + "\n" + sampleLine + "\n"),
		[]byte(strings.Join(absurdLines(now), "\n") + "\n"),
		[]byte(strings.Join(lines[:5], "") + strings.Join(absurdLines(1796200038250235), "\n") + "\n" + strings.Join(lines[5:12], "")),
		[]byte(eventLine(1, now, now+100, "BEGIN") + "\n" + eventLine(1, now+200, now+300, "/* conn_tag:a */ SELECT 1") + "\n" +
			eventLine(1, now+400, now+500, "COMMIT") + "\n{garbage\n"),
	}
	return seeds
}

// FuzzEventsLog feeds arbitrary events log content to the daemon's tailer,
// in three writes, and to analyze: no counter decreases or becomes NaN,
// /api/v1/top stays valid JSON, and the report's figures are finite and
// not negative.
func FuzzEventsLog(f *testing.F) {
	for _, s := range eventsSeeds(f) {
		f.Add(s, uint16(len(s)/3), uint16(len(s)/2))
	}
	path := filepath.Join(f.TempDir(), "events.json") // inputs run one at a time per process
	f.Fuzz(func(t *testing.T, log []byte, cut1, cut2 uint16) {
		c, err := New(Config{OTLP: OTLPConfig{Enabled: true}, MaxTags: 8})
		if err != nil {
			t.Fatal(err)
		}
		h := c.Handler()
		ps := newProxySQLSessions("px", c.st, ProcesslistConfig{}, true, false, time.Second, nil)
		tl := &tailer{sink: storeSink{c.st, "px", SourceProxySQLEvents}, log: c.cfg.Logger, target: "px", sessions: ps, name: "events.log"}
		a, b := min(int(cut1), len(log)), min(int(cut2), len(log))
		a, b = min(a, b), max(a, b)
		prev := counters{}
		for i, chunk := range [][]byte{log[:a], log[a:b], log[b:]} {
			tl.feed(chunk)
			tl.sink.Malformed(tl.bad)
			tl.bad = 0
			ps.flushEvents()
			cur := snapshot(c.st)
			checkCounters(t, fmt.Sprintf("write %d", i), prev, cur)
			checkAPI(t, fmt.Sprintf("write %d", i), h, false)
			prev = cur
		}
		tl.feed([]byte("\n"))
		ps.finish()
		checkCounters(t, "end", prev, snapshot(c.st))
		checkAPI(t, "end", h, true)

		if err := os.WriteFile(path, log, 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := Analyze(context.Background(), AnalyzeConfig{EventsLogs: []string{path}, MaxTags: 8})
		if err != nil {
			return // an unreadable gzip header, say: reported, nothing counted
		}
		if rep.To.Before(rep.From) || rep.To.Year() > 2200 {
			t.Fatalf("window %v .. %v", rep.From, rep.To)
		}
		for _, tr := range rep.Tags {
			for _, v := range []float64{tr.HoldSeconds, tr.Share, tr.P50Seconds, tr.P99Seconds, tr.MaxSeconds, tr.ActiveSeconds,
				tr.IdleSeconds, tr.IdleShare, tr.PinnedIdleSeconds} {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("tag %+v", tr)
				}
			}
			if tr.Holds < 0 || tr.Statements < 0 || tr.Transactions < 0 {
				t.Fatalf("tag %+v", tr)
			}
		}
		var js bytes.Buffer
		if err := rep.WriteJSON(&js); err != nil || !json.Valid(js.Bytes()) {
			t.Fatalf("report JSON: %v", err)
		}
	})
}
