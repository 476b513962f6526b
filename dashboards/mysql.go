package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// MySQL server metric names (collector/metrics.go).
const (
	myTrx        = "holdtime_mysql_transactions"
	myTrxAge     = "holdtime_mysql_transaction_max_age_seconds"
	myRowsLocked = "holdtime_mysql_rows_locked"
	myLockWaits  = "holdtime_mysql_lock_waits"
	selMySQL     = `source="mysql"`
)

func mysqlServer() *dashboard.DashboardBuilder {
	trx := []string{selTarget, selTag}
	b := newDashboard("holdtime-mysql", "holdtime: MySQL server transactions and locks by tag",
		"Server-side view per tag, from the collector's MySQL source: open InnoDB transactions, their age and rows locked, and who waits on whom.").
		WithVariable(labelVariable(varTarget, "target", colUp+`{source="mysql"}`, "The MySQL/MariaDB servers the collector polls.")).
		WithVariable(labelVariable(varTag, "conn_tag", layerHold+`{layer="server", target=~"$target"}`, "The business process (conn_tag)."))

	b = b.WithRow(row("Transactions by tag"))
	for _, p := range []panel{{
		title:       "Open transactions by tag",
		description: "InnoDB transactions open right now (INNODB_TRX), by the tag of the session's statements.",
		unit:        unitCount,
		queries:     []q{{"sum by (conn_tag) (" + myTrx + sel(trx...) + ")", "{{conn_tag}}"}},
		stack:       true,
	}, {
		title:          "Oldest open transaction by tag",
		description:    "Age of the oldest open transaction per tag. A transaction open for seconds holds its connection, its locks and purge back.",
		unit:           unitSeconds,
		queries:        []q{{"max by (conn_tag) (" + myTrxAge + sel(trx...) + ")", "{{conn_tag}}"}},
		thresholds:     thresholds(green, step{5, orange}, step{30, red}),
		showThresholds: true,
	}, {
		title:       "Rows locked by tag",
		description: "Rows locked by open transactions per tag (INNODB_TRX trx_rows_locked).",
		unit:        unitCount,
		queries:     []q{{"sum by (conn_tag) (" + myRowsLocked + sel(trx...) + ")", "{{conn_tag}}"}},
		thresholds:  thresholds(green, step{1000, orange}, step{100000, red}),
	}, {
		title:       "Lock waits: waiter ← blocker",
		description: "Sessions waiting for a row lock, by the tag of the waiting session and of the session holding the lock.",
		unit:        unitCount,
		queries:     []q{{"sum by (waiter_tag, blocker_tag) (" + myLockWaits + sel(selTarget) + ")", "{{waiter_tag}} ← {{blocker_tag}}"}},
		thresholds:  thresholds(green, step{1, orange}, step{10, red}),
		stack:       true,
	}} {
		b = b.WithPanel(timeSeries(p))
	}
	b = b.WithPanel(tablePanel(panel{
		title:       "Lock waits now",
		description: "Current lock waits: which tag waits on which.",
		unit:        unitCount,
		queries:     []q{{"sort_desc(sum by (target, waiter_tag, blocker_tag) (" + myLockWaits + sel(selTarget) + "))", ""}},
		width:       24,
		height:      6,
	}))

	b = b.WithRow(row("Server layer: connections by tag (headline: mysql)"))
	for _, p := range layerRow("server", "Server", selServer) {
		b = b.WithPanel(timeSeries(p))
	}
	b = b.WithRow(row("Collector sources"))
	for _, p := range sourceHealth(selMySQL) {
		b = b.WithPanel(timeSeries(p))
	}
	return b
}
