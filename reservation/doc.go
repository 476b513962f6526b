// Package reservation is holdtime's reference inventory-reservation engine
// for MySQL >= 8.0 and MariaDB >= 10.6: one row per sellable unit in a
// bounded pool, locked with SELECT … FOR UPDATE SKIP LOCKED in short READ
// COMMITTED transactions, every statement tagged with conntag.
//
//	db, err := conntag.Open("mysql", dsn) // any *sql.DB works; conntag attributes hold time
//	engine, err := reservation.New(db, reservation.Config{MeterProvider: mp})
//	err = engine.Migrate(ctx)
//	go engine.Run(ctx) // background refill and expiry
//	res, err := engine.Reserve(ctx, reservation.ReserveParams{ShopID: 1, ReservationID: orderID, Lines: lines})
//	err = engine.Claim(ctx, 1, orderID) // after payment
//
// # Tables
//
// The ledger (inventory_ledger) is the source of truth per shop, item and
// location group: on_hand (stocked, not sold) and claimed (sold). The pool
// (inventory_reservation_units) holds at most Config.PoolSize available
// unit rows per item/group, primary key (shop_id, inventory_item_id,
// inventory_group_id, id), so a locking read of N units takes N record
// locks. Holds are inventory_reservations (one row per reservation id, the
// row claims, releases and the sweeper lock) and
// inventory_reserved_quantities (what each holds). Every unit is exactly one
// of: ledger-only (on_hand - pooled - held), pooled, held or claimed.
//
// # Reserve
//
// One transaction per attempt: one statement fetches the units of every line
// (UNION ALL of one SKIP LOCKED branch per line), one deletes them, two write
// the hold, then Commit. Lock order everywhere: units, then reserved
// quantities, then ledger; returning units to the pool inserts fresh rows,
// which under READ COMMITTED wait on no lock. A short fetch does not mean
// sold out: the engine refills the pool inline under the ledger row lock
// (single flight: concurrent reserves queue on that lock and find the pool
// full), and only the ledger (on_hand - held) can return
// ErrInsufficientStock. A line whose first location group runs out
// continues in the next.
//
// # Claim against expiry
//
// The database clock decides, under the reservation's row lock: a claim that
// locks a hold before expires_at wins; one at or after expires_at returns
// ErrExpired (and expires the hold itself if the sweeper has not). The
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
// ErrRetryable. Every operation is idempotent by reservation id, so a retry
// after a connection lost during COMMIT is safe: Reserve returns the
// reservation made, Claim returns nil.
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
//	holdtime.reservation.operations            holdtime_reservation_operations_total           counter; operation=reserve|claim|release, outcome=ok|insufficient_stock|not_found|expired|conflict|retryable|canceled|error
//	holdtime.reservation.reserve.duration      holdtime_reservation_reserve_duration_seconds   histogram (s); operation, outcome
//	holdtime.reservation.claim.duration        holdtime_reservation_claim_duration_seconds     histogram (s); operation, outcome
//	holdtime.reservation.release.duration      holdtime_reservation_release_duration_seconds   histogram (s); operation, outcome
//	holdtime.reservation.retries               holdtime_reservation_retries_total              counter; operation, reason=deadlock|lock_wait_timeout|connection_lost|contention|other
//	holdtime.reservation.short_reads           holdtime_reservation_short_reads_total          counter: unit fetches that returned fewer units than asked
//	holdtime.reservation.units.skipped         holdtime_reservation_units_skipped_total        counter: units asked for and not returned (locked by others or not pooled)
//	holdtime.reservation.refills               holdtime_reservation_refills_total              counter; mode=inline|background
//	holdtime.reservation.refill.units          holdtime_reservation_refill_units_total         counter: units added to pools
//	holdtime.reservation.refill.wait.duration  holdtime_reservation_refill_wait_duration_seconds histogram (s): reserve time spent in inline refill, lock wait included
//	holdtime.reservation.expiries              holdtime_reservation_expiries_total             counter: holds expired
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
