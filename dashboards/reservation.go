package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// Reservation engine metric names (reservation/doc.go).
const (
	resOps         = "holdtime_reservation_operations_total"
	resReserveDur  = "holdtime_reservation_reserve_duration_seconds_bucket"
	resClaimDur    = "holdtime_reservation_claim_duration_seconds_bucket"
	resReleaseDur  = "holdtime_reservation_release_duration_seconds_bucket"
	resRetries     = "holdtime_reservation_retries_total"
	resShortReads  = "holdtime_reservation_short_reads_total"
	resSkipped     = "holdtime_reservation_units_skipped_total"
	resRefills     = "holdtime_reservation_refills_total"
	resRefillUnits = "holdtime_reservation_refill_units_total"
	resRefillWait  = "holdtime_reservation_refill_wait_duration_seconds_bucket"
	resExpiries    = "holdtime_reservation_expiries_total"
	resPoolDepth   = "holdtime_reservation_pool_depth"
	// The migration from the Redis design (reservation/migration, reservation/redisstock).
	migOps        = "holdtime_migration_operations_total"
	migDur        = "holdtime_migration_operation_duration_seconds_bucket"
	migMismatches = "holdtime_migration_mismatches_total"
	migKill       = "holdtime_migration_kill_switch"
	migShops      = "holdtime_migration_shops"
	redisCmdSum   = "holdtime_redis_command_duration_seconds_sum"
	selStrategy   = `strategy=~"$strategy"`
)

// quantiles is p50, p95 and p99 of a histogram over $__rate_interval.
func quantiles(bucket string, matchers ...string) []q {
	var out []q
	for _, x := range []struct{ q, name string }{{"0.5", "p50"}, {"0.95", "p95"}, {"0.99", "p99"}} {
		out = append(out, q{"histogram_quantile(" + x.q + ", sum by (le) (" + rate(bucket, matchers...) + "))", x.name})
	}
	return out
}

func reservationEngine() *dashboard.DashboardBuilder {
	eng := []string{selInstance, selStrategy}
	opRate := func(op string, extra ...string) string {
		return "sum(" + rate(resOps, append([]string{selInstance, selStrategy, `operation="` + op + `"`}, extra...)...) + ")"
	}
	b := newDashboard("holdtime-reservation", "holdtime: reservation engine",
		"holdtime's SKIP LOCKED inventory reservation engine: throughput, latency, contention, pool depth, refills, expiries and the oversell guard.").
		WithVariable(labelVariable(varInstance, "instance", resOps, "The app instances running the engine.")).
		WithVariable(labelVariable(varStrategy, "strategy", resOps+`{instance=~"$instance"}`, "skip_locked is the engine; for_update and counter are benchmark baselines.")).
		WithVariable(labelVariable(varTag, "conn_tag", appHold+`{instance=~"$instance", conn_tag=~"inventory_.*"}`, "The engine's tags (Config.Tags)."))

	b = b.WithRow(row("Throughput"))
	for _, p := range []panel{{
		title:       "Reserves/s",
		description: "Successful reserves per second.",
		unit:        unitPerSec,
		queries:     []q{{opRate("reserve", `outcome="ok"`), "reserve ok"}},
	}, {
		title:       "Claims/s",
		description: "Successful claims (after payment) per second.",
		unit:        unitPerSec,
		queries:     []q{{opRate("claim", `outcome="ok"`), "claim ok"}},
	}, {
		title:       "Reserve success",
		description: "Share of reserves that succeeded. Refusals by the ledger (sold out) are correct answers, not failures: they are excluded.",
		unit:        unitPercent,
		queries:     []q{{opRate("reserve", `outcome="ok"`) + " / " + opRate("reserve", `outcome!="insufficient_stock"`), "ok share"}},
		thresholds:  thresholds(red, step{0.95, orange}, step{0.99, green}),
	}, {
		title:       "Oversell guard: refused by the ledger/s",
		description: "Reserves the ledger refused (insufficient stock): the pool never decides sold out, the ledger does, so a unit is never sold twice. Expected during a sell-out; unexpected while stock remains.",
		unit:        unitPerSec,
		queries:     []q{{opRate("reserve", `outcome="insufficient_stock"`), "insufficient stock"}},
		thresholds:  thresholds(green, step{1, yellow}),
	}} {
		b = b.WithPanel(statPanel(p))
	}
	for _, p := range []panel{{
		title:       "Operations by outcome",
		description: "Reserve, claim and release calls per second by outcome. retryable means the retry budget ran out; conflict and expired are claims that lost to a release or to expiry.",
		unit:        unitPerSec,
		queries:     []q{{"sum by (operation, outcome) (" + rate(resOps, eng...) + ")", "{{operation}} {{outcome}}"}},
	}, {
		title:       "Oversell guard: ledger refusals and lost claims",
		description: "Reserves refused by the ledger (insufficient_stock) and claims refused because the hold expired or was released: the engine's guards against selling a unit twice.",
		unit:        unitPerSec,
		queries: []q{{
			"sum by (operation, outcome) (" + rate(resOps, selInstance, selStrategy, `outcome=~"insufficient_stock|expired|conflict"`) + ")", "{{operation}} {{outcome}}",
		}},
	}} {
		b = b.WithPanel(timeSeries(p))
	}

	b = b.WithRow(row("Latency"))
	for _, p := range []panel{{
		title:          "Reserve latency",
		description:    "Duration of Reserve calls, retries and inline refills included.",
		unit:           unitSeconds,
		queries:        quantiles(resReserveDur, eng...),
		thresholds:     thresholds(green, step{0.05, orange}, step{0.2, red}),
		showThresholds: true,
		width:          8,
	}, {
		title:          "Claim latency",
		description:    "Duration of Claim calls.",
		unit:           unitSeconds,
		queries:        quantiles(resClaimDur, eng...),
		thresholds:     thresholds(green, step{0.05, orange}, step{0.2, red}),
		showThresholds: true,
		width:          8,
	}, {
		title:          "Release latency",
		description:    "Duration of Release calls.",
		unit:           unitSeconds,
		queries:        quantiles(resReleaseDur, eng...),
		thresholds:     thresholds(green, step{0.05, orange}, step{0.2, red}),
		showThresholds: true,
		width:          8,
	}} {
		b = b.WithPanel(timeSeries(p))
	}

	b = b.WithRow(row("Contention"))
	for _, p := range []panel{{
		title:       "Retries by reason",
		description: "Attempts repeated after a deadlock, lock wait timeout, lost connection or contention (units locked by in-flight reserves).",
		unit:        unitPerSec,
		queries:     []q{{"sum by (operation, reason) (" + rate(resRetries, eng...) + ")", "{{operation}} {{reason}}"}},
		thresholds:  thresholds(green, step{1, orange}, step{10, red}),
	}, {
		title:       "Short reads and skipped units",
		description: "Unit fetches that returned fewer units than asked, and the units SKIP LOCKED passed over (locked by others or not pooled). A short read is contention or an empty pool, never sold out by itself.",
		unit:        unitPerSec,
		queries: []q{
			{"sum(" + rate(resShortReads, eng...) + ")", "short reads"},
			{"sum(" + rate(resSkipped, eng...) + ")", "units skipped"},
		},
	}} {
		b = b.WithPanel(timeSeries(p))
	}

	b = b.WithRow(row("Pool and refills"))
	for _, p := range []panel{{
		title:       "Pool depth",
		description: "Pooled units of the items in the engine's working set. Near zero under load, reserves refill inline and wait for it.",
		unit:        unitCount,
		queries:     []q{{"sum by (instance, strategy) (" + resPoolDepth + sel(eng...) + ")", "{{instance}} {{strategy}}"}},
		thresholds:  thresholds(red, step{10, orange}, step{100, green}),
		width:       8,
	}, {
		title:       "Refills by mode",
		description: "Refills per second: inline (on the reserve path, a reserve waits) or background (Run).",
		unit:        unitPerSec,
		queries: []q{
			{"sum by (mode) (" + rate(resRefills, eng...) + ")", "{{mode}}"},
			{"sum(" + rate(resRefillUnits, eng...) + ")", "units added/s"},
		},
		width: 8,
	}, {
		title:          "Refill wait",
		description:    "Time a reserve spent in inline refill, waiting for the item's refill lock included.",
		unit:           unitSeconds,
		queries:        quantiles(resRefillWait, eng...),
		thresholds:     thresholds(green, step{0.02, orange}, step{0.1, red}),
		showThresholds: true,
		width:          8,
	}, {
		title:       "Expiries",
		description: "Holds returned to the pool because they expired before a claim.",
		unit:        unitPerSec,
		queries:     []q{{"sum(" + rate(resExpiries, eng...) + ")", "expired"}},
	}, {
		title:       "Connection occupancy of the engine's tags",
		description: "Connections the engine's operations keep busy (conntag): reserves should be short holds; a growing figure here means the engine, not the rest of the checkout, holds the pool.",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag) (" + rate(appHold, selInstance, selTag) + ")", "{{conn_tag}}"}},
		stack:       true,
	}} {
		b = b.WithPanel(timeSeries(p))
	}
	return migrationRow(b)
}

// migrationRow is the "Migration from Redis" row: a shop's move from the
// Redis design to the engine (package migration), per stage and backend.
func migrationRow(b *dashboard.DashboardBuilder) *dashboard.DashboardBuilder {
	b = b.WithRow(row("Migration from Redis"))
	for _, p := range []panel{{
		title:       "Kill switch",
		description: "1 while the kill switch sends new reservations of shops switched to MySQL back to Redis (holdtime killswitch, or POST /killswitch?on= on the app's metrics server).",
		unit:        unitCount,
		queries:     []q{{"max(" + migKill + sel(selInstance) + ")", "kill switch"}},
		thresholds:  thresholds(green, step{1, red}),
		width:       6,
	}, {
		title:       "Shops per stage",
		description: "Shops of the rollout's volume ranking per stage, the kill switch applied: redis (Redis the truth), shadow (Redis the truth, MySQL shadowed), mysql (MySQL the truth, Redis still written).",
		unit:        unitCount,
		queries:     []q{{"sum by (stage) (" + migShops + sel(selInstance) + ")", "{{stage}}"}},
		width:       6,
	}, {
		title:       "Mismatches/s",
		description: "Differences between the source of truth and the shadow per second. Each should trace to a fault (a shadow timeout, a restart, a killed connection); a steady rate without one means the two systems disagree about stock.",
		unit:        unitPerSec,
		queries:     []q{{"sum(" + rate(migMismatches, selInstance) + ")", "mismatches"}},
		thresholds:  thresholds(green, step{0.01, orange}),
		width:       12,
	}} {
		b = b.WithPanel(statPanel(p))
	}
	for _, p := range []panel{{
		title:       "Reservations by stage and backend",
		description: "Reserves per second by the shop's stage, the backend and its role (truth answers the customer, shadow is compared).",
		unit:        unitPerSec,
		queries: []q{{"sum by (stage, backend, role) (" + rate(migOps, selInstance, `operation="reserve"`) + ")",
			"{{stage}} {{backend}} {{role}}"}},
	}, {
		title:       "Mismatches by kind",
		description: "shadow_refused / truth_refused: one system sold out, the other not; lines: different quantities or groups; shadow_error: the shadow failed or timed out (the customer's call went on); claim / release: the two ended a hold differently.",
		unit:        unitPerSec,
		queries:     []q{{"sum by (kind, stage) (" + rate(migMismatches, selInstance) + ")", "{{kind}} ({{stage}})"}},
	}, {
		title:       "Latency p99 by backend and role",
		description: "p99 of reservation calls per backend and role. A shadow's is bounded by Config.ShadowTimeout; the customer waits for the truth's plus at most that bound.",
		unit:        unitSeconds,
		queries: []q{{"histogram_quantile(0.99, sum by (le, backend, role) (" + rate(migDur, selInstance) + "))",
			"{{backend}} {{role}}"}},
	}, {
		title:       "Errors and timeouts by backend",
		description: "Calls that failed (error) or ran out of time (timeout) per backend and role: a truth's reach the customer, a shadow's only the mismatch count.",
		unit:        unitPerSec,
		queries: []q{{"sum by (operation, backend, role, outcome) (" + rate(migOps, selInstance, `outcome=~"error|timeout"`) + ")",
			"{{operation}} {{backend}} {{role}} {{outcome}}"}},
	}, {
		title:       "Redis command time by tag",
		description: "Seconds per second spent in Redis commands per conn_tag (the Redis design's counterpart of connection occupancy), timed around every command by the client.",
		unit:        unitConnBusy,
		queries:     []q{{"sum by (conn_tag) (" + rate(redisCmdSum, selInstance) + ")", "{{conn_tag}}"}},
		stack:       true,
	}} {
		b = b.WithPanel(timeSeries(p))
	}
	return b
}
