package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// MySQL server metric names (collector/metrics.go).
const (
	myTrx        = "holdtime_mysql_transactions"
	myTrxAge     = "holdtime_mysql_transaction_max_age_seconds"
	myRowsLocked = "holdtime_mysql_rows_locked"
	myLockWaits  = "holdtime_mysql_lock_waits"
	myLocks      = "holdtime_mysql_locks"
	myDeadlocks  = "holdtime_mysql_deadlocks_total"
	myThrRunning = "holdtime_mysql_threads_running"
	myThrConn    = "holdtime_mysql_threads_connected"
	myMaxConn    = "holdtime_mysql_max_connections"
	myThrQueue   = "holdtime_mysql_thread_queue"
	myQueueOld   = "holdtime_mysql_thread_queue_oldest_seconds"
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

	b = b.WithRow(row("Locks, deadlocks and threads"))
	for _, p := range []panel{{
		title: "Locks held by tag and kind",
		description: "InnoDB locks held by open transactions per tag and kind (record: rows; gap, next_key, supremum: ranges a queue-like read " +
			"at REPEATABLE READ locks, which READ COMMITTED does not; table_*: intention locks). MariaDB lists them only with " +
			"innodb_status_output_locks=ON (see holdtime locks). Read every LocksInterval (source mysql_locks).",
		unit:    unitCount,
		queries: []q{{"sum by (conn_tag, kind) (" + myLocks + sel(selTarget, selTag, `state="held"`) + ")", "{{conn_tag}} {{kind}}"}},
		stack:   true,
	}, {
		title:       "Deadlocks: victim ← other",
		description: "InnoDB deadlocks per second, each counted once, by the tag of the transaction rolled back (victim) and of the other. `holdtime locks` shows the statements and locks of each.",
		unit:        unitPerSec,
		queries:     []q{{"sum by (victim_tag, other_tag) (" + rate(myDeadlocks, selTarget) + ")", "{{victim_tag}} ← {{other_tag}}"}},
		thresholds:  thresholds(green, step{0.01, orange}, step{1, red}),
	}, {
		title:       "Server threads",
		description: "Threads_running (statements executing), Threads_connected and max_connections. Running far above the CPUs means statements queue inside the server.",
		unit:        unitCount,
		queries: []q{
			{"max by (target) (" + myThrRunning + sel(selTarget) + ")", "running {{target}}"},
			{"max by (target) (" + myThrConn + sel(selTarget) + ")", "connected {{target}}"},
			{"max by (target) (" + myMaxConn + sel(selTarget) + ")", "max_connections {{target}}"},
		},
	}, {
		title: "Statements queued for a thread",
		description: "Statements waiting for a thread to run them: MariaDB's thread pool queues (thread_handling=pool-of-threads), " +
			"MySQL's innodb_thread_concurrency queue; 0 with one thread per connection. Above 0 for long: the pool or the limit " +
			"is too small for the load (alert HoldtimeMySQLThreadQueue).",
		unit:           unitCount,
		queries:        []q{{"max by (target, queue) (" + myThrQueue + sel(selTarget) + ")", "{{queue}} {{target}}"}},
		thresholds:     thresholds(green, step{1, orange}, step{10, red}),
		showThresholds: true,
	}, {
		title:       "Oldest statement queued for a thread",
		description: "How long the oldest statement queued in MariaDB's thread pool has waited (THREAD_POOL_QUEUES).",
		unit:        unitSeconds,
		queries:     []q{{"max by (target) (" + myQueueOld + sel(selTarget) + ")", "{{target}}"}},
		thresholds:  thresholds(green, step{0.1, orange}, step{1, red}),
	}} {
		b = b.WithPanel(timeSeries(p))
	}

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
