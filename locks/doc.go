// Package locks names the business process behind every InnoDB lock: for
// each open transaction of a MySQL 8.0+ or MariaDB 10.6+ server, its tag
// (the /* conn_tag:NAME */ its statements carry), age, state, isolation
// level, rows locked, and its locks counted by table, index and kind; who
// waits for whom, both sides named by tag; the latest deadlock with both
// tags, their statements without literal values, the lock each held and
// waited for, and the victim; and how saturated the server's threads are.
// Hints name the diagnoses that apply, with the numbers behind them.
//
//	r, err := locks.New(db, locks.Config{ParseTag: collector.ParseTag})
//	snap, err := r.Read(ctx)            // transactions, locks, waits, deadlock, saturation, hints
//	deadlocks := locks.NewDeadlocks(10) // one per target
//	fresh, unnamed := deadlocks.Observe(snap)
//
// The CLI is `holdtime locks --mysql DSN` (--watch, --json, --tag).
//
// # For a collector
//
// Call Read on an interval (10 s or more: see Cost) with one Reader and one
// Deadlocks per target, and export from the Snapshot:
//
//   - Snapshot.LocksByTagKind: locks held and waited for per tag and Kind,
//     a bounded label set (tags times the 8 Kinds, never index names);
//   - Transactions (count, oldest AgeSeconds, RowsLocked per Tag) and Waits
//     (Waiting.Tag, Blocking.Tag);
//   - Deadlocks.Observe: each new deadlock once, as victim_tag =
//     Deadlock.VictimTag() and other_tag = Deadlock.OtherTags(); unnamed
//     counts deadlocks the server counted between two reads that no read
//     showed (the server keeps only the latest): export them with unknown
//     tags rather than drop them;
//   - Saturation: ThreadsRunning, ThreadsConnected, MaxConnections, and
//     Queued (statements waiting for a thread) when QueueKnown;
//   - StatusTruncated and Notes, so a partial figure is never taken for a
//     whole one.
//
// ReadSaturation reads only the thread figures, for a shorter interval.
//
// # Tags
//
// A transaction's tag is its running statement's, else the latest tagged
// statement of its session since the transaction began, from
// performance_schema.events_statements_history (joined by the session id
// INNODB_TRX gives). Statements a driver sends by itself (BEGIN, SET
// TRANSACTION, SELECT CONNECTION_ID()) name nothing. A transaction whose
// statements carry no tag is UntaggedTag; one none of whose statements can
// be seen is UnknownTag. MariaDB records no statement text for server-side
// prepared statements: with go-sql-driver/mysql, open the pool with
// interpolateParams=true (as package reservation asks) or the tags of idle
// transactions are unknown. Tags are parsed by Config.ParseTag, which is
// collector.ParseTag: this package cannot import the collector, which
// imports it.
//
// # Lock kinds
//
// Kind is what a lock covers: KindRecord (a record only, READ COMMITTED's
// locking reads), KindNextKey (a record and the gap before it,
// REPEATABLE READ's default), KindGap, KindSupremum (the gap after a page's
// last record: the end of a range), KindInsertIntention (an INSERT waiting
// for a gap), KindTableIntention (IS, IX), KindTable (S, X) and KindAutoInc.
// RowLocksPerRow divides the records locked in every index of a table by
// those locked in its clustered index (PRIMARY, or GEN_CLUST_INDEX): 1.0
// when rows are locked once, 2.0 when a secondary index record is locked
// with each (a locking read or write through a secondary index).
//
// # Where locks come from, and their limits
//
// MariaDB lists locks only in SHOW ENGINE INNODB STATUS, and only with
// innodb_status_output_locks=ON (Snapshot.LockOutput); its INNODB_LOCKS
// table shows only locks involved in a wait. The server lists at most 10
// lock structures per transaction (a structure is a table lock, or one
// mode's record locks on one index page): Transaction.LocksPartial says so,
// and RowsLocked stays the exact total. The server cuts the whole text at
// MaxStatusSize (1 MiB), dropping the newest transactions first
// (Snapshot.StatusTruncated; their locks are unknown). MySQL 8 reads
// performance_schema.data_locks and data_lock_waits, counted on the server
// (one row per transaction, table, index, mode), complete and without any
// setting. The lock a transaction waits for, and LATEST DETECTED DEADLOCK,
// come from the status text on both, whatever the setting.
//
// # Server settings
//
// A Reader never changes a server setting: Read reports
// innodb_status_output_locks and, when it is off on MariaDB, the statement
// that turns it on (LockOutput.Enable) and what it costs (LockOutputCost).
// SetLockOutput sets it, for callers whose user asked (holdtime locks
// --enable-lock-output sets it for its run and back off when it exits).
//
// # Privileges
//
// PROCESS (INNODB_TRX, the processlist of other sessions, SHOW ENGINE INNODB
// STATUS, INNODB_LOCK_WAITS) and SELECT on performance_schema (the tags of
// transactions idle between statements; MySQL 8's data_locks and
// data_lock_waits):
//
//	GRANT PROCESS ON *.* TO 'monitor'@'%';
//	GRANT SELECT ON performance_schema.* TO 'monitor'@'%';
//
// SetLockOutput needs SUPER on MariaDB, SYSTEM_VARIABLES_ADMIN on MySQL.
// MariaDB's thread pool tables need no privilege.
//
// # Cost
//
// Read runs, on one connection: SELECT VERSION() (once per Reader), one
// SELECT of five @@GLOBAL variables, SHOW GLOBAL STATUS WHERE (four
// counters), INNODB_TRX; when transactions are open whose running
// statement names no tag, performance_schema's statement history of those
// sessions only; SHOW ENGINE INNODB STATUS; on MySQL 8 data_locks
// (aggregated on the server) and INNODB_METRICS; the lock waits when a
// transaction waits; the thread pool's two tables when there is one.
// Measured on MariaDB 10.11 on a shared 2-core machine (BenchmarkRead,
// medians of 6 runs, against SELECT 1 on the same pool at 0.12 ms): an idle
// Read takes 2.2 ms (17 round trips' time), one with 20 open transactions
// holding locks 7 ms (57), ReadSaturation 1 ms (8). What costs the server
// more grows with its locks: SHOW ENGINE INNODB STATUS prints every listed
// lock (up to 1 MiB) while holding the lock system's latch, so new lock
// requests wait while it prints, and each call restarts the "per second
// averages" window the status text shows to everyone; MySQL's data_locks
// walks every lock. Parsing a 1 MiB text takes about 3 ms
// (BenchmarkParseStatus). INNODB_TRX, INNODB_LOCKS and INNODB_LOCK_WAITS
// are a cache the server refreshes only after 100 ms without a read of
// them: read more often than that (by all readers together) and they never
// change. Poll Read every 10 s or more; ReadSaturation can run every
// second.
//
// # Saturation
//
// Threads_running and Threads_connected against max_connections, and the
// statements waiting for a thread: on MariaDB with thread_handling =
// pool-of-threads, the thread pool's queues (THREAD_POOL_GROUPS.QUEUE_LENGTH
// summed, the oldest THREAD_POOL_QUEUES wait); on MySQL with
// innodb_thread_concurrency > 0, ROW OPERATIONS' "queries in queue". With
// one thread per connection and no concurrency limit no statement waits for
// a thread (QueueNone). MariaDB counts a request its listener thread has
// taken but not queued only with thread_pool_dedicated_listener=ON (measured:
// 2 of 3 waiting requests shown without it); read a saturated pool through
// extra_port, or the reader's own statements wait in the queue it measures.
package locks
