package conntag

import (
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures Open and OpenDB.
type Option func(*config)

type config struct {
	meterProvider  metric.MeterProvider
	tracerProvider trace.TracerProvider
	metrics        bool
	histograms     bool
	defaultTag     string
	format         Format
	static         map[string]string
	maxTags        int
	dbSystem       string
	poolName       string
	longHold       time.Duration
	onLongHold     func(LongHold)
	queryText      bool
	sessionID      bool
	holdProfile    *HoldProfile
	clientPacket   int64                // -1: not set by an option
	serverAddr     []attribute.KeyValue // server.address, server.port on hold spans; nil: unknown
	holdSampling   *SpanSampling        // nil: a span for every hold
	noStmtSpans    bool
}

// DefaultMaxTags is the default cap on distinct tags in metrics.
const DefaultMaxTags = 200

// OverflowTag is the metrics tag of statements and holds whose tag arrived
// after the cap on distinct tags was reached.
const OverflowTag = "other"

func newConfig(opts []Option) config {
	c := config{
		metrics:    true,
		defaultTag: DefaultTag,
		format:     FormatConnTag,
		maxTags:    DefaultMaxTags,
		dbSystem:   "mysql",
		poolName:   "default",

		clientPacket: -1,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	return c
}

// WithMeterProvider sets the OpenTelemetry MeterProvider the metrics are
// recorded through. Default: the global one (otel.GetMeterProvider), which
// records nothing until the application installs a provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithTracerProvider turns spans on: one per statement and one per hold,
// carrying conn_tag, db.system.name, the operation name and the hold split.
// Default: no spans, at no cost. WithoutStatementSpans keeps only the hold
// spans, WithHoldSpanSampling only those of the holds it chooses; neither
// changes the metrics.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithoutMetrics turns all measurement off: statements are only tagged. The
// wrapper then adds nothing but the comment to a statement.
func WithoutMetrics() Option {
	return func(c *config) { c.metrics = false }
}

// WithHistograms adds the semantic-convention histograms
// db.client.connection.use_time (one measurement per hold) and
// db.client.operation.duration (one per statement). Off by default: through
// the OpenTelemetry SDK each measurement costs more than everything else
// conntag does for a statement (see BenchmarkStatement), while the default
// counters already give occupancy, average hold and the active/idle split.
func WithHistograms() Option {
	return func(c *config) { c.histograms = true }
}

// WithDefaultTag sets the tag of statements whose context carries none.
// Default "untagged".
func WithDefaultTag(tag string) Option {
	return func(c *config) { c.defaultTag = SanitizeTag(tag) }
}

// WithFormat chooses how the tag is written into statement text.
// Default FormatConnTag.
func WithFormat(f Format) Option {
	return func(c *config) { c.format = f }
}

// WithStaticAttributes adds fixed key/values (service, route, ...) to every
// statement's comment, in both formats. Keys and values are sanitised like
// tags. Keep them low-cardinality: every distinct statement text is a
// separate entry in ProxySQL's digest table and in statement caches.
func WithStaticAttributes(kv map[string]string) Option {
	return func(c *config) {
		c.static = make(map[string]string, len(kv))
		for k, v := range kv {
			c.static[k] = v
		}
	}
}

// WithMaxTags caps the number of distinct tags in metrics (default 200).
// Tags beyond the cap are counted as "other", so a bug in a caller cannot
// explode metric cardinality. Statement text keeps the real tag.
func WithMaxTags(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxTags = n
		}
	}
}

// WithDBSystem sets db.system.name ("mysql" by default; "mariadb" for
// MariaDB servers).
func WithDBSystem(name string) Option {
	return func(c *config) { c.dbSystem = name }
}

// WithPoolName sets db.client.connection.pool.name, which tells the pools of
// one process apart. Default "default". Never put credentials in it.
func WithPoolName(name string) Option {
	return func(c *config) { c.poolName = name }
}

// WithQueryText puts the statement text (with its tag comment) on statement
// spans as db.query.text. Off by default: statement text can carry values.
func WithQueryText() Option {
	return func(c *config) { c.queryText = true }
}

// WithSessionID runs the exact statement "SELECT CONNECTION_ID()" once on
// every new connection and puts the answer on that connection's hold spans
// as holdtime.session_id. Behind ProxySQL, which answers that exact text
// itself, it is the ProxySQL SessionID (thread_id in its events log), so the
// collector can join app-side holds to proxy sessions exactly; connected
// directly, it is the server's processlist ID. It costs one round trip per
// new connection and only matters with WithTracerProvider.
func WithSessionID() Option {
	return func(c *config) { c.sessionID = true }
}

// LongHold describes a hold that passed the long-hold threshold.
type LongHold struct {
	Tag      string
	Held     time.Duration // how long the connection has been held so far
	Acquirer string        // the goroutine stack that borrowed the connection
}

// WithLongHoldThreshold reports every hold that lasts longer than d: it is
// counted per tag (holdtime.connection.long_holds) and fn, when not nil, is
// called once per such hold, while the hold is still open, with the stack of
// the code that borrowed the connection. The stack is captured at every
// borrow only while this option is on.
func WithLongHoldThreshold(d time.Duration, fn func(LongHold)) Option {
	return func(c *config) {
		c.longHold = d
		c.onLongHold = fn
	}
}

// WithMaxAllowedPacket tells conntag the driver's packet limit in bytes
// (go-sql-driver/mysql's Config.MaxAllowedPacket; 0: the server's), for a
// pool opened with OpenDB on a connector whose limit is not the driver's
// default. A statement the tag would take over the driver's or the server's
// limit is sent untagged and counted (holdtime.client.untagged_oversize),
// rather than refused. Open reads the limit from the DSN.
func WithMaxAllowedPacket(n int) Option {
	return func(c *config) {
		if n >= 0 {
			c.clientPacket = int64(n)
		}
	}
}
