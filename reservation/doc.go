// Package reservation is holdtime's reference inventory-reservation engine
// for MySQL >= 8.0 and MariaDB >= 10.6: one row per sellable unit in a
// bounded pool, locked with SELECT … FOR UPDATE SKIP LOCKED in short READ
// COMMITTED transactions, every statement tagged with conntag.
//
//	dsn := "app:secret@tcp(db:3306)/shop?interpolateParams=true" // one round trip per statement
//	db, err := conntag.Open("mysql", dsn)                        // any *sql.DB works; conntag attributes hold time
//	engine, err := reservation.New(db, reservation.Config{MeterProvider: mp})
//	err = engine.Migrate(ctx)
//	go engine.Run(ctx) // background refill and expiry
//	err = engine.Receive(ctx, reservation.StockParams{ItemKey: key, Quantity: 500, AdjustmentID: deliveryID})
//	res, err := engine.Reserve(ctx, reservation.ReserveParams{ShopID: 1, ReservationID: orderID, Lines: lines})
//	err = engine.Claim(ctx, 1, orderID) // after payment
//
// Every call is safe to repeat with the same id after any error (see Errors
// and retries).
//
// # Tables
//
// The ledger (inventory_ledger) is the source of truth per shop, item and
// location group: on_hand (stocked, not sold) and claimed (sold). The pool
// (inventory_reservation_units) holds available unit rows per item/group,
// primary key (shop_id, inventory_item_id, inventory_group_id, id), so a
// locking read of N units takes N record locks. Holds are
// inventory_reservations (one row per reservation id, the row claims,
// releases and the sweeper lock) and inventory_reserved_quantities (what
// each holds). Every unit is exactly one of: ledger-only (on_hand - pooled -
// held), pooled, held or claimed. inventory_adjustments records every stock
// change, inventory_receipts the refills and pruning batches (see Errors
// and retries), and inventory_pools has one row per pool, its lock.
//
// # Pool bound
//
// A pool holds at most Config.PoolSize units. Refills, releases and
// expiries add units to it, and each first locks the pool's row and counts
// it: a refill tops it up to PoolSize, a release or expiry returns as many
// units as fit and leaves the rest in the ledger (ledger-only: still
// sellable, pooled by the next refill, which the refiller runs when the pool
// falls below half). The one exception is a cart line larger than PoolSize:
// its inline refill pools what the line needs, and the pool exceeds
// PoolSize until that reserve takes them. Reserves and negative Adjusts
// only take units away.
//
// # Reserve
//
// One transaction per attempt: one statement fetches the units of every line
// (UNION ALL of one SKIP LOCKED branch per item and location group: lines
// on the same item/group share one branch, because SKIP LOCKED does not skip
// the rows the transaction itself has locked), one deletes them, two write
// the hold, then Commit. A short fetch does not mean sold out: the engine
// refills the pool inline under the ledger row lock (single flight: the
// engine's concurrent reserves of the item wait in memory for that one
// refill's result, not on the lock, and other engines queue on the lock and
// find the pool full), and only
// the ledger (on_hand - held) can return ErrInsufficientStock. A line whose
// first location group runs out continues in the next.
//
// Round trips: the 4 statements plus BEGIN (database/sql sends SET
// TRANSACTION ISOLATION LEVEL and START TRANSACTION) and COMMIT. Open the
// pool with interpolateParams=true: without it go-sql-driver/mysql runs
// every statement with arguments as prepare, execute and close, three round
// trips where one does, all of them inside the transaction, holding its
// locks. (The driver refuses interpolateParams with the multi-byte
// charsets big5, gbk, sjis and cp932; use utf8mb4.)
//
// # Lock order
//
// Locking reads of units come first, before any other lock of the
// transaction: a reserve locks units, then writes its reservation and
// reserved quantities (an inline refill is a transaction of its own, run
// after the short attempt rolled back); a negative
// Adjust locks the ledger row before its units but takes those with SKIP
// LOCKED, which never waits. Release, expiry and refill add units last,
// after the reservation or ledger row lock, but only as fresh rows: under
// READ COMMITTED an insert of a new auto-increment row takes no gap lock
// and waits on no lock a reserve holds. So no transaction waits for a unit
// while holding a lock another waits on, and units close no cycle.
// Claims lock ledger rows in (item, group) order. The pool rows
// (inventory_pools) are the last lock a transaction takes, in (shop, item,
// group) order, after the ledger row (refill) or the reservation rows
// (release, expiry); a transaction that holds one waits for nothing but the
// next pool row, so they close no cycle either. The pool count under that
// lock is a subquery, which the locking read does not lock (on MySQL and
// MariaDB a subquery's rows are locked only by a locking clause of its
// own), so reserves keep taking units meanwhile.
//
// # Server settings
//
// Unit inserts are multi-row INSERT … VALUES ("simple inserts"). Under
// innodb_autoinc_lock_mode=1 (MariaDB's default) those take only a short
// auto-increment mutex, but an INSERT … SELECT (bulk insert) takes the
// table-level AUTO-INC lock until the statement ends, which serialises the
// refills, releases and expiries of every item; and while one is held,
// simple inserts queue behind it too. Code of your own that bulk-inserts
// into inventory_reservation_units, or mode 0, brings that back. Prefer
// innodb_autoinc_lock_mode=2 (MySQL 8's default): no table-level lock at
// all. Mode 2 is safe with row-based or mixed binary logging, not with
// binlog_format=STATEMENT.
//
// # Claims and releases in groups
//
// A claim updates its item's ledger row, and a transaction that updates a
// row holds its lock until COMMIT: one claim at a time per item, at the
// speed of COMMITs. So concurrent Claim calls of one shop form groups: the
// calls that arrive while a claim transaction is in flight wait, and the
// next transaction claims all of them (at most 100): one locking read of
// their reservation rows (in primary key order), one read and one delete
// of their reserved quantities, one update of their states (each marked
// with its own call's token), and last, just before COMMIT, one update of
// every ledger row they touch, so the ledger lock is held for one
// statement and a COMMIT per group instead of per claim. The ledger stays
// the source of truth. A member whose hold is due is expired in a
// transaction of its own (see Claim against expiry); one that is claimed,
// released or missing gets its answer from the same read. Releases are
// grouped the same way, their units returned to the pools last. A group
// that fails (deadlock, lost connection, a lost COMMIT reply) fails each
// member it would have changed, and each one retries on its own with its
// own token, as a lone call would: every claim and release still takes
// effect exactly once. A group runs on a context no single member's
// cancellation ends, bounded by Config.RetryBudget; a call whose context
// ends while it waits for a group leaves, nothing done.
//
// # Claim against expiry
//
// The database clock decides, under the reservation's row lock: a claim that
// locks a hold before expires_at wins; one at or after expires_at returns
// ErrExpired (and expires the hold itself if the sweeper has not, counted
// as an expiry). The
// sweeper (ExpireDue, run by Run) selects due holds with SKIP LOCKED, so it
// never waits for a claim, and finds the hold claimed afterwards.
//
// # Background work and retention
//
// Run refills the pools of its working set: items used within
// Config.RefillIdle (at most 10,000), at once when a reserve leaves one
// below half, and every Config.RefillInterval otherwise; idle items are
// forgotten, so its work follows current demand. It expires due holds and
// deletes reservation rows that ended more than Config.Retention (default
// 24 h) ago, which bounds the window in which a retry with the same
// reservation id gets the same answer.
//
// # Errors and retries
//
// Deadlocks (1213), lock wait timeouts (1205), lost or killed connections
// and contention are retried with jittered backoff within
// Config.RetryBudget, then returned as a *RetryableError matching
// ErrRetryable: nothing was changed, and calling again is safe.
//
// A connection lost while COMMIT was in flight (or ctx ending then) leaves
// the outcome unknown: the server may have committed and the reply been
// lost, or never seen the COMMIT. Every write records a random token of
// its operation in a row it writes (the reservation row for Reserve,
// Claim, Release and expiries; the change's row in inventory_adjustments
// for Receive and Adjust; a row in inventory_receipts for refills and
// pruning batches). The retry locks what the lost attempt locked, which
// waits until that transaction has ended on the server, and reads the
// token: the engine then knows, and every write takes effect exactly once.
// Each operation returns what happened: Reserve the reservation, Claim nil
// (or ErrExpired when it expired the hold), Release nil, ExpireDue and
// PruneEnded the rows they changed, Refill the units it pooled, Receive and
// Adjust nil. Stats and the metrics count what committed, including a write
// whose reply was lost.
//
// When the database stays unreachable through Config.RetryBudget (or ctx
// ends) while an outcome is unknown, the call returns an
// *OutcomeUnknownError matching ErrOutcomeUnknown, counted in the metric
// holdtime.reservation.operations with outcome=unknown. Calling again with
// the same arguments is then safe for Reserve, Claim and Release (same
// reservation id) and for Receive and Adjust with a StockParams.AdjustmentID:
// the error also matches ErrRetryable, and the retry returns the outcome
// without applying anything twice (and, on the same engine, counts the
// first call's write in Stats then). Receive and Adjust without an
// AdjustmentID cannot be told apart from a new change: their error does not
// match ErrRetryable, and the ledger (Available) says whether it was
// applied. Ids are remembered for Config.Retention. The background work
// (ExpireDue, Refill, PruneEnded) is safe to run again, but nothing finds
// a write of theirs whose outcome stayed unknown: the counters miss it.
//
// # Strategies
//
// StrategySkipLocked is the engine. StrategyForUpdate (plain FOR UPDATE)
// and StrategyCounter (UPDATE … SET available = available - ? on one row
// per item/group) exist behind the same API only as baselines for the
// benchmarks and the flash-sale harness (package flashsale).
//
// # Metrics
//
// Through Config.MeterProvider (none by default), scope
// github.com/holdtime/holdtime/reservation. Every series carries the
// attribute strategy. Names, and their Prometheus form through the OpenTelemetry
// Prometheus exporter:
//
//	holdtime.reservation.operations            holdtime_reservation_operations_total           counter; operation=reserve|claim|release, outcome=ok|insufficient_stock|not_found|expired|conflict|unknown|retryable|canceled|error
//	holdtime.reservation.reserve.duration      holdtime_reservation_reserve_duration_seconds   histogram (s); operation, outcome
//	holdtime.reservation.claim.duration        holdtime_reservation_claim_duration_seconds     histogram (s); operation, outcome
//	holdtime.reservation.release.duration      holdtime_reservation_release_duration_seconds   histogram (s); operation, outcome
//	holdtime.reservation.retries               holdtime_reservation_retries_total              counter; operation, reason=deadlock|lock_wait_timeout|connection_lost|contention|other
//	holdtime.reservation.short_reads           holdtime_reservation_short_reads_total          counter: unit fetches that returned fewer units than asked
//	holdtime.reservation.units.skipped         holdtime_reservation_units_skipped_total        counter: units asked for and not returned (locked by others or not pooled)
//	holdtime.reservation.refills               holdtime_reservation_refills_total              counter; mode=inline|background: every refill run, whether it added units or not
//	holdtime.reservation.refill.units          holdtime_reservation_refill_units_total         counter: units added to pools
//	holdtime.reservation.refill.wait.duration  holdtime_reservation_refill_wait_duration_seconds histogram (s): reserve time spent in inline refill, lock wait included
//	holdtime.reservation.expiries              holdtime_reservation_expiries_total             counter: holds expired (by the sweeper, or by a claim that found them due)
//	holdtime.reservation.pruned                holdtime_reservation_pruned_total               counter: ended reservation rows deleted after Config.Retention
//	holdtime.reservation.pool.depth            holdtime_reservation_pool_depth                 gauge: pooled units of the working set, live (see below)
//
// The pool depth is read at collection time from memory, never from the
// database: a refill counts an item's pool under its ledger lock, and the
// engine adjusts that count by every reserve, release and expiry it
// commits. With one engine per shop it is exact; with several, each one's
// gauge misses the others' takes until its next recount (every 10
// Config.RefillInterval at most, or when it believes the pool below half).
// Counting in the database at scrape time would cost a range scan of up to
// Config.PoolSize rows per item in the working set on every scrape.
//
// Connection hold time per tag comes from conntag's own metrics; the tags
// are Config.Tags (inventory_reserve, inventory_claim, inventory_release,
// inventory_refill, inventory_expire, inventory_stock).
package reservation
