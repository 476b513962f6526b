package otlp

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/holdtime/holdtime/collector/internal/source"
)

// discardSink is a Sink that keeps nothing: the benchmarks measure the
// receiver, not the store.
type discardSink struct{}

func (discardSink) Add(map[string]*source.TagDelta) {}
func (discardSink) Success()                        {}
func (discardSink) Malformed(int)                   {}

// counterExport is one app's export of conntag's counters for tags tags, as
// the SDK sends it: per tag hold, active and idle seconds and holds (one
// pool), and statements of two operations.
func counterExport(tags int, start time.Time) *colmetrics.ExportMetricsServiceRequest {
	pool := kv("db.client.connection.pool.name", "main")
	system := kv("db.system.name", "mysql")
	mk := func(name string, asInt bool, ops ...string) *metricspb.Metric {
		sum := &metricspb.Sum{IsMonotonic: true, AggregationTemporality: cumulative}
		for i := range tags {
			tag := kv(AttrConnTag, "tag_"+strconv.Itoa(i))
			attrSets := [][]*commonpb.KeyValue{{tag, pool, system}}
			if ops != nil {
				attrSets = nil
				for _, op := range ops {
					// In key order, as the SDK writes an attribute set.
					attrSets = append(attrSets, []*commonpb.KeyValue{tag, kv("db.operation.name", op), system})
				}
			}
			for _, attrs := range attrSets {
				p := &metricspb.NumberDataPoint{Attributes: attrs, StartTimeUnixNano: uint64(start.UnixNano())}
				if asInt {
					p.Value = &metricspb.NumberDataPoint_AsInt{}
				} else {
					p.Value = &metricspb.NumberDataPoint_AsDouble{}
				}
				sum.DataPoints = append(sum.DataPoints, p)
			}
		}
		return &metricspb.Metric{Name: name, Data: &metricspb.Metric_Sum{Sum: sum}}
	}
	return &colmetrics.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", "shop"), kv("service.instance.id", "shop-7f9c")}},
		ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{
			mk(MetricHoldTime, false), mk(MetricActiveTime, false), mk(MetricIdleTime, false), mk(MetricHolds, true),
			mk(MetricOperations, true, "SELECT", "UPDATE"),
		}}},
	}}}
}

// bump makes an export the next one: a later time and larger values.
func bump(req *colmetrics.ExportMetricsServiceRequest, now uint64, i int) {
	for _, rm := range req.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				for _, p := range m.GetSum().DataPoints {
					p.TimeUnixNano = now
					switch v := p.Value.(type) {
					case *metricspb.NumberDataPoint_AsDouble:
						v.AsDouble = float64(i) * 0.5
					case *metricspb.NumberDataPoint_AsInt:
						v.AsInt = int64(i) * 10
					}
				}
			}
		}
	}
}

// holdSpans is one export of n conntag hold spans over tags tags.
func holdSpans(n, tags int, end time.Time) *coltrace.ExportTraceServiceRequest {
	spans := make([]*tracepb.Span, n)
	for i := range spans {
		e := uint64(end.UnixNano())
		spans[i] = &tracepb.Span{Name: SpanHold, StartTimeUnixNano: e - 5e6, EndTimeUnixNano: e,
			TraceId: make([]byte, 16), SpanId: make([]byte, 8),
			Attributes: []*commonpb.KeyValue{kv(AttrConnTag, "tag_"+strconv.Itoa(i%tags)), dblKV(AttrActiveSeconds, 0.002),
				dblKV(AttrIdleSeconds, 0.003), kv(AttrSessionID, i%500+1), kv("db.system.name", "mysql"),
				kv(AttrServerAddress, "proxysql"), kv(AttrServerPort, 6033)}}
	}
	return &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:   &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", "shop")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}},
	}}}
}

func dblKV(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

type nopRouter struct{}

func (nopRouter) Route(string, int64, bool, int64, source.Hint) {}

// BenchmarkAppFigures: what the app layer's figures cost the collector,
// from counters (one export of N tags' counters: decoded, turned into
// deltas) against spans (one export of 1,000 hold spans: decoded and
// added). An app exports its counters once per interval (60 s by default),
// whatever its hold rate; it sends a span per hold. Reported per export
// (ns/op) and per tag (ns/tag) or per hold (ns/hold).
func BenchmarkAppFigures(b *testing.B) {
	for _, tags := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("counters/tags=%d", tags), func(b *testing.B) {
			start := time.Now().Add(-time.Hour)
			body, err := proto.Marshal(counterExport(tags, start))
			if err != nil {
				b.Fatal(err)
			}
			m := &MetricsReceiver{Sink: discardSink{}, MaxTags: 10000, Started: start.Add(-time.Second)}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			t := uint64(time.Now().Add(-time.Minute).UnixNano())
			b.ResetTimer()
			for i := range b.N {
				var req colmetrics.ExportMetricsServiceRequest
				if err := proto.Unmarshal(body, &req); err != nil {
					b.Fatal(err)
				}
				bump(&req, t+uint64(i+1)*1000, i+1)
				if rej := m.ingest(&req); rej.total() != 0 {
					b.Fatal(rej.message())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tags), "ns/tag")
			b.ReportMetric(float64(m.Series()), "series")
		})
	}
	b.Run("spans/holds=1000", func(b *testing.B) {
		const holds = 1000
		body, err := proto.Marshal(holdSpans(holds, 100, time.Now()))
		if err != nil {
			b.Fatal(err)
		}
		o := &Receiver{Sink: discardSink{}, Router: nopRouter{}, MaxTags: 10000}
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		b.ResetTimer()
		for range b.N {
			var req coltrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				b.Fatal(err)
			}
			if rej := o.ingest(&req); rej.total() != 0 {
				b.Fatal(rej.message(o.maxHold()))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/holds, "ns/hold")
	})
}

// BenchmarkIngest: the receivers' own work on one export, decoding
// excluded (protobuf's unmarshal is most of BenchmarkAppFigures, and would
// drown a change to how a point or a span is checked and credited):
// counters of 1,000 tags (6,000 cumulative points, each a later one of its
// series) and 1,000 hold spans. Reported per point or span as well, and in
// CPU time (cpu-ns/op, the process's, GC included): on a loaded machine
// wall time per op swung 2x between runs of the same binary, which hides
// any change a few percent wide.
func BenchmarkIngest(b *testing.B) {
	b.Run("counters/tags=1000", func(b *testing.B) {
		const tags = 1000
		start := time.Now().Add(-time.Hour)
		req := counterExport(tags, start)
		m := &MetricsReceiver{Sink: discardSink{}, MaxTags: 10000, Started: start.Add(-time.Second)}
		t := uint64(time.Now().Add(-time.Minute).UnixNano())
		b.ReportAllocs()
		cpu := processCPU(b)
		b.ResetTimer()
		for i := range b.N {
			bump(req, t+uint64(i+1)*1000, i+1)
			if rej := m.ingest(req); rej.total() != 0 {
				b.Fatal(rej.message())
			}
		}
		b.StopTimer()
		b.ReportMetric((processCPU(b)-cpu).Seconds()*1e9/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(6*tags), "ns/point")
	})
	b.Run("spans/holds=1000", func(b *testing.B) {
		const holds = 1000
		req := holdSpans(holds, 100, time.Now())
		o := &Receiver{Sink: discardSink{}, Router: nopRouter{}, MaxTags: 10000}
		b.ReportAllocs()
		cpu := processCPU(b)
		b.ResetTimer()
		for range b.N {
			if rej := o.ingest(req); rej.total() != 0 {
				b.Fatal(rej.message(o.maxHold()))
			}
		}
		b.StopTimer()
		b.ReportMetric((processCPU(b)-cpu).Seconds()*1e9/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/holds, "ns/span")
	})
}

// processCPU is the process's CPU time so far, user and system, every
// goroutine and the GC included.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
