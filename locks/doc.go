// Package locks names the business process behind every InnoDB lock: for
// each open transaction of a MySQL 8.0+ or MariaDB 10.6+ server, its tag
// (the /* conn_tag:NAME */ its statements carry), age, state, isolation
// level, rows locked, and its locks counted by table, index and kind; who
// waits for whom, both sides named by tag; the latest deadlock with both
// tags, their statements without literal values, the lock each held and
// waited for, and the victim; and how saturated the server's threads are.
// Hints name the diagnoses that apply, with the numbers behind them.
//
//	r, err := locks.New(db, locks.Config{})
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
//     (Waiting.Tag, Blocking.Tag), or Chains (one tree per root blocker,
//     HeldUp sessions behind it);
//   - Deadlocks.Observe: each new deadlock once, as victim_tag =
//     Deadlock.VictimTag() and other_tag = Deadlock.OtherTag() (the other
//     tags, sorted, joined by ",": a three-way deadlock is one deadlock);
//     unnamed counts deadlocks the server counted that no read showed and
//     none ever will (the server keeps only the latest): export them with
//     unknown tags rather than drop them. Named plus unnamed equals the
//     server's counter delta: Read reads the counter before the status
//     text, and Observe keeps the balance, so a deadlock that lands between
//     the two is named by this read and not counted again by the next;
//   - Saturation: ThreadsRunning, ThreadsConnected, MaxConnections, and
//     Queued (statements waiting for a thread) when QueueKnown;
//   - StatusTruncated and Notes, so a partial figure is never taken for a
//     whole one.
//
// ReadSaturation reads only the thread figures, for a shorter interval.
//
// # Tags
//
// A transaction's tag is the tag of the statements it ran: its running
// statement and its session's statements since the transaction began, from
// performance_schema.events_statements_history (joined by the session id
// INNODB_TRX gives). Tag is the running statement's, else the latest
// tagged one's, so a transaction whose locks a tagged UPDATE took keeps
// that tag while it runs an untagged SELECT SLEEP or SET; Tags lists them
// all when its statements carried several. Statements a driver sends by
// itself (BEGIN, SET TRANSACTION, SELECT CONNECTION_ID()) name nothing, and
// conntag's /* conn_tag:untagged */ (a context without a tag) is no tag. A
// transaction whose statements carry no tag is UntaggedTag; one none of
// whose statements can be seen is UnknownTag, and Notes then names what
// would make it known: the events_statements_history consumer (with the
// statement that turns it on), SELECT on performance_schema, or the
// history's 10 statements per thread. MariaDB records no statement text
// for server-side prepared statements: with go-sql-driver/mysql, open the
// pool with interpolateParams=true (as package reservation asks) or the
// tags of idle transactions are unknown. Tags are parsed by
// conntag.ParseTag, the tag grammar's one parser, which the collector uses
// too (Config.ParseTag can replace it).
//
// A statement the server cut short is never untagged: conntag puts the tag
// at the end, so a cut statement without a tag is UnknownTag. The cuts:
// INNODB_TRX.trx_query keeps 1,024 bytes (TrxQueryLimit), performance_schema
// SQL_TEXT 1,024 (HistoryTextLimit, performance_schema_max_sql_text_length),
// digest text 2,048 (DigestTextLimit), and LATEST DETECTED DEADLOCK about
// 3,000 bytes per transaction, its session line included (DeadlockTextLimit;
// MariaDB 10.11 kept 2,980 bytes of a long statement).
//
// # Who waits for whom
//
// MySQL 8's data_lock_waits names both threads: exact. MariaDB's
// INNODB_LOCK_WAITS names transactions by trx id, and every transaction
// that holds only shared locks has trx id 0, so a join on it names
// bystanders. The waiter is found by the lock it requested; the blocker by
// its trx id only when one transaction has it, else from the status text's
// granted locks (the same trx id, tablespace, page and heap number, or
// table): that needs innodb_status_output_locks=ON. When neither tells, the
// blocker is UnknownTag with ThreadID 0, and Notes says why. Each wait
// carries both lock modes, the locked record (LockData, from INNODB_LOCKS
// or data_locks), the sessions' statements, user, host, database and idle
// time; MariaDB's waits are timed to the microsecond (the status text),
// idle times to the millisecond (PROCESSLIST.TIME_MS). Chains arranges the
// waits as trees from each root blocker with the KILL that would end it,
// for a person to run. MetadataWaits lists metadata-lock waits (DDL behind
// an open transaction) from performance_schema.metadata_locks, which
// MariaDB fills only with the instrument wait/lock/metadata/sql/mdl on
// (EnableMDLInstrument; MySQL 8 has it on). Deadlock.Time is the
// deadlock's time in the server's system time zone (Deadlock.Zone), which
// the status text prints without saying.
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
// counters), INNODB_TRX; when transactions are open, the processlist rows
// and performance_schema's statement history of their sessions only (and
// setup_consumers when a tag stayed unknown); SHOW ENGINE INNODB STATUS
// (and the server's time zone offset when it shows a deadlock);
// setup_instruments and, when the instrument is on, metadata_locks; on
// MySQL 8 data_locks (aggregated on the server) and INNODB_METRICS; the
// lock waits when a transaction waits; the thread pool's two tables when
// there is one. Measured on MariaDB 10.11 on a shared, busy 2-core machine
// (BenchmarkRead -benchtime 100x -count 6, medians, against SELECT 1 on
// the same pool at 0.17 ms): an idle Read takes 1.0 ms (6 round trips'
// time), one with 20 open transactions holding locks 7.2 ms (42),
// ReadSaturation 0.5 ms (3). What costs the server
// more grows with its locks: SHOW ENGINE INNODB STATUS prints every listed
// lock (up to 1 MiB) while holding the lock system's latch, so new lock
// requests wait while it prints, and each call restarts the "per second
// averages" window the status text shows to everyone; MySQL's data_locks
// walks every lock. Parsing a 1 MiB text takes about 3 ms
// (BenchmarkParseStatus). INNODB_TRX, INNODB_LOCKS and INNODB_LOCK_WAITS
// are a cache the server refreshes only after 100 ms without a read of
// them (Read reads the three together, right after each other, so they
// describe one instant): read more often than that (by all readers together) and they never
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
