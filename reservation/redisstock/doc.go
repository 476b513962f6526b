// Package redisstock is the design the reservation engine replaced, kept as
// a second backend so that its failures can be measured and a shop can be
// migrated off it without stopping checkout (package migration).
//
// One Redis key per item and location group holds the available quantity.
// Reserve is one Lua script: it takes every line of a cart from the
// counters of its location groups in order, refuses the whole cart when one
// line cannot be covered (a counter never goes below zero), and remembers
// the reservation in a Redis hash with an expiry. Release and expiry give
// the units back (INCRBY). Claim, after payment, must update the MySQL
// ledger (table redisstock_ledger) and clean up Redis: two systems and no
// transaction spanning them. The order is Config.ClaimOrder:
//
//   - ClaimLedgerFirst decrements the ledger, then marks the hold claimed in
//     Redis. A process that dies in between leaves the hold "claiming"; the
//     claim is driven again (the payment provider redelivers its webhook,
//     the job re-runs) and the ledger is decremented a second time: the
//     ledger counts a unit sold that nobody bought, and it is never offered
//     again. Undersold.
//   - ClaimRedisFirst marks the hold claimed in Redis, then decrements the
//     ledger. A process that dies in between leaves Redis saying "claimed":
//     the claim driven again finds it done, and the ledger never counts a
//     unit that a customer paid for. The ledger offers it again. Oversold.
//
// A Redis restart loses what its persistence did not keep. With RDB
// snapshots only (Debian's redis.conf), a crash brings the counters back to
// the last snapshot: every unit reserved since is sellable again. Oversold.
// The reservation engine keeps the count, the hold and the claim in one
// database and one transaction, and shows 0 / 0 / 0 under the same faults
// (package flashsale, `holdtime flashsale --backend redis --kill-claims`).
//
// Config.BetweenClaimHalves is the fault hook: it runs between the two
// halves of a claim and, by returning an error, ends the claim there, as a
// process killed at that point would.
//
// # Keys
//
// With Config.KeyPrefix p (default "holdtime"), per shop s (a hash tag, so a
// shop's keys share a cluster slot):
//
//	p:{s}:avail:ITEM:GROUP   available units (string, integer)
//	p:{s}:held:ITEM:GROUP    units held by live reservations
//	p:{s}:res:ID             the reservation (hash: _state, _deadline, ITEM:GROUP -> quantity), kept Config.Retention after it ends
//	p:{s}:claiming           set of the reservations whose claim began and has not ended (state "claiming")
//	p:expiry                 sorted set of held reservations by deadline (member "s/ID"): the sweeper's queue
//
// The ledger half of a claim also counts its runs in a receipt (table
// redisstock_claims, kept Config.Retention): a claim driven again still
// decrements the ledger again (the design's flaw, measured), and
// SettleClaim, the repair of a claim stuck "claiming", uses the receipt to
// make the ledger count the sale exactly once.
//
// The expiry queue spans shops, so the package runs on a single Redis (or a
// primary with replicas), not on Redis Cluster.
//
// # Metrics
//
// Through Config.MeterProvider (none by default), scope
// github.com/holdtime/holdtime/reservation/redisstock. Every Redis command
// is timed per conn_tag (the tag of its context, as conntag does for SQL;
// the same Config.Tags) and command (a script by its name, script:reserve):
//
//	holdtime.redis.command.duration   holdtime_redis_command_duration_seconds   histogram (s); conn_tag, command, outcome=ok|nil|error
//	holdtime.redisstock.operations    holdtime_redisstock_operations_total      counter; operation=reserve|claim|release|expire, outcome
//
// The SQL half of a claim goes through the *sql.DB given in Config.DB: open
// it with conntag and its hold time is measured per tag like the engine's.
package redisstock
