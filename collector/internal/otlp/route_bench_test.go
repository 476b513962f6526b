package otlp_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/collector/internal/otlp"
)

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func i64(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func dbl(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

// cpuSeconds is the process's CPU time so far, user and system, every
// goroutine and the GC included.
func cpuSeconds(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkSpanRoute: hold spans per CPU-second through a collector's
// /v1/traces (decode, check, add per tag, route the session hint) with 0,
// 10 and 100 ProxySQL targets, each span naming the ProxySQL it went
// through (server.address, conntag's WithSessionID), round robin over the
// targets. The router gives a span to that target only, so the rate should
// not fall with the number of targets (when every span was offered to
// every target, ten targets cut it to a third). targets=0 is the baseline:
// the collector with the OTLP receiver alone, spans routed nowhere.
// Exports of 1,000 spans, protobuf, through the collector's handler
// without a network.
func BenchmarkSpanRoute(b *testing.B) {
	const perExport = 1000
	for _, targets := range []int{0, 10, 100} {
		b.Run(fmt.Sprintf("targets=%d", targets), func(b *testing.B) {
			cfg := collector.Config{OTLP: collector.OTLPConfig{Enabled: true}, MaxTags: 1000}
			for i := range targets {
				name := "px" + strconv.Itoa(i)
				cfg.ProxySQL = append(cfg.ProxySQL, collector.ProxySQLConfig{Name: name,
					// Never dialled: the benchmark does not Run the collector.
					DSN: "stats:stats@tcp(127.0.0.1:1)/", ClientAddress: name + ":6033"})
			}
			c, err := collector.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			h := c.Handler()
			end := uint64(time.Now().UnixNano())
			spans := make([]*tracepb.Span, perExport)
			for i := range spans {
				host := "px" + strconv.Itoa(i%max(targets, 1))
				spans[i] = &tracepb.Span{Name: otlp.SpanHold, StartTimeUnixNano: end - 5e6, EndTimeUnixNano: end,
					TraceId: make([]byte, 16), SpanId: make([]byte, 8),
					Attributes: []*commonpb.KeyValue{str(otlp.AttrConnTag, "tag_"+strconv.Itoa(i%20)), dbl(otlp.AttrActiveSeconds, 0.002),
						dbl(otlp.AttrIdleSeconds, 0.003), i64(otlp.AttrSessionID, int64(i/max(targets, 1)+1)), str("db.system.name", "mysql"),
						str(otlp.AttrServerAddress, host), i64(otlp.AttrServerPort, 6033)}}
			}
			body, err := proto.Marshal(&coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
				Resource:   &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "shop")}},
				ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}},
			}}})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			cpu := cpuSeconds(b)
			b.ResetTimer()
			for range b.N {
				r := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/x-protobuf")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*perExport)/(cpuSeconds(b)-cpu), "spans/cpu-s")
		})
	}
}
