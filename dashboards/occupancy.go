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

// Collector metric names (collector/metrics.go). The per-source figures
// (colHold, colIdle, ...) are cross-checks: one hold is seen by several
// sources of a layer, so a query may group them by source but never sum
// over it (TestNoSumOverSource). Panels that compare tags use the layer
// figures, which are each (target, layer)'s headline source.
const (
	colHold       = "holdtime_collector_hold_seconds_total"
	colUp         = "holdtime_source_up"
	colState      = "holdtime_source_state"
	colDegraded   = "holdtime_source_degraded"
	colLastOK     = "holdtime_source_last_success_timestamp_seconds"
	colOverflow   = "holdtime_collector_tags_overflow_total"
	colBadRows    = "holdtime_collector_malformed_rows_total"
	layerHold     = "holdtime_collector_layer_hold_seconds_total"
	layerIdle     = "holdtime_collector_layer_idle_hold_seconds_total"
	layerActive   = "holdtime_collector_layer_active_seconds_total"
	layerStmts    = "holdtime_collector_layer_statements_total"
	layerErrors   = "holdtime_collector_layer_statement_errors_total"
	layerSessions = "holdtime_collector_layer_sessions"
	layerSource   = "holdtime_collector_layer_source"
	selProxy      = `layer="proxy"`
	selServer     = `layer="server"`
)

// Thresholds of the idle-hold share: above half, a tag mostly keeps
// connections doing nothing; above 80 % it is the story's hog.
func idleShareThresholds() *dashboard.ThresholdsConfigBuilder {
	return thresholds(green, step{0.5, orange}, step{0.8, red})
}

// sourceHealth is the row every collector dashboard ends with: a source
// that fails is down and its figures stale, never zero; one that answers
// with incomplete figures is degraded and says why.
func sourceHealth(sourceMatcher string) []panel {
	return []panel{{
		title:       "Source state",
		description: "1 while the collector's source is in that state. up: answers, figures complete. degraded: answers, some figures missing or a lower bound (see the next panel). down: its polls fail; its counters keep their last values, its gauges disappear: stale, never zero. waiting: nothing to report yet (before the first poll; OTLP: no span export yet or lately, which is also what an idle app looks like).",
		unit:        unitCount,
		queries:     []q{{"max by (target, source, state) (" + colState + sel(selTarget, sourceMatcher) + ") > 0", "{{target}} {{source}} {{state}}"}},
		width:       8,
	}, {
		title:       "Degraded sources and why",
		description: "Why a source's figures are incomplete (for example history_long_consumer_off: the MySQL source misses statements of clients that disconnect at once and counts a lower bound under load). The collector's /api/v1/top and its log say what to do.",
		unit:        unitCount,
		queries:     []q{{"max by (target, source, reason) (" + colDegraded + sel(selTarget, sourceMatcher) + ") or max by (target, source) (" + colUp + sel(selTarget, sourceMatcher) + ") * 0", "{{target}} {{source}} {{reason}}"}},
		thresholds:  thresholds(green, step{1, orange}),
		width:       8,
	}, {
		title:       "Seconds since last successful poll",
		description: "How stale each source's figures are. More than a few poll intervals means the source is failing: see the collector's log. OTLP: the last span export (none while the app holds no connection).",
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

// layerRow is the panels of one collector layer (proxy or server), from
// the layer figures: each target's headline source, summed over targets.
func layerRow(layer, what, layerMatcher string, extra ...string) []panel {
	m := append([]string{selTarget, layerMatcher, selTag}, extra...)
	return []panel{{
		title:       what + " occupancy by tag",
		description: "rate(hold seconds) of the " + layer + " layer: " + what + " connections each tag keeps busy, from each target's headline source (see \"Headline source per layer\"), added up over targets, never over sources.",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag) (" + rate(layerHold, m...) + ")", "{{conn_tag}}"}},
		stack:       true,
	}, {
		title:          what + " idle-hold share by tag",
		description:    "Idle hold / hold at the " + layer + " layer: connections held with no statement running (open transactions between statements, pins).",
		unit:           unitPercent,
		queries:        []q{{"sum by (conn_tag) (" + rate(layerIdle, m...) + ") / sum by (conn_tag) (" + rate(layerHold, m...) + ")", "{{conn_tag}}"}},
		thresholds:     idleShareThresholds(),
		showThresholds: true,
		max:            1,
	}, {
		title:       what + " active time by tag",
		description: "rate(active seconds) of the " + layer + " layer: connections busy inside statements per tag.",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag) (" + rate(layerActive, m...) + ")", "{{conn_tag}}"}},
		stack:       true,
	}, {
		title:       what + " sessions holding a connection by tag",
		description: "Sessions of the " + layer + " layer holding a connection right now, per tag.",
		unit:        unitCount,
		queries:     []q{{"sum by (conn_tag) (" + layerSessions + sel(m...) + ")", "{{conn_tag}}"}},
		stack:       true,
	}, {
		title:       what + " statements and errors by tag",
		description: "Statements per second per tag at the " + layer + " layer, and the failed ones.",
		unit:        unitPerSec,
		queries: []q{
			{"sum by (conn_tag) (" + rate(layerStmts, m...) + ")", "{{conn_tag}}"},
			{"sum by (conn_tag) (" + rate(layerErrors, m...) + ")", "errors {{conn_tag}}"},
		},
	}}
}

func occupancy() *dashboard.DashboardBuilder {
	app := []string{selInstance, selTag}
	b := newDashboard("holdtime-occupancy", "holdtime: connection occupancy by tag",
		"Who is holding the database connections, and for how long, at each layer: app (the client pool), proxy (ProxySQL backends), server (MySQL connections). Occupancy = rate(hold seconds) = the connections a tag keeps busy.").
		WithVariable(labelVariable(varInstance, "instance", appHold, "The app instances instrumented with conntag.")).
		WithVariable(labelVariable(varTarget, "target", layerHold, "The collector's targets (ProxySQL instances, MySQL servers, the app's OTLP spans).")).
		WithVariable(labelVariable(varSource, "source", colUp, "The collector's sources, for the cross-check and health panels.")).
		WithVariable(labelVariable(varTag, "conn_tag", "{__name__=~\""+appHold+"|"+layerHold+"\"}", "The business process (conn_tag)."))

	b = b.WithRow(row("Who holds the connections now: one figure per layer"))
	for _, p := range []panel{{
		title:       "App layer: client pool occupancy by tag (last 5m)",
		description: "Connections each tag keeps borrowed from the app's pool on average over the last 5 minutes, measured by conntag from borrow to return. A tag that holds a connection idle outside a transaction shows only here.",
		unit:        unitConnBusy,
		queries:     []q{{"sort_desc(sum by (conn_tag) (rate(" + appHold + sel(app...) + "[5m])))", "{{conn_tag}}"}},
		thresholds:  thresholds(green, step{1, yellow}, step{4, red}),
		width:       8,
	}, {
		title:       "Proxy layer: ProxySQL backend occupancy by tag (last 5m)",
		description: "ProxySQL backend connections bound to each tag's client sessions (statements, transactions, pins), from each ProxySQL's headline source: the events log when configured, else processlist sampling.",
		unit:        unitConnBusy,
		queries:     []q{{"sort_desc(sum by (conn_tag) (rate(" + layerHold + sel(selTarget, selProxy, selTag) + "[5m])))", "{{conn_tag}}"}},
		thresholds:  thresholds(green, step{1, yellow}, step{4, red}),
		width:       8,
	}, {
		title:       "Server layer: MySQL connection occupancy by tag (last 5m)",
		description: "MySQL server connections busy in each tag's statements or open transactions (the collector's MySQL source). A server figure with no app figure is another client, or an app without conntag.",
		unit:        unitConnBusy,
		queries:     []q{{"sort_desc(sum by (conn_tag) (rate(" + layerHold + sel(selTarget, selServer, selTag) + "[5m])))", "{{conn_tag}}"}},
		thresholds:  thresholds(green, step{1, yellow}, step{4, red}),
		width:       8,
	}} {
		b = b.WithPanel(barGauge(p))
	}
	b = b.WithPanel(timeSeries(panel{
		title: "Occupancy by tag and layer",
		description: "The same tag at each layer, side by side; never add them up, each is a different pool. " +
			"app much higher than server: the app holds connections idle outside a transaction (a slow call made while holding one): it costs app pool slots, not the database. " +
			"proxy or server near app: the tag keeps transactions open. server with no app line: another client, or an app without conntag.",
		unit: unitConnBusy,
		queries: []q{
			{"sum by (conn_tag) (" + rate(appHold, app...) + ")", "{{conn_tag}} app"},
			{"sum by (conn_tag) (" + rate(layerHold, selTarget, selProxy, selTag) + ")", "{{conn_tag}} proxy"},
			{"sum by (conn_tag) (" + rate(layerHold, selTarget, selServer, selTag) + ")", "{{conn_tag}} server"},
		},
		width: 16,
	}))
	b = b.WithPanel(tablePanel(panel{
		title:       "Headline source per layer",
		description: "Where each target's layer figures come from, fixed by the configuration (exact before sampled, sampled before inferred): proxy: proxysql_events with an events log, else proxysql_processlist; server: mysql; app: otlp.",
		unit:        unitCount,
		queries:     []q{{"max by (target, layer, source) (" + layerSource + sel(selTarget) + ")", ""}},
		width:       8,
	}))

	b = b.WithRow(row("App layer: client pool (conntag)"))
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

	b = b.WithRow(row("Proxy layer: ProxySQL backends (headline: events log, else processlist)"))
	for _, p := range layerRow("proxy", "Proxy", selProxy) {
		b = b.WithPanel(timeSeries(p))
	}
	b = b.WithRow(row("Server layer: MySQL connections (headline: mysql)"))
	for _, p := range layerRow("server", "Server", selServer) {
		b = b.WithPanel(timeSeries(p))
	}

	b = b.WithRow(row("Cross-check: every source of a layer (never add these up)"))
	b = b.WithPanel(timeSeries(panel{
		title: "Hold by tag and source",
		description: "rate(hold seconds) per source: the events log (exact), processlist sampling, the MySQL server, the app's spans (otlp). " +
			"Sources of one layer measure the same hold: compare them, never add them; the layer panels above use one headline per layer.",
		unit:    unitConnBusy,
		queries: []q{{"sum by (target, source, conn_tag) (" + rate(colHold, selTarget, selSource, selTag) + ")", "{{conn_tag}} ({{target}} {{source}})"}},
		width:   24,
	}))
	b = b.WithRow(row("Collector sources"))
	for _, p := range sourceHealth(selSource) {
		b = b.WithPanel(timeSeries(p))
	}
	return b
}
