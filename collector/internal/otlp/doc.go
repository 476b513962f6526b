// Package otlp is the collector's push source: http.Handlers that take
// conntag's telemetry over OTLP/HTTP and write per-tag figures to a Sink.
// MetricsReceiver (/v1/metrics) turns conntag's per-tag counters into the
// app layer's figures; Receiver (/v1/traces) takes hold spans and gives
// each span's session hint to the one target the span went through
// (Router), and, when no counters are received, the app figures too.
//
// # Counters and spans: what each costs and buys
//
// Counters (conntag's MeterProvider with an OTLP metric exporter): the app
// pays an atomic add per hold and statement, and one point per series at
// each export; the receiver's work per export grows with the series (about
// 6 per tag: tags × pools × operations), never with holds, and every hold
// counts, exactly. Measured (BENCHMARKS.md, BenchmarkAppFigures, 3 rounds
// on 2 shared cores): 11 to 15 µs of collector CPU per tag per export at
// 10, 100 and 1,000 tags, about what 3 hold spans cost, three quarters of
// it protobuf decoding. conntag's counters include the holds in progress,
// so a long hold counts as it goes, where its span counts only once it
// ends. Counters cannot say which ProxySQL session a hold went through. The figures land in the collector's windows when the
// export arrives: export at least as often as the shortest window read
// (10 s for holdtime top's; the SDK's default is 60 s).
//
// Spans (conntag's TracerProvider): the app pays a span per hold (and per
// statement unless WithoutStatementSpans); the receiver decodes every one
// (about 4 µs of collector CPU each, some 200,000 per CPU-second) and the
// span router gives each to the one target it names, so the rate is the
// same with 0, 10 or 100 ProxySQL targets (BenchmarkSpanRoute). A hold span
// with holdtime.session_id buys the exact join of that hold to its
// ProxySQL session, which tags backend hold the processlist could not.
// Sampled spans (WithHoldSpanSampling: every long or idle hold, a rate of
// the rest) keep the join for the holds that matter at the proxy; app
// figures summed from sampled spans would be biased, which is why with
// counters on (Receiver.HintsOnly) spans add no figures at all.
package otlp
