// Package migration moves checkout from the Redis reservation design
// (package redisstock) to the SKIP LOCKED engine (package reservation)
// without stopping it, the way it was done in production: per shop, in
// stages, behind a promotion gate, with kill switches.
//
//   - StageRedis: Redis is the source of truth; MySQL is not touched.
//   - StageShadow: Redis stays the source of truth, and MySQL (the shadow)
//     records what Redis decided.
//   - StageMySQL: MySQL is the source of truth, and Redis records what it
//     decided (now the shadow), so that a kill switch can hand the truth
//     back at once.
//
// # One stock
//
// The invariant, enforced by the Router and checked by its tests: whatever
// the stage, the two systems together never promise more units of an
// item/location than the ledger has. Concretely:
//
//   - The shadow mirrors; it never decides. A reservation the truth
//     refused takes nothing in the shadow. One it granted is recorded in
//     the shadow for exactly the truth's lines (each from its own location
//     group). A shadow that cannot record them (too few units: it has
//     drifted) is a KindShadowShort mismatch; the customer's call is not
//     failed. Unless the truth's hold expired before the shadow could
//     record it (a record slower than the hold's TTL): the truth gave its
//     units back and may have granted them again, and the shadow, which
//     never took them, agrees; there is nothing to record, and no
//     mismatch (nor when the shadow then finds no hold to give back).
//   - Claim, release and expiry follow the truth's answer. The shadow
//     claims what the truth claimed; it gives back the units of a hold the
//     truth found expired or released, and never claims one (an ErrExpired
//     truth claim never claims the shadow). A shadow hold lasts
//     Config.ShadowGrace longer than the truth's, so the shadow's own
//     sweeper never ends it first; the router ends it once the truth's
//     sweep did (after every sweep, and before a short shadow gives up).
//   - A cutover moves a shop between stages with the shop fenced: its
//     calls wait (a few milliseconds) while no call of the shop is in
//     flight, and both systems' expiry sweeps are paused. Entering
//     StageShadow backfills MySQL: its sellable units of every item are set
//     to Redis's ledger net of Redis's live holds (never above Redis's own
//     counter), and Redis's live holds are carried over into MySQL, so
//     that they end in both systems like any other. A cutover that hands
//     the truth to the other system (promotion, kill switch) does the same
//     the other way and first reconciles: the system taking the truth must
//     not have drifted.
//
// A mismatch therefore means real divergence (a shadow call that failed or
// timed out, a system that lost data), never a race between the two.
//
// # Rollout, gate and kill switches
//
// The stage a shop should be in comes from the Rollout: an allow-list and a
// percentage per stage, the percentage taking the lowest-volume shops first
// (Config.ShopsByVolume). The gate decides when: a shop moves to StageMySQL
// only after Config.QuietPeriod in StageShadow without a mismatch, and only
// when Reconcile finds no drift at that moment (Gated lists the shops it
// holds back). DryRun shows which shops a rollout would move and their
// volumes.
//
// The global kill switch (SetKillSwitch, the HTTP Handler, `holdtime
// killswitch`) and each shop's own (SetShopKillSwitch) send StageMySQL
// shops back to StageShadow: Redis the source of truth again, MySQL
// shadowed. They refuse (ErrDrifted) to hand the truth to a Redis that has
// drifted from MySQL unless forced, and then repair Redis first.
//
// The rollout, the kill switches and every shop's stage are saved in the
// database (tables migration_settings and migration_shops): a Router
// started later resumes them in Migrate.
//
// # Routing
//
// In-flight reservations are honoured: a claim or release goes to the
// system that made the reservation as the source of truth, whatever the
// stage is now. The route is one row per reservation MySQL holds (table
// migration_routes, truth = mysql or redis), written in the engine's reserve
// transaction: it exists exactly when MySQL has the hold, and says whether
// as the source of truth or as Redis's shadow. No row: Redis's alone. It is
// looked up for every shop that ever left StageRedis (saved), across
// restarts.
//
// # Reconciliation
//
// Reconcile compares, per shop and item/location, both systems' available,
// held and sold units (sold differs legitimately by what Redis sold before
// the shop was shadowed); Repair (Backfill: the same step by its name when
// it starts shadowing) makes the shadow a copy of the truth with the shop
// fenced. Reconcile also names Redis's claims stuck between their halves
// (state "claiming": a claim that died after one of its two systems) and
// those its ledger counted more than once (driven again); Repair settles
// them first (as their truth says: MySQL's state for a Redis shadow's
// claim, sold for Redis's own) so that Redis's ledger counts each sale
// once, and a Redis it made a copy of MySQL gets a ledger that agrees with
// its counters. `holdtime migrate reconcile [--repair]` and `holdtime migrate
// backfill --shop N` run them from the command line.
//
// # Shadow timeout
//
// Config.ShadowTimeout (default 100 ms) bounds a shadow call: the
// customer's call takes at most that much longer than the truth's. The
// default comes from the shadow's latency measured during `holdtime
// flashsale --migrate --shops 3 --buyers 12000 --stock 1000000
// --shadow-timeout 1s` on a 2-core machine shared with other test jobs
// (histogram buckets of holdtime.migration.operation.duration): the MySQL
// shadow's reserve p50 <= 10 ms, p99 <= 100 ms, p99.9 <= 500 ms; the Redis
// shadow's (StageMySQL) p99 <= 200 ms, as slow as the Redis truth's own
// p99 on that machine. 100 ms lets about 1 % of shadow calls on such a
// machine run out of time, far fewer on a database that is not
// overloaded, and adds at most 100 ms to a customer's call. A bound too
// small for the machine costs drift, not correctness: every shadow call
// that runs out of time is a KindShadowError mismatch, the shadow may miss
// the hold, the gate holds the shop back and a kill switch refuses to hand
// the truth back until a Repair. Measure yours with
// holdtime.migration.operation.duration{role="shadow"}.
//
// # Running it
//
// Call Migrate once at start, then Run for the background work (the
// engine's refills, both systems' expiry sweeps, the gate): do not run the
// Engine's or the Store's own Run beside it. One Router per database serves
// a shop at a time: the fence of a cutover is in the process.
//
// # Metrics
//
// Through Config.MeterProvider (none by default; the package registers
// nothing globally: export them through the caller's registry), scope
// github.com/holdtime/holdtime/reservation/migration:
//
//	holdtime.migration.operations         holdtime_migration_operations_total            counter; operation, stage, backend=redis|mysql, role=truth|shadow, outcome
//	holdtime.migration.operation.duration holdtime_migration_operation_duration_seconds  histogram (s); same attributes
//	holdtime.migration.mismatches         holdtime_migration_mismatches_total            counter; kind, stage
//	holdtime.migration.cutovers           holdtime_migration_cutovers_total              counter; from, to, outcome=ok|gated|refused|error
//	holdtime.migration.cutover.duration   holdtime_migration_cutover_duration_seconds    histogram (s); same attributes: how long the shop was fenced
//	holdtime.migration.drifted_shops      holdtime_migration_drifted_shops               gauge: shops whose last reconcile found drift
//	holdtime.migration.item_drift         holdtime_migration_item_drift                  gauge; shop, item, group, figure=available|held: Redis's figure minus MySQL's, for the items the shop's last reconcile (or cutover) found drifted; an item leaves once a reconcile finds it agreeing (or a repair or cutover copies the truth)
//	holdtime.migration.gated_shops        holdtime_migration_gated_shops                 gauge: shops the gate holds in shadow
//	holdtime.migration.kill_switch        holdtime_migration_kill_switch                 gauge: 1 while the global switch is on
//	holdtime.migration.shops              holdtime_migration_shops                       gauge; stage: shops known (ShopsByVolume) per stage
package migration
