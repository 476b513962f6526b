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
// pays an atomic add per hold and statement, and at each export (60 s by
// default) one point per series; the receiver's work per export grows with
// the series (tags × pools × operations), never with holds, and every hold
// counts, exactly. They cannot say which ProxySQL session a hold went
// through.
//
// Spans (conntag's TracerProvider): the app pays a span per hold (and per
// statement unless WithoutStatementSpans), the receiver decodes every one
// and the span router offers each to the one target it names. A hold span
// with holdtime.session_id buys the exact join of that hold to its ProxySQL
// session, which tags backend hold the processlist could not. Sampled spans
// (WithHoldSpanSampling: every long or idle hold, a rate of the rest) keep
// the join for the holds that matter at the proxy; app figures summed from
// sampled spans would be biased, which is why with counters on
// (Receiver.HintsOnly) spans add no figures at all. BENCHMARKS.md has the
// receiver's cost per export of N tags from counters against the cost of
// the spans of the same holds.
package otlp
