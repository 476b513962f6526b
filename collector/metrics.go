package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdtime/holdtime/collector/internal/trxjoin"
)

// metricsCollector exposes the store at scrape time and keeps no state of its
// own, as client_golang's dbstats collector does: one lock of the store per
// scrape, no per-tag metric objects to create or forget.
type metricsCollector struct {
	s *store

	hold, idle, active, stmts, errs *prometheus.Desc
	sessions, pinned, pinnedSecs    *prometheus.Desc
	trx, trxAge, rowsLocked, waits  *prometheus.Desc
	up, lastSuccess, overflow, bad  *prometheus.Desc
	state, degraded                 *prometheus.Desc

	layerHold, layerIdle, layerActive *prometheus.Desc
	layerStmts, layerErrs             *prometheus.Desc
	wait, layerWait                   *prometheus.Desc
	locks, deadlocks                  *prometheus.Desc
	layerSessions, layerSource        *prometheus.Desc
	joinHold                          *prometheus.Desc
}

func newMetricsCollector(s *store) *metricsCollector {
	tagLabels := []string{"target", "source", "conn_tag"}
	pinLabels := []string{"target", "conn_tag", "reason"}
	srcLabels := []string{"target", "source"}
	layerLabels := []string{"target", "layer", "conn_tag"}
	d := prometheus.NewDesc
	const perSource = " Per source, for cross-checks: one hold is seen by several sources of a layer, so never sum this over source; use holdtime_collector_layer_*."
	return &metricsCollector{
		s:      s,
		hold:   d("holdtime_collector_hold_seconds_total", "Seconds connections were held, per tag: backend hold at ProxySQL, server-side hold at MySQL, pool hold in the app (otlp)."+perSource, tagLabels, nil),
		idle:   d("holdtime_collector_idle_hold_seconds_total", "Seconds connections were held with no statement running, per tag."+perSource, tagLabels, nil),
		active: d("holdtime_collector_active_seconds_total", "Seconds spent inside statements, per tag."+perSource, tagLabels, nil),
		stmts:  d("holdtime_collector_statements_total", "Statements per tag (events log, digests, server statement history, app spans)."+perSource, tagLabels, nil),
		errs:   d("holdtime_collector_statement_errors_total", "Statements that failed, per tag."+perSource, tagLabels, nil),

		wait:      d("holdtime_collector_wait_seconds_total", "Seconds statements waited for a connection, per tag: at ProxySQL, for a backend (sessions with no backend in state Connect; the tag comes from what the session ran next, the events log or an app span, else unknown). Not part of hold."+perSource, tagLabels, nil),
		layerWait: d("holdtime_collector_layer_wait_seconds_total", "Seconds statements waited for a connection per tag at a layer (proxy: for a ProxySQL backend), from the layer's headline source: the tags that suffer, beside holdtime_collector_layer_hold_seconds_total, the tags that cause it.", layerLabels, nil),

		locks:     d("holdtime_mysql_locks", "InnoDB locks held (state=held) and waited for (state=waiting) by open transactions, per tag and kind (record, gap, next_key, insert_intention, supremum, table_*): rows for record kinds, tables for table kinds. Read every LocksInterval (source mysql_locks); MariaDB lists locks only with innodb_status_output_locks=ON (holdtime_mysql_lock_output_enabled).", []string{"target", "conn_tag", "kind", "state"}, nil),
		deadlocks: d("holdtime_mysql_deadlocks_total", "InnoDB deadlocks, each counted once, by the tag of the victim transaction (rolled back) and of the other; unknown, unknown for deadlocks the server counted whose detail was overwritten before a read.", []string{"target", "victim_tag", "other_tag"}, nil),

		layerHold:     d("holdtime_collector_layer_hold_seconds_total", "Seconds connections were held per tag at a layer (app: client pool, proxy: ProxySQL backend, server: MySQL connection), from the layer's headline source (holdtime_collector_layer_source). rate() is occupancy; sum over target, never over layer.", layerLabels, nil),
		layerIdle:     d("holdtime_collector_layer_idle_hold_seconds_total", "Seconds connections were held with no statement running, per tag and layer, from the layer's headline source.", layerLabels, nil),
		layerActive:   d("holdtime_collector_layer_active_seconds_total", "Seconds spent inside statements, per tag and layer, from the layer's headline source.", layerLabels, nil),
		layerStmts:    d("holdtime_collector_layer_statements_total", "Statements per tag and layer, from the layer's headline source.", layerLabels, nil),
		layerErrs:     d("holdtime_collector_layer_statement_errors_total", "Failed statements per tag and layer, from the layer's headline source.", layerLabels, nil),
		layerSessions: d("holdtime_collector_layer_sessions", "Sessions holding a connection now, per tag and layer (proxy: from stats_mysql_processlist, server: from the processlist).", layerLabels, nil),
		layerSource:   d("holdtime_collector_layer_source", "1 for the headline source of each target and layer: the source of holdtime_collector_layer_* (exact before sampled, sampled before inferred).", []string{"target", "layer", "source"}, nil),

		sessions:   d("holdtime_collector_sessions", "Sessions currently holding a backend (ProxySQL) or server connection (MySQL), per tag."+perSource, tagLabels, nil),
		pinned:     d("holdtime_collector_pinned_sessions", "ProxySQL sessions idle with a backend attached, per tag and the reason multiplexing is off.", pinLabels, nil),
		pinnedSecs: d("holdtime_collector_pinned_seconds_total", "Seconds ProxySQL sessions were idle with a backend attached, per tag and reason.", pinLabels, nil),

		trx:        d("holdtime_mysql_transactions", "Open InnoDB transactions per tag.", []string{"target", "conn_tag"}, nil),
		trxAge:     d("holdtime_mysql_transaction_max_age_seconds", "Age of the oldest open InnoDB transaction per tag.", []string{"target", "conn_tag"}, nil),
		rowsLocked: d("holdtime_mysql_rows_locked", "Rows locked by open InnoDB transactions per tag.", []string{"target", "conn_tag"}, nil),
		waits:      d("holdtime_mysql_lock_waits", "InnoDB lock waits by the tag of the waiting and of the blocking session.", []string{"target", "waiter_tag", "blocker_tag"}, nil),

		up:          d("holdtime_source_up", "1 when the source answers (state up or degraded); 0 when it is down (its gauges are then absent, not zero) or waiting (before its first poll; OTLP: no export yet or for holdtime's PushIdle).", srcLabels, nil),
		lastSuccess: d("holdtime_source_last_success_timestamp_seconds", "Unix time of the source's last successful poll (OTLP: last accepted export).", srcLabels, nil),
		state:       d("holdtime_source_state", "1 for the source's current state, 0 for the others: up, degraded (answers, figures incomplete: see holdtime_source_degraded), down, waiting (nothing to report yet, not a failure).", []string{"target", "source", "state"}, nil),
		degraded:    d("holdtime_source_degraded", "1 for each reason an up source's figures are incomplete (for example history_long_consumer_off); /api/v1/top says what to do.", []string{"target", "source", "reason"}, nil),
		overflow:    d("holdtime_collector_tags_overflow_total", "Observations (app spans, events log holds, sampled rows, polls' per-tag figures) whose tag went to conn_tag=\"overflow\" because the source had reached the cap on distinct tags (--max-tags). A tag unseen for 5 m frees its slot and its per-tag series leave /metrics.", srcLabels, nil),
		joinHold:    d("holdtime_collector_server_join_hold_seconds_total", "Seconds of ProxySQL idle backend hold (a session idle in a transaction or pinned) the proxy↔server join named, by quality: exact (the server's thread and event order name the tag), inferred (time broke a tie the server's evidence left), unknown (nothing the server shows names it; the hold goes to conn_tag=\"unknown\").", []string{"target", "quality"}, nil),
		bad:         d("holdtime_collector_malformed_rows_total", "Rows and lines counted and skipped because they could not be parsed.", srcLabels, nil),
	}
}

// Describe sends every descriptor: the set is fixed, so the registry can
// check names and label sets once.
func (m *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.hold, m.idle, m.active, m.stmts, m.errs, m.sessions, m.pinned, m.pinnedSecs,
		m.trx, m.trxAge, m.rowsLocked, m.waits, m.up, m.lastSuccess, m.overflow, m.bad, m.state, m.degraded,
		m.layerHold, m.layerIdle, m.layerActive, m.layerStmts, m.layerErrs, m.layerSessions, m.layerSource,
		m.wait, m.layerWait, m.locks, m.deadlocks, m.joinHold} {
		ch <- d
	}
}

// Collect reads the store (and expires its stale tags, under the same lock).
func (m *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for tl, src := range s.headline {
		ch <- prometheus.MustNewConstMetric(m.layerSource, prometheus.GaugeValue, 1, tl.target, string(tl.layer), string(src))
	}
	for k, sr := range s.series {
		// A scrape drops the tags unseen for longer than tagTTL, so that a
		// quiet series loses them too: their counters leave /metrics, which
		// Prometheus reads as a series that stopped (a staleness marker at
		// the next scrape; a tag that comes back starts again from zero,
		// which rate() and increase() read as a counter reset). Every
		// series that stays only grows.
		sr.expire(now.Unix())
		m.collectStatus(ch, k, sr, s.status(k, sr, now))
		if s.isHeadline(k) {
			m.collectLayer(ch, k, sr)
		}
		if l := k.source.Layer(); sr.gauges != nil && l != "" && gaugeSource(l) == k.source && s.headline[targetLayer{k.target, l}] != "" {
			for tag, n := range sr.gauges.sessions {
				ch <- prometheus.MustNewConstMetric(m.layerSessions, prometheus.GaugeValue, float64(n), k.target, string(l), tag)
			}
		}
		m.collectTags(ch, k, sr)
		if sr.gauges != nil {
			m.collectGauges(ch, k, sr.gauges)
		}
	}
}

// collectStatus sends a series' health and its rejected input.
func (m *metricsCollector) collectStatus(ch chan<- prometheus.Metric, k seriesKey, sr *series, st SourceStatus) {
	t, src, g := k.target, string(k.source), prometheus.GaugeValue
	ch <- prometheus.MustNewConstMetric(m.up, g, b2f(st.Up), t, src)
	for _, state := range SourceStates {
		ch <- prometheus.MustNewConstMetric(m.state, g, b2f(st.State == state), t, src, state)
	}
	for _, dg := range sr.degraded {
		ch <- prometheus.MustNewConstMetric(m.degraded, g, 1, t, src, dg.Reason)
	}
	if !sr.lastSuccess.IsZero() {
		ch <- prometheus.MustNewConstMetric(m.lastSuccess, g, float64(sr.lastSuccess.UnixMilli())/1e3, t, src)
	}
	ch <- prometheus.MustNewConstMetric(m.overflow, prometheus.CounterValue, sr.overflow, t, src)
	ch <- prometheus.MustNewConstMetric(m.bad, prometheus.CounterValue, sr.malformed, t, src)
	if sr.joinHold != nil {
		for _, q := range []trxjoin.Quality{trxjoin.Exact, trxjoin.Inferred, trxjoin.Unknown} {
			ch <- prometheus.MustNewConstMetric(m.joinHold, prometheus.CounterValue, sr.joinHold[q.String()], t, q.String())
		}
	}
}

// collectLayer sends a headline series' counters as its layer's.
func (m *metricsCollector) collectLayer(ch chan<- prometheus.Metric, k seriesKey, sr *series) {
	t, layer, c := k.target, string(k.source.Layer()), prometheus.CounterValue
	for tag, e := range sr.tags {
		ch <- prometheus.MustNewConstMetric(m.layerHold, c, e.total.Hold, t, layer, tag)
		ch <- prometheus.MustNewConstMetric(m.layerIdle, c, e.total.Idle, t, layer, tag)
		ch <- prometheus.MustNewConstMetric(m.layerActive, c, e.total.Active, t, layer, tag)
		ch <- prometheus.MustNewConstMetric(m.layerStmts, c, e.total.Stmts, t, layer, tag)
		ch <- prometheus.MustNewConstMetric(m.layerErrs, c, e.total.Errors, t, layer, tag)
		if k.source.kind().waits {
			ch <- prometheus.MustNewConstMetric(m.layerWait, c, e.total.Wait, t, layer, tag)
		}
	}
}

// collectTags sends a series' per-tag counters.
func (m *metricsCollector) collectTags(ch chan<- prometheus.Metric, k seriesKey, sr *series) {
	t, src, c := k.target, string(k.source), prometheus.CounterValue
	for tag, e := range sr.tags {
		ch <- prometheus.MustNewConstMetric(m.hold, c, e.total.Hold, t, src, tag)
		ch <- prometheus.MustNewConstMetric(m.idle, c, e.total.Idle, t, src, tag)
		ch <- prometheus.MustNewConstMetric(m.active, c, e.total.Active, t, src, tag)
		ch <- prometheus.MustNewConstMetric(m.stmts, c, e.total.Stmts, t, src, tag)
		ch <- prometheus.MustNewConstMetric(m.errs, c, e.total.Errors, t, src, tag)
		if k.source.kind().waits {
			ch <- prometheus.MustNewConstMetric(m.wait, c, e.total.Wait, t, src, tag)
		}
		for reason, v := range e.pinnedSecs {
			ch <- prometheus.MustNewConstMetric(m.pinnedSecs, c, v, t, tag, reason)
		}
	}
}

// collectGauges sends an up series' current-state figures.
func (m *metricsCollector) collectGauges(ch chan<- prometheus.Metric, k seriesKey, gs *gauges) {
	t, src, g := k.target, string(k.source), prometheus.GaugeValue
	for tag, n := range gs.sessions {
		ch <- prometheus.MustNewConstMetric(m.sessions, g, float64(n), t, src, tag)
	}
	for tr, n := range gs.pinned {
		ch <- prometheus.MustNewConstMetric(m.pinned, g, float64(n), t, tr[0], tr[1])
	}
	if lf := gs.locks; lf != nil {
		m.collectLocks(ch, t, lf)
	}
	for tag, f := range gs.trx {
		ch <- prometheus.MustNewConstMetric(m.trx, g, float64(f.count), t, tag)
		ch <- prometheus.MustNewConstMetric(m.trxAge, g, f.maxAge, t, tag)
		ch <- prometheus.MustNewConstMetric(m.rowsLocked, g, float64(f.rowsLocked), t, tag)
	}
	for wb, n := range gs.waits {
		ch <- prometheus.MustNewConstMetric(m.waits, g, float64(n), t, wb[0], wb[1])
	}
}

// collectLocks sends the mysql_locks source's locks and deadlocks per tag
// (its families without a tag are its own: saturationMetrics).
func (m *metricsCollector) collectLocks(ch chan<- prometheus.Metric, t string, lf *lockFigures) {
	g := prometheus.GaugeValue
	for k, n := range lf.locks {
		ch <- prometheus.MustNewConstMetric(m.locks, g, float64(n), t, k[0], k[1], k[2])
	}
	for k, n := range lf.deadlocks {
		ch <- prometheus.MustNewConstMetric(m.deadlocks, prometheus.CounterValue, n, t, k[0], k[1])
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
