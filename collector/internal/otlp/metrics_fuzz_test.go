package otlp

import (
	"testing"
	"time"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzMetricsReceiver: whatever an export holds, the receiver writes only
// finite, non-negative figures, and the same export received again (an
// exporter's retry) adds nothing.
func FuzzMetricsReceiver(f *testing.F) {
	for _, req := range []*colmetrics.ExportMetricsServiceRequest{
		export("a", hold(pt{tag: "checkout", start: 1, time: 11, value: 4}, pt{tag: "checkout", start: 1, time: 21, value: 9})),
		export("a", hold(pt{tag: "checkout", start: 1, time: 21, value: 9}, pt{tag: "checkout", start: 1, time: 11, value: 4})),
		export("a", hold(pt{tag: "checkout", start: noStart, time: 11, value: 4}, pt{tag: "checkout", start: noStart, time: 21, value: 1})),
		export("a", sum(MetricHoldTime, delta, pt{tag: "checkout", start: 1, time: 11, value: 4}, pt{tag: "checkout", start: 11, time: 11, value: 4})),
		export("a", sum(MetricOperations, cumulative, pt{tag: "checkout", start: 1, time: 11, value: 50, asInt: true, error: true}),
			sum(MetricIdleTime, cumulative, pt{tag: "bad tag", start: 1, time: 11, value: 1}, pt{tag: "-", start: 1, time: 11, value: 1})),
		export("a", hold(pt{tag: "checkout", start: 1, time: 11, value: 1e300}, pt{tag: "x", start: 1, time: 3600 + 600, value: 1})),
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req colmetrics.ExportMetricsServiceRequest
		if proto.Unmarshal(body, &req) != nil {
			return
		}
		sink := newRecordingSink()
		now := t0.Add(time.Hour)
		m := &MetricsReceiver{Sink: sink, MaxTags: 3, Started: t0, MaxSeries: 50, Now: func() time.Time { return now }}
		m.ingest(&req)
		first := map[string]float64{}
		for tag, d := range sink.tags {
			if !d.Figures.Sane() || !(d.Obs >= 0) {
				t.Fatalf("tag %q: figures %+v, %v holds", tag, d.Figures, d.Obs)
			}
			first[tag] = d.Hold + d.Active + d.Idle + d.Stmts + d.Errors + d.Obs
		}
		m.ingest(&req)
		for tag, d := range sink.tags {
			if again := d.Hold + d.Active + d.Idle + d.Stmts + d.Errors + d.Obs; again != first[tag] {
				t.Fatalf("tag %q: the same export again moved its figures from %v to %v", tag, first[tag], again)
			}
		}
	})
}
