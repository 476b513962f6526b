// Package conntag wraps a database/sql driver so that every statement
// carries the business process that issued it, and measures per process how
// long connections are held, actively used and idly held.
//
// # Adoption
//
// One line: conntag.Open instead of sql.Open (or conntag.OpenDB instead of
// sql.OpenDB). The result is a plain *sql.DB for your own code, sqlx, gorm,
// ent or sqlc output:
//
//	db, err := conntag.Open("mysql", dsn)
//	...
//	ctx = conntag.WithTag(ctx, "checkout_completion")
//	db.QueryContext(ctx, "SELECT ...") // sent as SELECT ... /* conn_tag:checkout_completion */
//
// A context without a tag uses the default tag, "untagged" (WithDefaultTag).
// Tags are sanitised once, in WithTag: [A-Za-z0-9_.:-], at most 64 bytes;
// anything else becomes '_', so no tag can end the comment early or carry the
// '@' that makes ProxySQL disable multiplexing.
//
// # Statement text
//
// The tag goes at the end of the statement: " /* conn_tag:NAME */" after its
// last token, before a final ';', on a new line when the statement ends in a
// -- or # comment. Never in front, so the tag can never change what ProxySQL
// does: ProxySQL decides how to treat a statement partly from how its text
// begins, and with mysql-query_digests_keep_comment=true a leading comment
// hides that. Measured against ProxySQL 2.7.1 (TestProxySQLSeesTagsAsUntagged):
// with a leading tag, CREATE TEMPORARY TABLE no longer kept the session on
// its backend, so the next statement could reach another backend without the
// table; with the tag at the end, every multiplexing-disabling statement
// tried (SET @x, SET SESSION, GET_LOCK, temporary tables, LAST_INSERT_ID(),
// FOUND_ROWS(), SET autocommit=0, BEGIN) pins or releases the backend
// exactly as its untagged text does, with keep_comment on and off. A leading
// ProxySQL annotation (/* hostgroup=2 */, read from the first comment only)
// stays first and untouched. A statement that already has a conn_tag comment
// is left alone, and so is text that ends inside a string or an unterminated
// comment (invalid; the server must see it as written).
//
// A tag at the end is cut off where a layer truncates statement text:
// performance_schema keeps the first performance_schema_max_sql_text_length
// bytes (1024 by default), ProxySQL's digest text the first
// mysql-query_digests_max_digest_length (2048). Statements longer than that
// show as untagged in those sources; the collector's other sources, and
// conntag's own metrics, still have them. Older conntag versions put the tag
// in front; the collector reads both forms.
//
// WithFormat(FormatSQLCommenter) appends the sqlcommenter form instead, and,
// as that specification requires, leaves a statement that already contains
// a comment untouched; WithStaticAttributes adds fixed key/values.
//
// Prepared statements carry the tag of the context that prepared them: the
// text is fixed at prepare time. A *sql.Stmt prepared on a *sql.DB is
// prepared again on each connection it runs on, by database/sql, with the
// context of the execution that needed it there, so its text carries that
// context's tag on that connection. Each execution is measured under the tag
// of its own context either way. BEGIN and COMMIT are sent by the driver itself and
// carry no comment; conntag counts them for the transaction's tag, and
// holdtime's collector attributes them to the transaction they belong to.
// Nothing high-cardinality (trace ids, user ids) is put into statement text:
// every distinct text is a separate entry in ProxySQL's digest table and in
// statement caches.
//
// # The driver, unchanged
//
// conntag's connection implements exactly the optional driver interfaces
// the driver's connection implements (PrepareContext, BeginTx, the context
// and the legacy Execer and Queryer, Pinger, NamedValueChecker), so
// database/sql takes the same path with and without conntag, and code that
// reaches the connection through (*sql.Conn).Raw finds the same methods.
// Results, rows and errors come back as the driver made them (a
// go-sql-driver/mysql Exec still returns a mysql.Result). Two interfaces are
// always there: SessionResetter and Validator, how conntag sees a borrow
// and a return; for a driver without them they answer as database/sql
// assumes. For the driver's own connection type, use Unwrap inside Raw.
// A driver's driver.ErrSkip (go-sql-driver/mysql's answer to arguments
// without interpolateParams, or to one value it cannot interpolate) counts
// for that statement only. go-sql-driver/mysql's own test suite runs
// through conntag in holdtime's make test, against a real server: every
// test that passes as-is passes through conntag, except two that assert the
// driver's own connection type through Raw, and the server's general log
// shows nothing prepared through conntag that the driver sent as a plain
// query.
//
// (*sql.DB).Driver returns conntag's driver, which has DriverContext when
// the driver has it; connections opened through it are tagged and measured
// with the pool's options.
//
// A tag adds about 30 bytes to a statement. A statement that would fit the
// driver's packet limit (maxAllowedPacket in the DSN; WithMaxAllowedPacket
// for OpenDB) and the server's max_allowed_packet (asked once per pool, by
// SHOW VARIABLES, at the first statement over 1 KiB) only without its tag
// is sent untagged and counted (holdtime.client.untagged_oversize), not
// refused.
//
// Statements that database/sql sends without a context (a driver without the
// context interfaces, or legacy methods called through Raw) carry the tag
// of the hold they run in.
//
// # What is measured, and what is not
//
// database/sql tells a driver when a pooled connection is borrowed again
// (SessionResetter.ResetSession, with the borrower's context) and when it is
// returned (Validator.IsValid). conntag measures from those calls:
//
//   - hold: borrow to return, attributed to the borrower's tag;
//   - active: the part of a hold inside driver calls (statements including
//     reading their rows, begin, commit, prepare, ping);
//   - idle hold: hold minus active, a borrowed connection doing nothing;
//   - statements and failed statements per tag and operation, attributed to
//     each statement's own context.
//
// A connection the pool opened in the background, or returned without
// asking for a reset, is handed out without a call to the driver; its hold
// then starts at its first driver call, and a hold whose borrower had no tag
// takes the tag of its first statement.
//
// Wait time (asking the pool to getting a connection) happens inside
// database/sql before any driver code runs, so no driver wrapper can see it
// per request or per tag. conntag exports the pool's own figures from
// DB.Stats instead: holdtime.pool.waits and holdtime.pool.wait_time (totals),
// and connections by state. The number of callers waiting right now is not
// exposed by database/sql at all. To see which tags suffer from waits, watch
// occupancy: the tags that hold connections longest are the ones others
// wait for.
//
// # Metrics
//
// Through the OpenTelemetry MeterProvider of WithMeterProvider (default: the
// global one). Every per-tag series carries conn_tag. Prometheus names, as
// the OpenTelemetry Prometheus exporter writes them, in brackets:
//
//   - holdtime.connection.hold_time (holdtime_connection_hold_time_seconds_total):
//     hold seconds, including holds in progress. rate() of it is occupancy,
//     the connections a tag keeps busy: the headline number.
//   - holdtime.connection.active_time, holdtime.connection.idle_time
//     (…_seconds_total): the split of the hold.
//   - holdtime.connection.holds (holdtime_connection_holds_total): completed holds.
//   - holdtime.connection.long_holds (holdtime_connection_long_holds_total):
//     holds past WithLongHoldThreshold.
//   - holdtime.client.operations, holdtime.client.operation_time: statements
//     and their seconds by conn_tag, db.operation.name and error.type.
//   - db.client.connection.count (state=idle|used; used also per conn_tag),
//     db.client.connection.max, db.client.connection.create_time,
//     holdtime.pool.waits, holdtime.pool.wait_time: the pool.
//   - With WithHistograms: db.client.connection.use_time (per hold) and
//     db.client.operation.duration (per statement), the semantic-convention
//     histograms. They are opt-in because each measurement through the SDK
//     costs more than everything else conntag does for a statement; the
//     counters above already give occupancy, average hold and the split.
//
// Counters are kept in atomics and read when metrics are collected; a
// statement costs two clock reads and a few atomic adds (a hold two more
// reads). A connection remembers the tagged text of its last four
// statements of up to 4 KiB, so a repeated statement is neither scanned nor allocated
// again, and it reuses its result-set wrapper: on the stub driver a
// statement through database/sql gains no allocation (BenchmarkStatementInterleaved).
// The clock is the runtime's monotonic clock (BenchmarkClock: 35–60 ns a
// read on this project's 2-core VMs, whose clocksource is tsc); a private
// TSC clock would save part of that but lose the kernel's guard against an
// unstable TSC, so conntag does not use one. Nothing is registered anywhere
// the caller did not pass.
//
// # Spans
//
// WithTracerProvider turns on one span per statement (named by operation)
// and one per hold ("db.connection.hold", with holdtime.hold.active_seconds,
// holdtime.hold.idle_seconds, holdtime.hold.statements, server.address and
// server.port and, with WithSessionID, holdtime.session_id), for holdtime's
// collector or any OpenTelemetry backend. A hold span is made when the hold
// ends, when its length is known, as a child of the span the borrower was
// in, with the hold's start and end times.
//
// The app's per-tag figures (hold, active and idle seconds, holds,
// connections held now) come from the counters above, which count every
// hold whatever the spans do: their cost grows with tags, not with holds. A
// hold span buys one thing the counters cannot give: behind ProxySQL,
// holdtime.session_id names the ProxySQL session the hold went through, so
// the collector joins that hold to the session's backend exactly (the
// proxy-layer join, per hold). What each setting costs per hold on the stub
// driver, metrics on, one statement per hold, against spans off in the same
// run (BenchmarkHoldSpans, 6 runs: an SDK TracerProvider whose batching
// exporter drops the spans; 2 cores under a load average of 9 to 16, so
// read the ratios, not the microseconds):
//
//   - no TracerProvider (the default): no span, nothing added; app figures
//     from the counters; the collector joins ProxySQL sessions from
//     ProxySQL's own tables only.
//   - WithTracerProvider: a span per statement and per hold, 15 to 25
//     times spans off (12 to 21 µs and 22 allocations added): a trace of
//     every statement, and every hold joined.
//   - WithTracerProvider and WithoutStatementSpans: hold spans only, 9 to
//     13 times (6 to 11 µs, 12 allocations): every hold joined, no
//     statement traces.
//   - and WithHoldSpanSampling(SpanSampling{MinHold, MinIdle, Rate}): spans
//     only for holds longer than MinHold or idle longer than MinIdle, which
//     are the holds worth naming at the proxy (they keep a ProxySQL backend
//     or a transaction open), and a Rate of the rest. A hold without a span
//     costs a comparison and, with a rate, one random draw (no allocation);
//     with MinHold 1 ms and Rate 0.01 on short holds, 1.1 to 1.6 times spans
//     off (130 to 420 ns, no allocation on average). Statement spans on
//     top of it still cost 6 to 12 times. Every rule-chosen hold is joined; other holds are joined in the
//     Rate share. Rate-chosen spans carry holdtime.hold.sample_weight =
//     1/Rate (rule-chosen ones 1), so totals summed from spans can be
//     weighted back; the counters need no weighting.
//
// # App figures from counters: what a collector reads
//
// A collector computes each tag's app-layer hold, active and idle from the
// counters alone, received as OTLP metrics (an OTLP metric exporter on the
// MeterProvider given to WithMeterProvider, sending to the collector's
// /v1/metrics; cumulative temporality, the SDK's default) or scraped from
// the app's Prometheus endpoint. Per conn_tag, db.client.connection.pool.name
// and db.system.name, in OTLP name (Prometheus name):
//
//   - holdtime.connection.hold_time (holdtime_connection_hold_time_seconds_total):
//     cumulative hold seconds, holds in progress included up to the
//     collection; its rate is the tag's occupancy.
//   - holdtime.connection.active_time, holdtime.connection.idle_time
//     (holdtime_connection_active_time_seconds_total,
//     holdtime_connection_idle_time_seconds_total): the split; active + idle
//     = hold at every collection.
//   - holdtime.connection.holds (holdtime_connection_holds_total): completed
//     holds; hold_time's rate over its rate is the average hold.
//   - db.client.connection.count with db.client.connection.state=used
//     (db_client_connection_count{db_client_connection_state="used"}): the
//     connections the tag holds now.
//
// Each series only grows while the process lives (a restart starts it from
// 0 with a new start time, which OTLP carries and Prometheus's rate
// handles). App instances are told apart by the MeterProvider's resource
// (service.instance.id) or the scrape's instance label.
//
// # Long holds
//
// WithLongHoldThreshold reports a hold once it passes a threshold, while it
// is still open, with its tag, its age and the stack of the code that
// borrowed the connection (captured at every borrow only while the option is
// on), and counts it per tag: HikariCP's leak detection, per tag.
//
// # Hold profiles: which line holds the connections
//
// A tag says which business process holds connections; a hold profile says
// which line of code. WithHoldProfile(NewHoldProfile(0)) records the
// borrower's stack at one borrow in DefaultHoldProfileRate and weights it,
// when the hold ends, by the hold's seconds (times the rate, so totals are
// unbiased). It is a pprof profile with three sample types, held (default),
// idle_held and holds, and the labels conn_tag and pool; mount the
// HoldProfile (an http.Handler) next to net/http/pprof. From "tag X holds
// 3.9 connections" to the line, three commands:
//
//	holdtime top --collector http://collector:9479          # checkout_tax_quote first: 3.9 connections held
//	go tool pprof -tagfocus=conn_tag=checkout_tax_quote -top \
//	    'http://app/debug/holdtime/profile?seconds=30'      # the function that borrowed them
//	go tool pprof -tagfocus=conn_tag=checkout_tax_quote -sample_index=idle_held \
//	    -list 'checkoutTax' 'http://app/debug/holdtime/profile?seconds=30'  # the line, with seconds
//
// (-http=: instead of -top shows it as a flame graph; -diff_base compares two
// profiles.) The leaf frame is the borrower's line: the BeginTx, Conn or
// QueryContext call whose connection was kept, or the sqlx, gorm, ent or
// sqlc call that made it (those libraries' frames are trimmed from the leaf;
// WithLibraryFrames). The label released_at is the line that gave the
// connection back, so the code between the two lines is what held it; the
// slow call made while holding is there. Holds still open and older than a
// threshold (1 s, WithOpenHoldsAfter) are in it as held_open, so a stuck
// transaction shows while it is stuck; time spent opening a new connection
// for the borrower is its own sample type, dial, outside held. The HoldProfile
// documentation says what each total means. Off by default, and then it
// costs nothing: no stack is taken and nothing is added to a statement. At
// the default rate it added 40–100 ns per hold on average, a sampled borrow
// 2–4 µs (BenchmarkStatementInterleaved).
//
// # Cardinality
//
// At most WithMaxTags distinct tags (default 200) get their own series;
// later ones are counted as "other", so a caller that puts an id into a tag
// cannot explode metric cardinality. Statement text keeps the real tag.
package conntag
