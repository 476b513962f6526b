// Package collector reads what ProxySQL records and attributes backend
// connection hold time to tags: the business processes that conntag writes
// into every statement as /* conn_tag:NAME */.
//
// One implementation serves two front ends: `holdtime analyze` reads files
// after the fact, and the collector daemon feeds the same types live.
//
//   - Tags are read from statement text by conntag.ParseTag, the one
//     parser of the tag grammar (ParseTag and AppendTag here are the same
//     functions).
//   - Client reads a running collector's /api/v1/top.
//   - EventsReader, Attributor, ProcesslistReader, ProcesslistWriter and
//     SampleAttributor read ProxySQL's events log and processlist samples
//     and attribute their holds to tags (internal/attrib documents how);
//     Analyze, Aggregator and Report sum and render them
//     (internal/analyze). They are re-exported here.
//
// Times are Unix microseconds, as in the events log.
//
// # The collector daemon
//
// New(Config) returns a Collector; Run(ctx) polls its sources until ctx
// ends; TopReport(TopQuery) ranks tags by occupancy (Top(window) is the
// default ranking); Sources() says how each source is; Handler serves
// /metrics, /api/v1/top, /healthz, /readyz and (OTLP on) /v1/traces.
// `holdtime collect` is a thin front end; `holdtime top` and the demo can
// use the same API in-process. /api/v1/top answers a whole JSON document
// or a JSON error ({"error": "..."}, 400 or 500), never a partial 200. Its
// sources say why one is down (last_error) and what kind of failure that
// is (failure: connection_refused, timeout, access_denied,
// unknown_database, ...; see FailureOf), so a front end can tell what to
// fix and whether waiting helps. No counter ever goes backwards or becomes
// NaN: a figure that would is dropped and counted in
// holdtime_collector_malformed_rows_total.
//
// # Layers
//
// A connection is held at three places, each a different scarce resource,
// and a tag has one figure per layer:
//
//   - app: a client pool connection borrowed from database/sql (conntag's
//     hold spans over OTLP; source otlp);
//   - proxy: a ProxySQL backend connection bound to a client session
//     (proxysql_events, proxysql_processlist; proxysql_digest is a
//     cross-check);
//   - server: a MySQL server connection busy in a statement or an open
//     transaction (source mysql).
//
// Within a layer one source per target is the headline, fixed by the
// configuration so that counters never switch sources between polls, by
// the precedence "exact before sampled, sampled before inferred": proxy:
// proxysql_events when the target has an events log, else
// proxysql_processlist (the digest source is never a headline); server:
// mysql; app: otlp. Sources of one layer see the same hold and are never
// added up; targets of one layer are (two ProxySQL instances are two
// pools). A figure never travels between layers: a divergence is
// information. app much higher than server: the app holds connections idle
// outside a transaction (a slow call while holding one), which costs app
// pool slots, not the database. server with no app figure: another client,
// or an app without conntag. unknown is hold whose owner could not be
// known (a transaction whose statements were not seen); untagged is hold
// of statements seen without a conn_tag.
//
// GET /api/v1/top?window=10s|1m|5m&layer=app|proxy|server|max&sort=KEY
// &filter=SUBSTRING&source=SOURCE&limit=N answers TopResponse: each row
// (TopRow) has the figures of its ranking layer at the top level (layer
// max, the default: the tag's largest occupancy, so a hog is first wherever
// it holds), every layer's figures under "layers" (an absent layer is an
// absent key, never zeros) and every source's under "sources"; the
// response carries the span the figures cover (covered_seconds, per layer
// in "layers"), each layer's headline per target, and every source's
// health: state up, degraded (answers, some figures incomplete: reason,
// detail, fix), down (its polls fail) or waiting (before its first poll;
// the OTLP receiver before the first export, or PushIdle after the last).
// Occupancy and statements per second divide by the same covered span. A
// bad parameter is a 400 with a JSON body naming the valid values.
//
// Sources, each optional, each on its own interval, each marked down on
// failure (its gauges disappear: stale, never zero) and retried with
// exponential backoff (100 ms doubling to Config.MaxBackoff, jittered):
//
//   - ProxySQL admin (Config.ProxySQL, one per instance, the `target`
//     label): stats_mysql_processlist sampled every 250 ms by default. Each
//     row holding a backend (srv_host set) is credited with the time to the
//     next sample by the collector's own clock (never time_ms, which lags),
//     under the tag of its running statement, else the events log's (by
//     thread_id = SessionID), else the tag the session last showed while it
//     kept its backend and began no new transaction (SampleAttributor), else
//     an app hold span's (holdtime.session_id) whose start and end, give or
//     take one sample gap, enclose that run of samples: a pooled session
//     serves many borrows and tags. Sampled hold a session could not tag
//     waits ProxySQLConfig.TagGrace for one of those and is then reported as
//     UnknownTag, never dropped. Pins: a session idle
//     with a backend counts as pinned under one reason from extended_info
//     (mysql-show_processlist_extended): transaction, lock_tables, get_lock,
//     temporary_table, user_variable, prepared_statement,
//     auto_increment_delay, savepoint, found_rows, no_multiplex,
//     multiplexing_disabled, none_shown; "unknown" without extended info.
//     One query per sample.
//   - stats_mysql_query_digest every 10 s: per-tag statements and statement
//     time from deltas between polls. The first poll is a baseline; a
//     digest whose count fell or whose first_seen changed was reset and
//     counts whole. The tag comes from digest_text, which keeps comments
//     only with mysql-query_digests_keep_comment=true (read every poll); when
//     comments are stripped every digest figure goes to "unknown", since
//     claiming "untagged" would be false. Digests are a cross-check: BEGIN
//     and COMMIT (sent untagged by drivers) land in "untagged", and ProxySQL
//     2.7 rarely files a statement under another tag. Two queries per poll.
//   - stats_mysql_connection_pool and stats_mysql_global every 5 s (source
//     "proxysql_pool" in holdtime_source_up). Two queries per poll.
//   - The JSON events log (ProxySQLConfig.EventsLog), tailed from its end:
//     exact holds per tag through the Attributor, source "proxysql_events",
//     the headline figure when present. It follows ProxySQL's numbered
//     files, rename rotation and truncation (a truncation that is refilled
//     beyond the read offset between two checks is not seen). A followed
//     file that is removed marks the source down, saying so, until a file
//     is back at the path (read from its start); an older rotated file is
//     never read again. Lines are checked as EventsReader checks them, the
//     log's clock starting at the collector's; skipped lines are counted,
//     and one a minute is logged with its reason.
//   - MySQL/MariaDB (Config.MySQL): every second, three queries:
//     PROCESSLIST joined to INNODB_TRX; performance_schema statements (the
//     running ones from events_statements_current, with the time they ran
//     so far, and those completed since the last read from
//     events_statements_history_long, by TIMER_END); and lock waits
//     (MariaDB: information_schema.INNODB_LOCK_WAITS; MySQL 8.0:
//     performance_schema.data_lock_waits, chosen by VERSION()). Once per
//     connection and every 30 s it reads VERSION(), Uptime,
//     @@performance_schema and setup_consumers. See "The MySQL source".
//   - OTLP/HTTP (Config.OTLP): conntag's db.connection.hold spans (hold,
//     active, idle per tag, app side) and statement spans (statements,
//     errors), protobuf or JSON, plain or gzip (other Content-Encodings
//     get 415), source "otlp", target OTLPConfig.Target. A span is checked
//     whole before any of it counts: active and idle seconds finite, not
//     negative, at most 7 days (active above the hold is capped at it),
//     times ordered and at most 7 days apart, a session id a non-negative
//     integer. A span that fails is rejected (partial success), counted as
//     malformed, and leaves no series behind.
//     A hold span's session id (holdtime.session_id) is read by one target
//     only: the one whose address the span names in server.address and
//     server.port (ProxySQLConfig.ClientAddress; a MySQL target's DSN
//     address when the app connects directly). ProxySQL session ids are
//     small per-instance integers, so in a fleet a span offered to every
//     instance named a same-numbered session of another. A span naming no
//     address goes to the collector's only ProxySQL or MySQL target, if it
//     has exactly one; otherwise, like a span naming an address no target
//     has, its hint goes nowhere and is counted in
//     holdtime_collector_spans_unrouted_total (its app-layer figures still
//     count). conntag.Open puts the DSN's address on its hold spans,
//     conntag.OpenDB takes it with conntag.WithServerAddress.
//     A push source: waiting until the first export, up while exports
//     arrive (each advances its last success), waiting again PushIdle after
//     the last one (an idle app sends nothing; waiting is never stale).
//
// # The MySQL source
//
// A session holds its server connection while a statement runs or a
// transaction is open. An open transaction holds from its BEGIN (the
// server's timer, mapped to the collector's clock by the poll's own running
// statement) to the end of its COMMIT, sampled between polls (idle or
// active as the poll saw it), to the tag of its statements; without
// performance_schema, from the first to the last poll that lists it. A
// statement outside a transaction holds while it runs: each poll credits
// the time it ran since the last, and its completion the rest of its exact
// TIMER_WAIT, never twice; one that started and ended between two polls is
// credited its TIMER_WAIT. A session gone between two polls earns nothing
// after the last poll that listed it; a server restart (Uptime says it
// started after the last poll, or performance_schema's timer went back)
// forgets every session.
//
// events_statements_history_long keeps the rows of threads that ended, so
// a client that disconnects right after its statement is counted.
// Statements are counted exactly as long as that ring (10,000 rows by
// default) does not wrap between two polls (tested: 10,000 statements at
// 11,000 per second, 200 ms polls, every one counted); when it wraps, the
// count is labelled a lower bound (statements_lower_bound in the API).
// Statements the driver sends by itself (SET TRANSACTION, SET NAMES, SET
// autocommit, BEGIN/COMMIT, conntag's SELECT CONNECTION_ID()) name no tag
// and are not counted. MariaDB records no text for the execution of a
// server-side prepared statement (what go-sql-driver sends for a statement
// with arguments unless interpolateParams=true): such a statement takes its
// tag from the processlist while a poll sees it running, else from its
// transaction's other statements or its session's last one, else it counts
// as unknown. interpolateParams=true (one round trip instead of three) gives
// the server every statement's text. Every query the source sends starts with
// CollectorMarker (/* holdtime:collector */): a session running one is
// never held and such statements are never counted, so collectors and
// `holdtime top --mysql` polling one server do not count each other.
//
// The source is degraded, with the reason and the fix in /api/v1/top,
// holdtime_source_degraded and the log, when performance_schema is off
// (MariaDB's default), the account cannot read it, or its statement
// consumers are off. Without history_long (MySQL's default) it reads
// events_statements_history, the last 10 statements per session: a
// sample. The fix: UPDATE performance_schema.setup_consumers SET ENABLED =
// 'YES' WHERE NAME IN ('events_statements_history_long'), and
// performance-schema-consumer-events-statements-history-long=ON under
// [mysqld] to keep it after a restart; the source reads the setup again
// every 30 s. Beside ProxySQL targets the source also reads the
// performance_schema evidence of the backends they show held, for the
// proxy↔server join; a failed read of it degrades the source
// (server_join_read_failed, with the error) and leaves the server's
// figures alone.
//
// A join-only target (MySQLConfig.JoinOnly) reads the server only for the
// join: the connection list and that evidence, no figures of its own (no
// server layer, gauges, locks or per-tag series; its status says
// join_only). Several collectors sharing one server, each with its own
// ProxySQLs, each get the exact join from a join-only target while one
// collector with a full target exports the server's figures, so sums
// across collectors count nothing twice.
//
// Polls must be at least MinServerInterval apart: InnoDB freezes
// INNODB_TRX when read more often than every 100 ms, and MariaDB may list
// a just-committed transaction for up to 100 ms (a session idle since its
// COMMIT is not counted as holding).
//
// Memory: per (target, source) at most Config.MaxTags tags (further ones go
// to OverflowTag, counted once per observation: span, hold, sampled row),
// about 3 KiB each for the 10 s/1 m/5 m windows; a tag unseen for longer
// than the longest window (5 m) frees its slot and its series leave
// /metrics, so only tags that do not fit now overflow. Session state
// follows live sessions. The events log and processlist attribution keep at
// most 10,000 distinct tag strings, each freed after 5 m unused; in the
// events log, further tags go to OverflowTag, counted in the overflow total.
//
// # Metrics
//
// Labels: target (the configured instance name), layer (app, proxy,
// server), source (proxysql_processlist, proxysql_events, proxysql_digest,
// mysql, otlp; proxysql_pool for source health only), conn_tag.
//
//   - holdtime_collector_layer_hold_seconds_total{target,layer,conn_tag}:
//     connection hold at a layer, from the (target, layer)'s headline
//     source; rate() is occupancy. Sum over target, never over layer.
//   - holdtime_collector_layer_idle_hold_seconds_total,
//     holdtime_collector_layer_active_seconds_total,
//     holdtime_collector_layer_statements_total,
//     holdtime_collector_layer_statement_errors_total{target,layer,conn_tag};
//     holdtime_collector_layer_sessions{target,layer,conn_tag} (sessions
//     holding a connection now: proxy from stats_mysql_processlist, server
//     from the processlist).
//   - holdtime_collector_layer_source{target,layer,source} 1: each
//     headline.
//   - Per source, for cross-checks (one hold is seen by several sources of
//     a layer: never sum these over source):
//     holdtime_collector_hold_seconds_total{target,source,conn_tag},
//     holdtime_collector_idle_hold_seconds_total,
//     holdtime_collector_active_seconds_total (digest: sum_time),
//     holdtime_collector_statements_total,
//     holdtime_collector_statement_errors_total,
//     holdtime_collector_sessions{target,source,conn_tag}.
//   - holdtime_collector_pinned_sessions{target,conn_tag,reason},
//     holdtime_collector_pinned_seconds_total{target,conn_tag,reason}.
//   - holdtime_proxysql_pool_connections{target,hostgroup,server,state}
//     (state=used|free), holdtime_proxysql_pool_connection_errors_total,
//     holdtime_proxysql_pool_queries_total (ProxySQL's own counters),
//     holdtime_proxysql_pool_latency_seconds{target,hostgroup,server}.
//   - holdtime_proxysql_client_connections{target},
//     holdtime_proxysql_active_transactions{target},
//     holdtime_proxysql_connpool_get_failures_total{target} from
//     stats_mysql_global: pool saturation seen from the client side.
//   - holdtime_proxysql_waiting_sessions{target}: sessions waiting for a
//     backend now (their wait is credited per tag in
//     holdtime_collector_wait_seconds_total once a tag names them).
//   - holdtime_mysql_threads_running, holdtime_mysql_threads_connected,
//     holdtime_mysql_max_connections, holdtime_mysql_thread_queue{queue},
//     holdtime_mysql_thread_queue_oldest_seconds,
//     holdtime_mysql_lock_output_enabled (every {target}; source
//     mysql_locks), beside holdtime_mysql_locks and
//     holdtime_mysql_deadlocks_total per tag.
//   - Like every gauge, the families above are absent while their source
//     is down (holdtime_source_up 0): unknown, never their last value.
//   - holdtime_mysql_transactions{target,conn_tag},
//     holdtime_mysql_transaction_max_age_seconds{target,conn_tag},
//     holdtime_mysql_rows_locked{target,conn_tag},
//     holdtime_mysql_lock_waits{target,waiter_tag,blocker_tag}.
//   - holdtime_source_up{target,source} (1 up or degraded, 0 down or
//     waiting), holdtime_source_state{target,source,state} (1 for the
//     current of up, degraded, down, waiting),
//     holdtime_source_degraded{target,source,reason},
//     holdtime_source_last_success_timestamp_seconds{target,source},
//     holdtime_collector_tags_overflow_total{target,source},
//     holdtime_collector_malformed_rows_total{target,source}.
//   - holdtime_collector_poll_duration_seconds{target,source},
//     holdtime_collector_poll_lag_seconds{target,source},
//     holdtime_collector_polls_late_total{target,source,cause}: the
//     runner's own timing; cause=overran when the previous poll was still
//     waiting on a slow source, delayed when the collector started the
//     poll late (a busy collector or machine).
//   - holdtime_collector_otlp_metric_series{target} (with
//     OTLPConfig.Metrics): the counter series the /v1/metrics receiver
//     remembers, at most 100,000, forgotten after 10 minutes unseen.
//
// DSNs and passwords never appear in errors, logs, metrics or the API.
package collector
