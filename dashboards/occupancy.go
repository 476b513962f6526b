package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// App-side (conntag) metric names, as the OpenTelemetry Prometheus exporter
// writes them.
const (
	appHold      = "holdtime_connection_hold_time_seconds_total"
	appIdle      = "holdtime_connection_idle_time_seconds_total"
	appActive    = "holdtime_connection_active_time_seconds_total"
	appHolds     = "holdtime_connection_holds_total"
	appLongHolds = "holdtime_connection_long_holds_total"
	appOps       = "holdtime_client_operations_total"
	appConnCount = "db_client_connection_count"
	appConnMax   = "db_client_connection_max"
	appWaits     = "holdtime_pool_waits_total"
	appWaitTime  = "holdtime_pool_wait_time_seconds_total"
)

// Collector metric names (collector/metrics.go).
const (
	colHold     = "holdtime_collector_hold_seconds_total"
	colIdle     = "holdtime_collector_idle_hold_seconds_total"
	colActive   = "holdtime_collector_active_seconds_total"
	colStmts    = "holdtime_collector_statements_total"
	colErrors   = "holdtime_collector_statement_errors_total"
	colSessions = "holdtime_collector_sessions"
	colUp       = "holdtime_source_up"
	colLastOK   = "holdtime_source_last_success_timestamp_seconds"
	colOverflow = "holdtime_collector_tags_overflow_total"
	colBadRows  = "holdtime_collector_malformed_rows_total"
)

// Thresholds of the idle-hold share: above half, a tag mostly keeps
// connections doing nothing; above 80 % it is the story's hog.
func idleShareThresholds() *dashboard.ThresholdsConfigBuilder {
	return thresholds(green, step{0.5, orange}, step{0.8, red})
}

// sourceHealth is the panel every collector dashboard ends with: a source
// that fails is down and its figures stale, never zero.
func sourceHealth(sourceMatcher string) []panel {
	return []panel{{
		title:       "Source up",
		description: "1 when the collector's last poll of the source succeeded. A source that is down keeps its counters but its gauges disappear: stale, never reported as zero.",
		unit:        unitCount,
		queries:     []q{{"min by (target, source) (" + colUp + sel(selTarget, sourceMatcher) + ")", "{{target}} {{source}}"}},
		thresholds:  thresholds(red, step{1, green}),
		width:       8,
	}, {
		title:       "Seconds since last successful poll",
		description: "How stale each source's figures are. More than a few poll intervals means the source is failing: see the collector's log.",
		unit:        unitSeconds,
		queries:     []q{{"time() - max by (target, source) (" + colLastOK + sel(selTarget, sourceMatcher) + ")", "{{target}} {{source}}"}},
		thresholds:  thresholds(green, step{30, orange}, step{120, red}),
		width:       8,
	}, {
		title:       "Tag overflow and malformed rows",
		description: "Observations whose tag went to conn_tag=\"overflow\" (the cap on distinct tags per source was reached: a tag carries an id?) and rows the collector could not parse.",
		unit:        unitPerSec,
		queries: []q{
			{"sum by (target, source) (" + rate(colOverflow, selTarget, sourceMatcher) + ")", "overflow {{target}} {{source}}"},
			{"sum by (target, source) (" + rate(colBadRows, selTarget, sourceMatcher) + ")", "malformed {{target}} {{source}}"},
		},
		thresholds: thresholds(green, step{0.001, orange}),
		width:      8,
	}}
}

func occupancy() *dashboard.DashboardBuilder {
	app := []string{selInstance, selTag}
	col := []string{selTarget, selSource, selTag}
	b := newDashboard("holdtime-occupancy", "holdtime: connection occupancy by tag",
		"Who is holding the database connections, and for how long. Occupancy = rate(hold seconds) = the connections a tag keeps busy.").
		WithVariable(labelVariable(varInstance, "instance", appHold, "The app instances instrumented with conntag.")).
		WithVariable(labelVariable(varTarget, "target", colHold, "The collector's targets (ProxySQL instances, MySQL servers, the app's OTLP spans).")).
		WithVariable(labelVariable(varSource, "source", colHold, "Where the collector measured the hold.")).
		WithVariable(labelVariable(varTag, "conn_tag", "{__name__=~\""+appHold+"|"+colHold+"\"}", "The business process (conn_tag)."))

	b = b.WithRow(row("Who holds the connections now"))
	b = b.WithPanel(barGauge(panel{
		title:       "Occupancy by tag, app (last 5m)",
		description: "Connections each tag keeps busy on average over the last 5 minutes, measured in the app by conntag from borrow to return. The top bar is your biggest holder.",
		unit:        unitConnBusy,
		queries:     []q{{"sort_desc(sum by (conn_tag) (rate(" + appHold + sel(app...) + "[5m])))", "{{conn_tag}}"}},
		thresholds:  thresholds(green, step{1, yellow}, step{4, red}),
	}))
	b = b.WithPanel(barGauge(panel{
		title:       "Occupancy by tag, backend (last 5m)",
		description: "Backend connections each tag keeps busy, as the collector measured them at ProxySQL or the MySQL server. Much lower than the app's figure: the app holds connections it does not use (idle hold) or ProxySQL multiplexes.",
		unit:        unitConnBusy,
		queries:     []q{{"sort_desc(sum by (conn_tag, source) (rate(" + colHold + sel(col...) + "[5m])))", "{{conn_tag}} ({{source}})"}},
		thresholds:  thresholds(green, step{1, yellow}, step{4, red}),
	}))

	b = b.WithRow(row("App side (conntag)"))
	for _, p := range []panel{{
		title:       "Occupancy by tag",
		description: "rate(hold seconds): connections kept busy per tag, borrow to return, holds in progress included. Stacked, the top of the stack is the pool's average use.",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag) (" + rate(appHold, app...) + ")", "{{conn_tag}}"}},
		stack:       true,
	}, {
		title:       "Idle hold by tag",
		description: "Connections borrowed and doing nothing (hold minus time inside statements): the waste holdtime exists to find. A slow downstream call made while holding a connection shows up here.",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag) (" + rate(appIdle, app...) + ")", "{{conn_tag}}"}},
		stack:       true,
	}, {
		title:          "Idle-hold share by tag",
		description:    "Idle hold / hold. Above 50 % a tag mostly keeps connections doing nothing; above 80 %, release the connection before the slow work.",
		unit:           unitPercent,
		queries:        []q{{"sum by (conn_tag) (" + rate(appIdle, app...) + ") / sum by (conn_tag) (" + rate(appHold, app...) + ")", "{{conn_tag}}"}},
		thresholds:     idleShareThresholds(),
		showThresholds: true,
		max:            1,
	}, {
		title:       "Average hold by tag",
		description: "Hold seconds per completed hold: how long one borrow of the tag lasts.",
		unit:        unitSeconds,
		queries:     []q{{"sum by (conn_tag) (" + rate(appHold, app...) + ") / sum by (conn_tag) (" + rate(appHolds, app...) + ")", "{{conn_tag}}"}},
		thresholds:  thresholds(green, step{0.1, orange}, step{1, red}),
	}, {
		title:       "Active time by tag",
		description: "rate(active seconds): connections kept busy inside statements (driver calls, rows read). What the database actually works for.",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag) (" + rate(appActive, app...) + ")", "{{conn_tag}}"}},
		stack:       true,
	}, {
		title:          "Long holds by tag",
		description:    "Holds past conntag's long-hold threshold (WithLongHoldThreshold), per minute; each is also logged with the stack that borrowed the connection.",
		unit:           unitPerMin,
		queries:        []q{{"60 * sum by (conn_tag) (" + rate(appLongHolds, app...) + ")", "{{conn_tag}}"}},
		thresholds:     thresholds(green, step{1, orange}, step{10, red}),
		showThresholds: true,
	}, {
		title:       "Statements by tag",
		description: "Statements per second per tag, BEGIN and COMMIT counted for the transaction's tag.",
		unit:        unitPerSec,
		queries:     []q{{"sum by (conn_tag) (" + rate(appOps, app...) + ")", "{{conn_tag}}"}},
	}, {
		title:       "Failed statements by tag",
		description: "Statements that returned an error, by tag and error type.",
		unit:        unitPerSec,
		queries:     []q{{"sum by (conn_tag, error_type) (" + rate(appOps, selInstance, selTag, `error_type!=""`) + ")", "{{conn_tag}} {{error_type}}"}},
		thresholds:  thresholds(green, step{0.1, red}),
	}} {
		b = b.WithPanel(timeSeries(p))
	}

	b = b.WithRow(row("App pool: saturation and waits"))
	for _, p := range []panel{{
		title:          "Pool in use",
		description:    "Connections in use / the pool's maximum (SetMaxOpenConns). Near 100 % callers start to wait: look at who holds them above.",
		unit:           unitPercent,
		queries:        []q{{"sum by (instance, db_client_connection_pool_name) (" + appConnCount + sel(selInstance, `db_client_connection_state="used"`) + ") / sum by (instance, db_client_connection_pool_name) (" + appConnMax + sel(selInstance) + " > 0)", "{{instance}} {{db_client_connection_pool_name}}"}},
		thresholds:     thresholds(green, step{0.7, orange}, step{0.9, red}),
		showThresholds: true,
		max:            1,
	}, {
		title:       "Connections by state",
		description: "Open connections in use and idle in the pool, and the pool's maximum.",
		unit:        unitCount,
		queries: []q{
			{"sum by (instance, db_client_connection_pool_name, db_client_connection_state) (" + appConnCount + sel(selInstance) + ")", "{{db_client_connection_state}} {{instance}} {{db_client_connection_pool_name}}"},
			{"sum by (instance, db_client_connection_pool_name) (" + appConnMax + sel(selInstance) + ")", "max {{instance}} {{db_client_connection_pool_name}}"},
		},
	}, {
		title:       "Callers waiting for a connection",
		description: "rate(wait seconds): callers waiting for a connection on average (database/sql's WaitDuration). Wait is not visible per tag: the tags holding longest are the ones others wait for.",
		unit:        unitCount,
		queries:     []q{{"sum by (instance, db_client_connection_pool_name) (" + rate(appWaitTime, selInstance) + ")", "{{instance}} {{db_client_connection_pool_name}}"}},
		thresholds:  thresholds(green, step{0.1, orange}, step{1, red}),
	}, {
		title:       "Average wait",
		description: "Seconds per wait: how long a caller that had to wait waited.",
		unit:        unitSeconds,
		queries:     []q{{"sum by (instance, db_client_connection_pool_name) (" + rate(appWaitTime, selInstance) + ") / sum by (instance, db_client_connection_pool_name) (" + rate(appWaits, selInstance) + ")", "{{instance}} {{db_client_connection_pool_name}}"}},
		thresholds:  thresholds(green, step{0.01, orange}, step{0.1, red}),
	}} {
		b = b.WithPanel(timeSeries(p))
	}

	b = b.WithRow(row("Backend side (collector)"))
	for _, p := range []panel{{
		title:       "Backend occupancy by tag and source",
		description: "rate(hold seconds) as the collector measured it: backend connections kept busy at ProxySQL, server connections at MySQL, pool hold from app spans (otlp).",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag, source) (" + rate(colHold, col...) + ")", "{{conn_tag}} ({{source}})"}},
	}, {
		title:       "App hold vs backend hold by tag",
		description: "The same tag measured in the app (conntag) and at the backend (ProxySQL or the MySQL server). A gap is time the app holds a connection the backend is not working for.",
		unit:        unitConnBusy,
		queries: []q{
			{"sum by (conn_tag) (" + rate(appHold, app...) + ")", "{{conn_tag}} app"},
			{"sum by (conn_tag) (" + rate(colHold, selTarget, `source=~"proxysql_.*|mysql"`, selTag) + ")", "{{conn_tag}} backend"},
		},
	}, {
		title:          "Backend idle-hold share by tag",
		description:    "Idle hold / hold at the backend: sessions holding a backend with no statement running (open transactions, pins).",
		unit:           unitPercent,
		queries:        []q{{"sum by (conn_tag, source) (" + rate(colIdle, col...) + ") / sum by (conn_tag, source) (" + rate(colHold, col...) + ")", "{{conn_tag}} ({{source}})"}},
		thresholds:     idleShareThresholds(),
		showThresholds: true,
		max:            1,
	}, {
		title:       "Backend active time by tag",
		description: "rate(active seconds): backend connections busy inside statements per tag.",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag, source) (" + rate(colActive, col...) + ")", "{{conn_tag}} ({{source}})"}},
	}, {
		title:       "Sessions holding a connection by tag",
		description: "Sessions holding a backend (ProxySQL) or a server connection (MySQL) right now, per tag.",
		unit:        unitCount,
		queries:     []q{{"sum by (conn_tag, source) (" + colSessions + sel(col...) + ")", "{{conn_tag}} ({{source}})"}},
		stack:       true,
	}, {
		title:       "Backend statements and errors by tag",
		description: "Statements per second per tag as the collector saw them, and the failed ones.",
		unit:        unitPerSec,
		queries: []q{
			{"sum by (conn_tag, source) (" + rate(colStmts, col...) + ")", "{{conn_tag}} ({{source}})"},
			{"sum by (conn_tag, source) (" + rate(colErrors, col...) + ")", "errors {{conn_tag}} ({{source}})"},
		},
	}} {
		b = b.WithPanel(timeSeries(p))
	}
	b = b.WithRow(row("Collector sources"))
	for _, p := range sourceHealth(selSource) {
		b = b.WithPanel(timeSeries(p))
	}
	return b
}
