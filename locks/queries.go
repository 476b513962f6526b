package locks

// The statements a Reader runs. None takes a lock on user data; none
// changes a setting (SetLockOutput is the one exception, called only when
// the user asks).
const (
	queryVersion = `SELECT VERSION()`

	// The settings read, per flavour (MariaDB 10.6+ has no
	// innodb_thread_concurrency; MySQL has no thread_pool_*). Selecting
	// them is one round trip; SHOW GLOBAL VARIABLES WHERE, the fallback
	// when a variable is missing (a build without the thread pool), scans
	// every variable and costs 20 times more.
	queryVariablesMariaDB = `SELECT @@GLOBAL.max_connections, @@GLOBAL.thread_handling, @@GLOBAL.thread_pool_size, ` +
		`@@GLOBAL.thread_pool_max_threads, @@GLOBAL.innodb_status_output_locks`
	queryVariablesMySQL = `SELECT @@GLOBAL.max_connections, @@GLOBAL.thread_handling, ` +
		`@@GLOBAL.innodb_thread_concurrency, @@GLOBAL.innodb_status_output_locks`
	queryVariables = `SHOW GLOBAL VARIABLES WHERE Variable_name IN ('max_connections', 'thread_handling', ` +
		`'thread_pool_size', 'thread_pool_max_threads', 'innodb_thread_concurrency', 'innodb_status_output_locks')`
	queryStatusVars = `SHOW GLOBAL STATUS WHERE Variable_name IN ('Threads_running', 'Threads_connected', ` +
		`'Innodb_deadlocks', 'Innodb_truncated_status_writes')`

	// Open InnoDB transactions, oldest first; LIMIT is
	// Config.MaxTransactions+1, formatted in. A transaction shows here once
	// it touched InnoDB (BEGIN alone does not); the server serves the table
	// from a cache it refreshes only after 100 ms without a read. String
	// columns are scanned as NULL-able: MariaDB 10.11 cuts COALESCE(enum
	// column, '') to 5 bytes in the binary protocol. trx_query is the
	// running statement, NULL while the session is idle: no need to fill
	// information_schema.PROCESSLIST (2 ms on an idle server, more with many
	// connections).
	queryTransactions = `SELECT trx_id, trx_state, COALESCE(TIMESTAMPDIFF(SECOND, trx_started, NOW()), 0), ` +
		`COALESCE(TIMESTAMPDIFF(SECOND, trx_wait_started, NOW()), 0), COALESCE(trx_mysql_thread_id, 0), ` +
		`trx_operation_state, trx_isolation_level, COALESCE(trx_rows_locked, 0), ` +
		`COALESCE(trx_rows_modified, 0), COALESCE(trx_lock_structs, 0), trx_query, trx_requested_lock_id ` +
		`FROM information_schema.INNODB_TRX ` +
		`WHERE COALESCE(trx_mysql_thread_id, 0) <> CONNECTION_ID() ` +
		`ORDER BY trx_started, trx_id LIMIT %d`
	// The last statements of the given sessions (10 per thread by
	// default): the tag of a session idle in its transaction. SQL_TEXT
	// keeps comments; statement digests do not. The IN list holds the
	// session ids the server returned (integers, formatted here: a
	// statement with ? would cost three round trips without
	// interpolateParams).
	queryHistoryPrefix = `SELECT t.PROCESSLIST_ID, h.EVENT_ID, h.SQL_TEXT ` +
		`FROM performance_schema.events_statements_history h ` +
		`JOIN performance_schema.threads t ON t.THREAD_ID = h.THREAD_ID ` +
		`WHERE h.SQL_TEXT IS NOT NULL AND t.PROCESSLIST_ID IN (`

	queryInnoDBStatus = `SHOW ENGINE INNODB STATUS`
	// The offset from UTC of the server's system time zone, in which the
	// status text prints times; read only when it shows a deadlock.
	queryZoneOffset = `SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), CONVERT_TZ(UTC_TIMESTAMP(), '+00:00', 'SYSTEM'))`

	// MariaDB (and MySQL 5.7) keep lock waits in information_schema, by
	// trx id, which is not unique (every transaction holding only shared
	// locks has 0): the rows are read as they are and resolved to sessions
	// from the locks (resolveWaits), never joined on trx id.
	queryLockWaitRowsMariaDB = `SELECT requesting_trx_id, requested_lock_id, blocking_trx_id, blocking_lock_id ` +
		`FROM information_schema.INNODB_LOCK_WAITS`
	// INNODB_LOCKS lists only the locks that wait or block.
	queryLocksMariaDB = `SELECT lock_id, lock_trx_id, lock_mode, lock_type, lock_table, lock_index, lock_space, ` +
		`lock_page, lock_rec, lock_data FROM information_schema.INNODB_LOCKS`

	// MySQL 8.0 moved them to performance_schema (data_lock_waits,
	// data_locks), keyed by performance_schema thread ids: the blocker is
	// exact. Columns as the MySQL 8.0/8.4 reference manual lists them. Not
	// run by this repository's CI (MariaDB only): kept small.
	queryWaitsMySQL8 = `SELECT w.REQUESTING_ENGINE_TRANSACTION_ID, w.BLOCKING_ENGINE_TRANSACTION_ID, ` +
		`COALESCE(rt.PROCESSLIST_ID, 0), COALESCE(bt.PROCESSLIST_ID, 0), ` +
		`w.REQUESTING_ENGINE_LOCK_ID, w.BLOCKING_ENGINE_LOCK_ID, ` +
		`CONCAT(rl.OBJECT_SCHEMA, '.', rl.OBJECT_NAME), rl.INDEX_NAME, rl.LOCK_TYPE, rl.LOCK_MODE, rl.LOCK_DATA, ` +
		`bl.LOCK_MODE, bl.LOCK_DATA ` +
		`FROM performance_schema.data_lock_waits w ` +
		`LEFT JOIN performance_schema.threads rt ON rt.THREAD_ID = w.REQUESTING_THREAD_ID ` +
		`LEFT JOIN performance_schema.threads bt ON bt.THREAD_ID = w.BLOCKING_THREAD_ID ` +
		`LEFT JOIN performance_schema.data_locks rl ON rl.ENGINE = w.ENGINE AND rl.ENGINE_LOCK_ID = w.REQUESTING_ENGINE_LOCK_ID ` +
		`LEFT JOIN performance_schema.data_locks bl ON bl.ENGINE = w.ENGINE AND bl.ENGINE_LOCK_ID = w.BLOCKING_ENGINE_LOCK_ID`

	// Who the sessions of the transactions are, and for how long their
	// current command (Sleep: idle) has run; only for the sessions listed.
	// MariaDB has TIME_MS; MySQL 8's threads table whole seconds.
	querySessionsMariaDB = `SELECT ID, COALESCE(USER, ''), COALESCE(HOST, ''), COALESCE(DB, ''), COALESCE(COMMAND, ''), ` +
		`COALESCE(TIME_MS, 0) / 1000 FROM information_schema.PROCESSLIST WHERE ID IN (`
	querySessionsMySQL8 = `SELECT PROCESSLIST_ID, COALESCE(PROCESSLIST_USER, ''), COALESCE(PROCESSLIST_HOST, ''), ` +
		`COALESCE(PROCESSLIST_DB, ''), COALESCE(PROCESSLIST_COMMAND, ''), COALESCE(PROCESSLIST_TIME, 0) ` +
		`FROM performance_schema.threads WHERE PROCESSLIST_ID IN (`

	// Metadata-lock waits, as sys.schema_table_lock_waits pairs them: every
	// pending lock with every lock granted to another session on the same
	// object. MariaDB fills metadata_locks only with the instrument
	// wait/lock/metadata/sql/mdl enabled (off by default; MySQL 8 has it
	// on): queryMDLInstrument asks first.
	queryMDLInstrument = `SELECT ENABLED FROM performance_schema.setup_instruments WHERE NAME = 'wait/lock/metadata/sql/mdl'`
	queryMDLWaits      = `SELECT COALESCE(wt.PROCESSLIST_ID, 0), COALESCE(gt.PROCESSLIST_ID, 0), w.OBJECT_TYPE, ` +
		`COALESCE(w.OBJECT_SCHEMA, ''), COALESCE(w.OBJECT_NAME, ''), w.LOCK_TYPE, g.LOCK_TYPE, g.LOCK_DURATION, ` +
		`wt.PROCESSLIST_INFO, gt.PROCESSLIST_INFO, COALESCE(wt.PROCESSLIST_TIME, 0), COALESCE(gt.PROCESSLIST_COMMAND, ''), ` +
		`COALESCE(gt.PROCESSLIST_TIME, 0), COALESCE(wt.PROCESSLIST_USER, ''), COALESCE(wt.PROCESSLIST_HOST, ''), ` +
		`COALESCE(gt.PROCESSLIST_USER, ''), COALESCE(gt.PROCESSLIST_HOST, '') ` +
		`FROM performance_schema.metadata_locks w ` +
		`JOIN performance_schema.metadata_locks g ON g.OBJECT_TYPE = w.OBJECT_TYPE ` +
		`AND g.OBJECT_SCHEMA <=> w.OBJECT_SCHEMA AND g.OBJECT_NAME <=> w.OBJECT_NAME ` +
		`AND g.LOCK_STATUS = 'GRANTED' AND g.OWNER_THREAD_ID <> w.OWNER_THREAD_ID ` +
		`LEFT JOIN performance_schema.threads wt ON wt.THREAD_ID = w.OWNER_THREAD_ID ` +
		`LEFT JOIN performance_schema.threads gt ON gt.THREAD_ID = g.OWNER_THREAD_ID ` +
		`WHERE w.LOCK_STATUS = 'PENDING' AND COALESCE(wt.PROCESSLIST_ID, 0) <> CONNECTION_ID()`

	// What performance_schema records, asked only when a tag stayed
	// unknown: the note then names the consumer to turn on.
	queryConsumers = `SELECT NAME, ENABLED FROM performance_schema.setup_consumers ` +
		`WHERE NAME IN ('events_statements_current', 'events_statements_history')`

	// Every lock of every transaction, counted on the server: one row per
	// transaction, table, index, mode and state, not one per locked row.
	queryLocksMySQL8 = `SELECT ENGINE_TRANSACTION_ID, CONCAT(OBJECT_SCHEMA, '.', OBJECT_NAME), INDEX_NAME, ` +
		`LOCK_TYPE, LOCK_MODE, LOCK_STATUS, COALESCE(LOCK_DATA = 'supremum pseudo-record', 0) AS supremum, COUNT(*) ` +
		`FROM performance_schema.data_locks WHERE ENGINE = 'INNODB' ` +
		`GROUP BY ENGINE_TRANSACTION_ID, OBJECT_SCHEMA, OBJECT_NAME, INDEX_NAME, LOCK_TYPE, LOCK_MODE, LOCK_STATUS, supremum`
	// MySQL counts deadlocks in INNODB_METRICS (lock_deadlocks, enabled by
	// default); MariaDB in the status variable Innodb_deadlocks.
	queryDeadlocksMySQL8 = `SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'lock_deadlocks' AND STATUS = 'enabled'`

	// MariaDB's thread pool (thread_handling=pool-of-threads): per group,
	// and the requests waiting in the queues.
	queryThreadPoolGroups = `SELECT COUNT(*), COALESCE(SUM(CONNECTIONS), 0), COALESCE(SUM(THREADS), 0), ` +
		`COALESCE(SUM(ACTIVE_THREADS), 0), COALESCE(SUM(STANDBY_THREADS), 0), COALESCE(SUM(QUEUE_LENGTH), 0), ` +
		`COALESCE(SUM(IS_STALLED), 0) FROM information_schema.THREAD_POOL_GROUPS`
	queryThreadPoolQueues = `SELECT COUNT(*), COALESCE(MAX(QUEUEING_TIME_MICROSECONDS), 0) FROM information_schema.THREAD_POOL_QUEUES`

	setLockOutputOn  = `SET GLOBAL innodb_status_output_locks = ON`
	setLockOutputOff = `SET GLOBAL innodb_status_output_locks = OFF`
)
