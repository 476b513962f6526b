// Package migration moves checkout from the Redis reservation design
// (package redisstock) to the SKIP LOCKED engine (package reservation)
// without stopping it, the way it was done in production: per shop, in
// stages, with a kill switch.
//
//   - StageRedis: Redis is the source of truth; MySQL is not touched.
//   - StageShadow: Redis stays the source of truth, and every reservation,
//     claim and release is also made in MySQL (the shadow). The outcomes are
//     compared and every difference counted by kind (Kind), with samples
//     logged. The shadow call runs after the truth's and is bounded by
//     Config.ShadowTimeout: a shadow that fails or hangs never fails the
//     customer's call and delays it by at most that bound.
//   - StageMySQL: MySQL is the source of truth, and Redis is still written
//     (now the shadow), so that the kill switch can send shops back.
//
// The stage of a shop comes from the Rollout: an allow-list and a
// percentage per stage, the percentage taking the lowest-volume shops first
// (Config.ShopsByVolume). The kill switch (KillSwitch: an atomic runtime
// setting, flippable with Router.SetKillSwitch, the HTTP Handler, or
// `holdtime killswitch`) sends every new reservation of a StageMySQL shop
// back to Redis as the source of truth at once, MySQL still shadowed.
//
// In-flight reservations are honoured: a claim or release goes to the
// system that made the reservation, whatever the stage is now, and the
// expiry sweepers of both systems keep running. The route is one row per
// reservation MySQL holds (table migration_routes, truth = mysql or redis),
// written in the engine's reserve transaction (ReserveParams.InTx): it
// exists exactly when MySQL has the hold, and says whether as the source of
// truth or as Redis's shadow. No row: Redis's alone.
//
// # Metrics
//
// Through Config.MeterProvider (none by default), scope
// github.com/holdtime/holdtime/reservation/migration:
//
//	holdtime.migration.operations        holdtime_migration_operations_total          counter; operation, stage, backend=redis|mysql, role=truth|shadow, outcome
//	holdtime.migration.operation.duration holdtime_migration_operation_duration_seconds histogram (s); same attributes
//	holdtime.migration.mismatches        holdtime_migration_mismatches_total          counter; kind, stage
//	holdtime.migration.kill_switch       holdtime_migration_kill_switch               gauge: 1 while on
//	holdtime.migration.shops             holdtime_migration_shops                     gauge; stage: shops known (ShopsByVolume) per stage
package migration
