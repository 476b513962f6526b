package collector

import (
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector/internal/otlp"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// TestOTLPAbsurdHoldsAreNotBelieved replays the hostile case of issue 25:
// 50 well-formed spans each claiming a 7-day hold made one tag hold 14
// million connections in a 1-minute window. Now a span longer than the
// maximum is rejected and counted, and a believable long hold is credited
// at most the time the collector has been counting plus its shortest
// window.
func TestOTLPAbsurdHoldsAreNotBelieved(t *testing.T) {
	born := time.Now()
	c, err := New(Config{OTLP: OTLPConfig{Enabled: true, MaxHold: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler()
	end := uint64(time.Now().UnixNano())
	week := uint64(7 * 24 * time.Hour)
	var absurd, long []*tracepb.Span
	for i := range 50 {
		absurd = append(absurd, span(otlp.SpanHold, end-week, end, str(otlp.AttrConnTag, "week_long"), i64(otlp.AttrSessionID, int64(i+1))))
		// 30 min: under the maximum, but far longer than this collector
		// has existed.
		long = append(long, span(otlp.SpanHold, end-uint64(30*time.Minute), end, str(otlp.AttrConnTag, "half_hour"),
			dbl(otlp.AttrActiveSeconds, 600), dbl(otlp.AttrIdleSeconds, 1200)))
	}
	code, resp := post(t, h, exportRequest(append(absurd, long...)...), "protobuf")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	if got := resp.GetPartialSuccess().GetRejectedSpans(); got != 50 {
		t.Errorf("rejected %d spans, want the 50 week-long ones", got)
	}
	if msg := resp.GetPartialSuccess().GetErrorMessage(); !strings.Contains(msg, "50 holding longer than the maximum hold believed (1h0m0s)") {
		t.Errorf("the message does not name the maximum: %q", msg)
	}
	// Measured after the post: the collector has counted for at most this
	// long, so no span may have added more.
	uptime := time.Since(born).Seconds()
	doc := getTop(t, h, "window=1m")
	var found bool
	for _, r := range doc.Rows {
		switch r.Tag {
		case "week_long":
			t.Errorf("a rejected span made figures: %+v", r)
		case "half_hour":
			found = true
			// Each span is credited at most the collector's age plus the
			// shortest window (10 s); before, 30 min each.
			if r.HoldSeconds > 50*(uptime+10) {
				t.Errorf("50 spans of 30 min credited %.1f s after %.3f s of counting: more than 50 connections could hold", r.HoldSeconds, uptime)
			}
			// active:idle keeps the span's 1:2 when clipped.
			if r.HoldSeconds > 0 && (r.IdleShare < 0.66 || r.IdleShare > 0.67) {
				t.Errorf("idle share %.3f, the spans said 2/3", r.IdleShare)
			}
		}
	}
	if !found {
		t.Fatalf("the 30-minute holds are missing: %+v", doc.Rows)
	}
}

// TestOTLPRejectionsNameTheirCause: each rejected span is named by what is
// wrong with it (a 65-character tag was called "without a valid duration").
func TestOTLPRejectionsNameTheirCause(t *testing.T) {
	c, err := New(Config{OTLP: OTLPConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler()
	end := uint64(time.Now().UnixNano())
	tag65 := strings.Repeat("a", 65)
	for _, tc := range []struct {
		name  string
		attrs []*commonpb.KeyValue
		start uint64
		end   uint64
		want  string
	}{
		{"65-character tag", []*commonpb.KeyValue{str(otlp.AttrConnTag, tag65)}, end - 1e9, end,
			`1 with a conn_tag outside the tag grammar (1 to 64 of [A-Za-z0-9_.:-]); first bad tag "` + tag65[:64]},
		{"escape sequence in the tag", []*commonpb.KeyValue{str(otlp.AttrConnTag, "x\x1b[2J")}, end - 1e9, end,
			`outside the tag grammar (1 to 64 of [A-Za-z0-9_.:-]); first bad tag "x\x1b[2J"`},
		{"NaN idle", []*commonpb.KeyValue{str(otlp.AttrConnTag, "ok"), dbl(otlp.AttrIdleSeconds, -1)}, end - 1e9, end,
			"1 with an active, idle or session attribute that is not a finite, non-negative number"},
		{"ends before it starts", []*commonpb.KeyValue{str(otlp.AttrConnTag, "ok")}, end, end - 1e9,
			"1 without a valid duration"},
		{"ends an hour from now", []*commonpb.KeyValue{str(otlp.AttrConnTag, "ok")}, end, end + uint64(time.Hour),
			"1 without a valid duration"},
		{"two days", []*commonpb.KeyValue{str(otlp.AttrConnTag, "ok")}, end - uint64(48*time.Hour), end,
			"1 holding longer than the maximum hold believed (24h0m0s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp := post(t, h, exportRequest(span(otlp.SpanHold, tc.start, tc.end, tc.attrs...)), "json")
			msg := resp.GetPartialSuccess().GetErrorMessage()
			if resp.GetPartialSuccess().GetRejectedSpans() != 1 || !strings.Contains(msg, tc.want) {
				t.Errorf("rejected %d: %q, want it to say %q", resp.GetPartialSuccess().GetRejectedSpans(), msg, tc.want)
			}
			if strings.Contains(tc.name, "tag") && strings.Contains(msg, "duration") {
				t.Errorf("a bad tag blamed on the duration: %q", msg)
			}
		})
	}
	for _, r := range getTop(t, h, "window=1m").Rows {
		if r.Tag != "unknown" && r.HoldSeconds > 0 {
			t.Errorf("a rejected span made figures: %+v", r)
		}
	}
}
