// Package dashboards builds holdtime's Grafana dashboards as code, with
// grafana-foundation-sdk, and knows every query they run.
//
// All returns every dashboard as Grafana JSON; Write puts them in a
// directory (what `holdtime dashboards --out DIR` does); Queries lists every
// panel's every PromQL expression with its dashboard and panel title, and
// Substitute replaces the dashboard variables in one, so that tests can run
// each against a real Prometheus. The generated JSON is committed under
// dashboards/json (Grafana's provisioning in the docker-compose stack reads
// it from there) and a test fails when it drifts from the code; regenerate
// it with
//
//	go generate ./dashboards
//
// The dashboards:
//
//   - holdtime-occupancy, "Connection occupancy by tag": the headline view.
//     Occupancy is rate(hold seconds): the connections a tag keeps busy
//     (Little's law), one figure per layer: app (conntag's own metrics:
//     hold, idle hold, active, long holds, pool waits), proxy and server
//     (the collector's holdtime_collector_layer_* figures, each target's
//     headline source, added up over targets), side by side with how to
//     read a divergence, the headline source of each layer, and one
//     cross-check panel of every source apart.
//   - holdtime-proxysql, "ProxySQL backend pool and pins": used and free
//     backends per hostgroup and server, errors, latency, get failures, and
//     the sessions that pin a backend (multiplexing off) by tag and reason.
//   - holdtime-mysql, "MySQL server: transactions and locks by tag": open
//     transactions, their age and rows locked per tag, and lock waits by
//     the tags of waiter and blocker.
//   - holdtime-reservation, "Reservation engine": reserve, claim and release
//     rates and latency, contention (retries, short reads, skipped units),
//     pool depth, refills and refill wait, expiries, and the oversell guard
//     (reserves the ledger refused).
//
// No query adds the collector's per-source figures of several sources
// together (one hold is seen by up to four sources of a layer): a test
// over every query, variable and alert rule fails on such a sum, and the
// real-Prometheus test checks that the per-layer totals the dashboards
// compute equal the collector's own within 5 %.
//
// Every dashboard has a datasource variable (any Prometheus), the
// instance or target it looks at, and a tag filter; all are multi-value with
// an "All" of ".*", so every matcher is a regular expression match.
package dashboards

//go:generate go run ../cmd/holdtime dashboards --out json
