package conntag

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// instruments are conntag's OpenTelemetry instruments. Names follow the
// database client semantic conventions where one exists, holdtime.* where
// none does; every per-tag series carries conn_tag.
type instruments struct {
	// Synchronous, opt-in (WithHistograms): one Record per hold or statement.
	useTime    metric.Float64Histogram // db.client.connection.use_time
	opDuration metric.Float64Histogram // db.client.operation.duration
	// Synchronous, rare: once per new connection.
	createTime metric.Float64Histogram // db.client.connection.create_time

	// Observable: read from the tag states at collection.
	holdTime, activeTime, idleTime metric.Float64ObservableCounter
	holds, longHolds               metric.Int64ObservableCounter
	ops                            metric.Int64ObservableCounter
	opTime                         metric.Float64ObservableCounter
	count, maxConns                metric.Int64ObservableUpDownCounter
	waits                          metric.Int64ObservableCounter
	oversize                       metric.Int64ObservableCounter
	waitTime                       metric.Float64ObservableCounter

	// Last values observed per tag, so that the exported counters never go
	// down (see observe).
	mu   sync.Mutex
	last map[*tagState]*[3]float64
}

func (m *instruments) create(cfg config) error {
	meter := cfg.meterProvider.Meter(instrumentationName)
	var errs []error
	check := func(err error) { errs = append(errs, err) }
	var err error
	if cfg.histograms {
		m.useTime, err = meter.Float64Histogram("db.client.connection.use_time", metric.WithUnit("s"),
			metric.WithDescription("Time between borrowing a connection from the pool and returning it (the hold), by conn_tag of the borrower."),
			metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
		check(err)
		m.opDuration, err = meter.Float64Histogram("db.client.operation.duration", metric.WithUnit("s"),
			metric.WithDescription("Duration of database client operations, including reading the rows, by conn_tag of the statement's context."),
			metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
		check(err)
	}
	m.createTime, err = meter.Float64Histogram("db.client.connection.create_time", metric.WithUnit("s"),
		metric.WithDescription("Time it took to open a new connection, by conn_tag of the caller that needed it."))
	check(err)
	m.holdTime, err = meter.Float64ObservableCounter("holdtime.connection.hold_time", metric.WithUnit("s"),
		metric.WithDescription("Seconds connections were held (borrowed from the pool), by conn_tag of the borrower, including holds in progress. Its rate is occupancy: connections kept busy."))
	check(err)
	m.activeTime, err = meter.Float64ObservableCounter("holdtime.connection.active_time", metric.WithUnit("s"),
		metric.WithDescription("Seconds of holds spent inside driver calls (statements including row reading, begin, commit), by conn_tag of the hold."))
	check(err)
	m.idleTime, err = meter.Float64ObservableCounter("holdtime.connection.idle_time", metric.WithUnit("s"),
		metric.WithDescription("Seconds of holds spent outside driver calls (a borrowed connection doing nothing), by conn_tag of the hold."))
	check(err)
	m.holds, err = meter.Int64ObservableCounter("holdtime.connection.holds", metric.WithUnit("{hold}"),
		metric.WithDescription("Completed holds, by conn_tag of the borrower."))
	check(err)
	m.longHolds, err = meter.Int64ObservableCounter("holdtime.connection.long_holds", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds that lasted longer than the long-hold threshold, by conn_tag."))
	check(err)
	m.ops, err = meter.Int64ObservableCounter("holdtime.client.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Statements, by conn_tag of the statement's context, db.operation.name and error.type (set when it failed)."))
	check(err)
	m.opTime, err = meter.Float64ObservableCounter("holdtime.client.operation_time", metric.WithUnit("s"),
		metric.WithDescription("Seconds spent in statements including row reading, by conn_tag, db.operation.name and error.type."))
	check(err)
	m.count, err = meter.Int64ObservableUpDownCounter("db.client.connection.count", metric.WithUnit("{connection}"),
		metric.WithDescription("Open connections by state (idle, used); used ones also by conn_tag of the borrower."))
	check(err)
	m.maxConns, err = meter.Int64ObservableUpDownCounter("db.client.connection.max", metric.WithUnit("{connection}"),
		metric.WithDescription("The pool's maximum number of open connections (0: unlimited)."))
	check(err)
	m.waits, err = meter.Int64ObservableCounter("holdtime.pool.waits", metric.WithUnit("{wait}"),
		metric.WithDescription("Times a caller waited for a connection because the pool was at its limit (DB.Stats WaitCount)."))
	check(err)
	m.waitTime, err = meter.Float64ObservableCounter("holdtime.pool.wait_time", metric.WithUnit("s"),
		metric.WithDescription("Total seconds callers waited for a connection (DB.Stats WaitDuration)."))
	check(err)
	m.oversize, err = meter.Int64ObservableCounter("holdtime.client.untagged_oversize", metric.WithUnit("{statement}"),
		metric.WithDescription("Statements sent untagged because the tag would have made them larger than the driver's or the server's packet limit."))
	check(err)
	m.last = make(map[*tagState]*[3]float64)
	return errors.Join(errs...)
}

// registerCallbacks exports the observable instruments of a pool.
func (in *instr) registerCallbacks(db *sql.DB) error {
	in.db = db
	if !in.cfg.metrics {
		return nil
	}
	m := &in.inst
	pool := attrPoolName.String(in.cfg.poolName)
	system := attrSystem.String(in.cfg.dbSystem)
	idleOpts := []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(pool, system, attrState.String("idle")))}
	poolOpts := []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(pool, system))}
	var err error
	in.reg, err = in.cfg.meterProvider.Meter(instrumentationName).RegisterCallback(
		func(_ context.Context, o metric.Observer) error {
			in.observe(o)
			st := db.Stats()
			o.ObserveInt64(m.count, int64(st.Idle), idleOpts...)
			o.ObserveInt64(m.maxConns, int64(st.MaxOpenConnections), poolOpts...)
			o.ObserveInt64(m.waits, st.WaitCount, poolOpts...)
			o.ObserveFloat64(m.waitTime, st.WaitDuration.Seconds(), poolOpts...)
			if n := in.oversize.Load(); n > 0 {
				o.ObserveInt64(m.oversize, n, poolOpts...)
			}
			return nil
		},
		m.holdTime, m.activeTime, m.idleTime, m.holds, m.longHolds, m.ops, m.opTime, m.count, m.maxConns, m.waits, m.waitTime, m.oversize)
	return err
}

// observe reports the per-tag series. Hold, active and idle seconds are the
// completed holds' totals plus the holds in progress up to now.
//
// The totals are read before the open holds. giveBack clears a hold's open
// state before it adds the hold to the totals, so a hold can never be seen
// in both: a hold that ends during a collection is at worst missing from
// both for that one collection. Each counter therefore reports the larger
// of its new value and its last, so it never goes down (which Prometheus
// would take for a reset), and it catches up at the next collection.
func (in *instr) observe(o metric.Observer) {
	m := &in.inst
	type sums struct {
		holdNanos, activeNanos, holds, used int64
	}
	per := make(map[*tagState]*sums)
	in.eachTag(func(ts *tagState) {
		per[ts] = &sums{holdNanos: ts.holdNanos.Load(), activeNanos: ts.activeNanos.Load(), holds: ts.holds.Load()}
	})
	now := in.now()
	in.connMu.Lock()
	for c := range in.conns {
		start := c.holdStart.Load()
		if start == 0 {
			continue
		}
		ts := c.holdTag.Load()
		if ts == nil {
			ts = in.deflt
		}
		h := per[ts.metrics]
		if h == nil { // a tag created after the totals were read
			continue
		}
		held := max(0, now-start)
		h.holdNanos += held
		h.activeNanos += min(c.activeNanos.Load(), held)
		h.used++
	}
	in.connMu.Unlock()

	m.mu.Lock()
	defer m.mu.Unlock()
	for ts, h := range per {
		if h.holds == 0 && h.used == 0 && !ts.hasOps() {
			continue // a tag that has done nothing yet: no series
		}
		hold := time.Duration(h.holdNanos).Seconds()
		active := time.Duration(h.activeNanos).Seconds()
		last := m.last[ts]
		if last == nil {
			last = &[3]float64{}
			m.last[ts] = last
		}
		last[0] = max(last[0], hold)
		last[1] = max(last[1], active)
		last[2] = max(last[2], hold-active)
		o.ObserveFloat64(m.holdTime, last[0], ts.obsOpts...)
		o.ObserveFloat64(m.activeTime, last[1], ts.obsOpts...)
		o.ObserveFloat64(m.idleTime, last[2], ts.obsOpts...)
		o.ObserveInt64(m.holds, h.holds, ts.obsOpts...)
		o.ObserveInt64(m.count, h.used, ts.usedOpts...)
		if n := ts.longHolds.Load(); n > 0 {
			o.ObserveInt64(m.longHolds, n, ts.obsOpts...)
		}
		for op := range numOps {
			t := &ts.ops[op]
			if n := t.okCount.Load(); n > 0 {
				o.ObserveInt64(m.ops, n, ts.opOpts[op][0].observe...)
				o.ObserveFloat64(m.opTime, time.Duration(t.okNanos.Load()).Seconds(), ts.opOpts[op][0].observe...)
			}
			if n := t.errCount.Load(); n > 0 {
				o.ObserveInt64(m.ops, n, ts.opOpts[op][1].observe...)
				o.ObserveFloat64(m.opTime, time.Duration(t.errNanos.Load()).Seconds(), ts.opOpts[op][1].observe...)
			}
		}
	}
}

func (ts *tagState) hasOps() bool {
	for i := range ts.ops {
		if ts.ops[i].okCount.Load() != 0 || ts.ops[i].errCount.Load() != 0 {
			return true
		}
	}
	return false
}

// closeFlushTimeout bounds the export Close makes of the pool's last
// counters.
const closeFlushTimeout = 5 * time.Second

// close unregisters the pool's counters. A pool closed between two exports
// of a push exporter (OTLP's periodic reader) would lose what it counted
// since the last one, so when the MeterProvider can flush (the SDK's can)
// its readers collect once more first: the pool's final counters go out.
// A pull reader (the Prometheus exporter) flushes nothing.
func (in *instr) close() error {
	if in.reg == nil {
		return nil
	}
	var err error
	if f, ok := in.cfg.meterProvider.(interface{ ForceFlush(context.Context) error }); ok {
		ctx, cancel := context.WithTimeout(context.Background(), closeFlushTimeout)
		if ferr := f.ForceFlush(ctx); ferr != nil {
			err = fmt.Errorf("conntag: export the pool's last counters on Close: %w", ferr)
		}
		cancel()
	}
	return errors.Join(err, in.reg.Unregister())
}
