package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// ProxySQL metric names (collector/metrics.go).
const (
	pxPoolConns    = "holdtime_proxysql_pool_connections"
	pxPoolErrors   = "holdtime_proxysql_pool_connection_errors_total"
	pxPoolQueries  = "holdtime_proxysql_pool_queries_total"
	pxPoolLatency  = "holdtime_proxysql_pool_latency_seconds"
	pxClientConns  = "holdtime_proxysql_client_connections"
	pxActiveTrx    = "holdtime_proxysql_active_transactions"
	pxGetFailures  = "holdtime_proxysql_connpool_get_failures_total"
	pxPinned       = "holdtime_collector_pinned_sessions"
	pxPinnedSecs   = "holdtime_collector_pinned_seconds_total"
	pxLayerWait    = "holdtime_collector_layer_wait_seconds_total"
	pxWaiting      = "holdtime_proxysql_waiting_sessions"
	selHostgroup   = `hostgroup=~"$hostgroup"`
	selProxySource = `source=~"proxysql_.*"`
)

func proxysqlPool() *dashboard.DashboardBuilder {
	pool := []string{selTarget, selHostgroup}
	by := "target, hostgroup, server"
	legend := "{{target}} hg{{hostgroup}} {{server}}"
	b := newDashboard("holdtime-proxysql", "holdtime: ProxySQL backend pool and pins",
		"ProxySQL's backend connection pool per hostgroup and server, and the sessions that pin a backend (multiplexing off) by tag and reason.").
		WithVariable(labelVariable(varTarget, "target", pxPoolConns, "The ProxySQL instances the collector polls.")).
		WithVariable(labelVariable(varHostgroup, "hostgroup", pxPoolConns+`{target=~"$target"}`, "ProxySQL hostgroups.")).
		WithVariable(labelVariable(varTag, "conn_tag", layerHold+`{layer="proxy", target=~"$target"}`, "The business process (conn_tag)."))

	b = b.WithRow(row("Backend pool"))
	for _, p := range []panel{{
		title:          "Backend pool in use",
		description:    "Used / (used + free) backend connections per server. ProxySQL opens more up to max_connections; sustained near 100 % with get failures below means the backends are exhausted.",
		unit:           unitPercent,
		queries:        []q{{"sum by (" + by + ") (" + pxPoolConns + sel(append(pool, `state="used"`)...) + ") / sum by (" + by + ") (" + pxPoolConns + sel(pool...) + ")", legend}},
		thresholds:     thresholds(green, step{0.8, orange}, step{0.95, red}),
		showThresholds: true,
		max:            1,
	}, {
		title:       "Backend connections by state",
		description: "Backend connections in use and free in ProxySQL's pool (stats_mysql_connection_pool ConnUsed, ConnFree).",
		unit:        unitCount,
		queries:     []q{{"sum by (" + by + ", state) (" + pxPoolConns + sel(pool...) + ")", "{{state}} " + legend}},
	}, {
		title:       "Backend connection errors",
		description: "Failed connection attempts to each backend (ConnERR) per second.",
		unit:        unitPerSec,
		queries:     []q{{"sum by (" + by + ") (" + rate(pxPoolErrors, pool...) + ")", legend}},
		thresholds:  thresholds(green, step{0.01, orange}, step{1, red}),
	}, {
		title:       "Pool get failures",
		description: "Times ProxySQL could not get a backend connection from its pool (ConnPool_get_conn_failure) per second: clients waited or failed.",
		unit:        unitPerSec,
		queries:     []q{{"sum by (target) (" + rate(pxGetFailures, selTarget) + ")", "{{target}}"}},
		thresholds:  thresholds(green, step{0.01, red}),
	}, {
		title:       "Queries per backend",
		description: "Queries ProxySQL sent to each backend server per second.",
		unit:        unitPerSec,
		queries:     []q{{"sum by (" + by + ") (" + rate(pxPoolQueries, pool...) + ")", legend}},
	}, {
		title:       "Backend ping latency",
		description: "ProxySQL's monitor ping latency to each backend (Latency_us).",
		unit:        unitSeconds,
		queries:     []q{{"max by (" + by + ") (" + pxPoolLatency + sel(pool...) + ")", legend}},
		thresholds:  thresholds(green, step{0.005, orange}, step{0.05, red}),
	}, {
		title:       "Client connections and open transactions",
		description: "Client connections to ProxySQL and transactions open through it (stats_mysql_global).",
		unit:        unitCount,
		queries: []q{
			{"sum by (target) (" + pxClientConns + sel(selTarget) + ")", "clients {{target}}"},
			{"sum by (target) (" + pxActiveTrx + sel(selTarget) + ")", "transactions {{target}}"},
		},
	}} {
		b = b.WithPanel(timeSeries(p))
	}

	b = b.WithRow(row("Proxy layer: backends by tag (headline: events log, else processlist)"))
	for _, p := range layerRow("proxy", "Backend", selProxy) {
		b = b.WithPanel(timeSeries(p))
	}

	b = b.WithRow(row("Who waits / who holds"))
	for _, p := range []panel{{
		title:       "Statements waiting for a backend by tag",
		description: "rate(wait seconds): statements of each tag waiting for a backend on average, because the hostgroup reached max_connections. The tags that suffer; compare with the tags that hold, next panel.",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag) (" + rate(pxLayerWait, selTarget, selProxy, selTag) + ")", "{{conn_tag}}"}},
		thresholds:  thresholds(green, step{0.1, orange}, step{1, red}),
		stack:       true,
	}, {
		title:       "Backends held by tag",
		description: "rate(backend hold seconds): backends each tag keeps on average. When statements wait (previous panel), the largest holders here are the cause.",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag) (" + rate(layerHold, selTarget, selProxy, selTag) + ")", "{{conn_tag}}"}},
		stack:       true,
	}, {
		title:       "Sessions waiting for a backend now",
		description: "ProxySQL client sessions waiting for a backend connection at the last processlist sample (command Connect, no backend).",
		unit:        unitCount,
		queries:     []q{{"sum by (target) (" + pxWaiting + sel(selTarget) + ")", "{{target}}"}},
		thresholds:  thresholds(green, step{1, orange}, step{10, red}),
	}} {
		b = b.WithPanel(timeSeries(p))
	}

	b = b.WithRow(row("Pins: multiplexing off"))
	for _, p := range []panel{{
		title:       "Pinned sessions by tag and reason",
		description: "Sessions idle with a backend attached because multiplexing is off for them (transaction, user variable, temporary table, lock, prepared statement, auto_increment delay), from mysql-show_processlist_extended.",
		unit:        unitCount,
		queries:     []q{{"sum by (conn_tag, reason) (" + pxPinned + sel(selTarget, selTag) + ")", "{{conn_tag}} {{reason}}"}},
		stack:       true,
	}, {
		title:       "Connections kept pinned by tag and reason",
		description: "rate(pinned seconds): backends kept attached to idle sessions on average. Each is a backend no other client can use.",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag, reason) (" + rate(pxPinnedSecs, selTarget, selTag) + ")", "{{conn_tag}} {{reason}}"}},
		thresholds:  thresholds(green, step{1, orange}, step{5, red}),
		stack:       true,
	}} {
		b = b.WithPanel(timeSeries(p))
	}
	b = b.WithRow(row("Collector sources"))
	for _, p := range sourceHealth(selProxySource) {
		b = b.WithPanel(timeSeries(p))
	}
	return b
}
