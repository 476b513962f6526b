package conntag

import (
	"context"
	"math"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestHoldSpanWeight(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, c := range []struct {
		name       string
		s          *SpanSampling
		held, idle int64
		want       float64
	}{
		{"no sampling: every hold", nil, 1, 0, 1},
		{"zero value: none", &SpanSampling{}, 10 * ms, 10 * ms, 0},
		{"long enough", &SpanSampling{MinHold: 5 * time.Millisecond}, 5 * ms, 0, 1},
		{"just short", &SpanSampling{MinHold: 5 * time.Millisecond}, 5*ms - 1, 0, 0},
		{"idle enough", &SpanSampling{MinIdle: 2 * time.Millisecond}, 3 * ms, 2 * ms, 1},
		{"idle short, hold long but no hold rule", &SpanSampling{MinIdle: 2 * time.Millisecond}, 100 * ms, ms, 0},
		{"rate 1", &SpanSampling{MinHold: time.Second, Rate: 1}, ms, 0, 1},
		{"rule beats rate: weight 1", &SpanSampling{MinHold: time.Millisecond, Rate: 1}, 2 * ms, 0, 1},
	} {
		in := &instr{cfg: config{holdSampling: c.s}}
		if got := in.holdSpanWeight(c.held, c.idle); got != c.want {
			t.Errorf("%s: weight %v, want %v", c.name, got, c.want)
		}
	}
	// The option clamps what cannot be a probability.
	var cfg config
	WithHoldSpanSampling(SpanSampling{Rate: 3, MinHold: -time.Second})(&cfg)
	if cfg.holdSampling.Rate != 1 || cfg.holdSampling.MinHold != 0 {
		t.Errorf("clamped sampling = %+v", *cfg.holdSampling)
	}
}

// clientBounds are the client's own bounds on the total length of a run's
// holds: inner (from getting the connection to giving it back) and outer
// (from asking for it to the return of Close). conntag's holds lie between.
type clientBounds struct {
	inner, outer time.Duration
	maxOuter     time.Duration
}

func runHolds(t *testing.T, f *fixture, tag string, n int, body func(context.Context, func(string) error) error) clientBounds {
	t.Helper()
	ctx := WithTag(context.Background(), tag)
	var b clientBounds
	for range n {
		t0 := time.Now()
		c, err := f.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		exec := func(q string) error { _, err := c.ExecContext(ctx, q); return err }
		if err := body(ctx, exec); err != nil {
			t.Fatal(err)
		}
		t2 := time.Now()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		t3 := time.Now()
		b.inner += t2.Sub(t1)
		b.outer += t3.Sub(t0)
		b.maxOuter = max(b.maxOuter, t3.Sub(t0))
	}
	return b
}

// holdSpansByTag returns the ended hold spans per conn_tag, and the number
// of other spans.
func holdSpansByTag(rec *tracetest.SpanRecorder) (map[string][]sdktrace.ReadOnlySpan, int) {
	out := map[string][]sdktrace.ReadOnlySpan{}
	others := 0
	for _, s := range rec.Ended() {
		if s.Name() != "db.connection.hold" {
			others++
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == AttrConnTag {
				out[kv.Value.AsString()] = append(out[kv.Value.AsString()], s)
			}
		}
	}
	return out, others
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) (float64, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			switch kv.Value.Type().String() {
			case "FLOAT64":
				return kv.Value.AsFloat64(), true
			case "INT64":
				return float64(kv.Value.AsInt64()), true
			}
		}
	}
	return 0, false
}

// TestHoldSpanSamplingKeepsCountersExact runs three kinds of holds against
// the real server with spans sampled by rule only (rate 0): short ones
// (below both thresholds), long active ones (a statement longer than
// MinHold) and idle ones (the connection kept unused longer than MinIdle).
// The counters must match what the client measured for every hold, spans
// must exist for exactly the holds the rule chose, and the statement spans
// must be gone while the hold spans still count statements.
func TestHoldSpanSamplingKeepsCountersExact(t *testing.T) {
	const minHold, minIdle = 60 * time.Millisecond, 30 * time.Millisecond
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := newFixture(t, WithTracerProvider(tp), WithSessionID(), WithoutStatementSpans(),
		WithHoldSpanSampling(SpanSampling{MinHold: minHold, MinIdle: minIdle}))
	const nShort, nLong, nIdle = 200, 4, 6
	short := runHolds(t, f, "short", nShort, func(_ context.Context, exec func(string) error) error {
		return exec("SELECT 1")
	})
	long := runHolds(t, f, "long", nLong, func(_ context.Context, exec func(string) error) error {
		return exec("SELECT SLEEP(0.07)") // active past MinHold
	})
	idle := runHolds(t, f, "idle", nIdle, func(_ context.Context, exec func(string) error) error {
		if err := exec("SELECT 1"); err != nil {
			return err
		}
		time.Sleep(minIdle + 5*time.Millisecond) // the idle hold itself is the workload
		return nil
	})

	m := f.metrics(t)
	for _, c := range []struct {
		tag string
		n   int
		b   clientBounds
	}{{"short", nShort, short}, {"long", nLong, long}, {"idle", nIdle, idle}} {
		hold := m["holdtime.connection.hold_time"][c.tag].sum
		active := m["holdtime.connection.active_time"][c.tag].sum
		idleS := m["holdtime.connection.idle_time"][c.tag].sum
		if got := m["holdtime.connection.holds"][c.tag].sum; got != float64(c.n) {
			t.Errorf("%s: holds counter %v, want %d", c.tag, got, c.n)
		}
		if hold < c.b.inner.Seconds() || hold > c.b.outer.Seconds() {
			t.Errorf("%s: hold_time %.6f s outside the client's bounds [%.6f, %.6f]", c.tag, hold, c.b.inner.Seconds(), c.b.outer.Seconds())
		}
		if math.Abs(active+idleS-hold) > 1e-6 {
			t.Errorf("%s: active %.6f + idle %.6f != hold %.6f", c.tag, active, idleS, hold)
		}
	}
	if got, want := m["holdtime.connection.active_time"]["long"].sum, float64(nLong)*0.07; got < want {
		t.Errorf("long: active_time %.3f s, want at least the server's sleeps, %.3f", got, want)
	}
	if got, want := m["holdtime.connection.idle_time"]["idle"].sum, float64(nIdle)*(minIdle+5*time.Millisecond).Seconds(); got < want {
		t.Errorf("idle: idle_time %.3f s, want at least the client's sleeps, %.3f", got, want)
	}

	spans, others := holdSpansByTag(rec)
	if others != 0 {
		t.Errorf("%d statement spans with WithoutStatementSpans", others)
	}
	if len(spans["long"]) != nLong || len(spans["idle"]) != nIdle {
		t.Errorf("hold spans: long %d (want %d), idle %d (want %d)", len(spans["long"]), nLong, len(spans["idle"]), nIdle)
	}
	// A short hold gets a span only if it was itself past a threshold,
	// which the client would have seen (never, on an unloaded machine).
	if short.maxOuter < minIdle && len(spans["short"]) != 0 {
		t.Errorf("%d spans for short holds, all under %v", len(spans["short"]), short.maxOuter)
	}
	for tag, ss := range spans {
		for _, s := range ss {
			held := s.EndTime().Sub(s.StartTime())
			idleS, _ := spanAttr(s, "holdtime.hold.idle_seconds")
			if held < minHold && idleS < minIdle.Seconds() {
				t.Errorf("%s: span of a hold of %v, idle %.3f s: the rule does not choose it", tag, held, idleS)
			}
			if w, ok := spanAttr(s, "holdtime.hold.sample_weight"); !ok || w != 1 {
				t.Errorf("%s: sample_weight %v %v, want 1 for a rule's span", tag, w, ok)
			}
			if n, _ := spanAttr(s, "holdtime.hold.statements"); n != 1 {
				t.Errorf("%s: holdtime.hold.statements = %v, want 1", tag, n)
			}
			if id, ok := spanAttr(s, "holdtime.session_id"); !ok || id <= 0 {
				t.Errorf("%s: no holdtime.session_id on a hold span", tag)
			}
		}
	}
}

// TestHoldSpanSamplingRate: with no rule, the share of holds with a span is
// the rate (within five standard deviations of the binomial), each carrying
// the weight 1/rate, and the counters still count every hold.
func TestHoldSpanSamplingRate(t *testing.T) {
	const n, rate = 800, 0.25
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := newFixture(t, WithTracerProvider(tp), WithHoldSpanSampling(SpanSampling{Rate: rate}))
	runHolds(t, f, "rated", n, func(_ context.Context, exec func(string) error) error { return exec("SELECT 1") })
	spans, stmtSpans := holdSpansByTag(rec)
	got := len(spans["rated"])
	sd := math.Sqrt(n * rate * (1 - rate))
	if math.Abs(float64(got)-n*rate) > 5*sd {
		t.Errorf("%d hold spans of %d holds at rate %v: want %v ± %.0f", got, n, rate, n*rate, 5*sd)
	}
	for _, s := range spans["rated"] {
		if w, _ := spanAttr(s, "holdtime.hold.sample_weight"); w != 1/rate {
			t.Fatalf("sample_weight %v, want %v", w, 1/rate)
		}
	}
	if stmtSpans != n {
		t.Errorf("%d statement spans, want %d: hold sampling must not touch them", stmtSpans, n)
	}
	if h := f.metrics(t)["holdtime.connection.holds"]["rated"].sum; h != n {
		t.Errorf("holds counter %v, want %d", h, n)
	}
}

// TestHoldSpanParent: a hold span made when the hold ends is still the
// child of the span the borrower was in.
func TestHoldSpanParent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := newFixture(t, WithTracerProvider(tp))
	ctx, parent := tp.Tracer("test").Start(WithTag(context.Background(), "child"), "request")
	if _, err := f.db.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	parent.End()
	spans, _ := holdSpansByTag(rec)
	if len(spans["child"]) != 1 {
		t.Fatalf("%d hold spans, want 1", len(spans["child"]))
	}
	s := spans["child"][0]
	if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("hold span's parent %v, want the request span %v", s.Parent().SpanID(), parent.SpanContext().SpanID())
	}
	if !s.EndTime().After(s.StartTime()) {
		t.Errorf("hold span from %v to %v", s.StartTime(), s.EndTime())
	}
}
