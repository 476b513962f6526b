package reservation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Operation names, the "operation" attribute of the metrics.
const (
	opReserve = "reserve"
	opClaim   = "claim"
	opRelease = "release"
	opRefill  = "refill"
	opExpire  = "expire"
	opPrune   = "prune"
)

// meterName is the instrumentation scope of the engine's metrics.
const meterName = "github.com/holdtime/holdtime/reservation"

// Latency buckets in seconds: a reserve is a few milliseconds when healthy
// and seconds when it queues.
var durationBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5}

// metrics are the engine's instruments. Every name is listed in doc.go.
type metrics struct {
	// off: no MeterProvider was given. Every method returns at once, so
	// the default engine pays nothing for metrics (a no-op provider would
	// still cost the attribute sets of every call).
	off      bool
	strategy attribute.KeyValue

	operations  metric.Int64Counter        // holdtime.reservation.operations
	duration    [3]metric.Float64Histogram // reserve, claim, release duration
	retries     metric.Int64Counter
	shortReads  metric.Int64Counter
	skipped     metric.Int64Counter
	refills     metric.Int64Counter
	refilled    metric.Int64Counter
	refillWaits metric.Float64Histogram
	expiries    metric.Int64Counter
	prunes      metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider, strategy Strategy, depth func() int64) (*metrics, error) {
	off := mp == nil
	if off {
		mp = noop.NewMeterProvider()
	}
	m := &metrics{off: off, strategy: attribute.String("strategy", string(strategy))}
	meter := mp.Meter(meterName)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		return h
	}
	m.operations = counter("holdtime.reservation.operations", "{operation}",
		"Reserve, claim and release calls by operation and outcome.")
	m.duration[0] = histogram("holdtime.reservation.reserve.duration", "Duration of Reserve calls, retries included.")
	m.duration[1] = histogram("holdtime.reservation.claim.duration", "Duration of Claim calls, retries included.")
	m.duration[2] = histogram("holdtime.reservation.release.duration", "Duration of Release calls, retries included.")
	m.retries = counter("holdtime.reservation.retries", "{attempt}",
		"Attempts repeated after a deadlock, lock wait timeout, lost connection or contention.")
	m.shortReads = counter("holdtime.reservation.short_reads", "{read}",
		"Unit fetches that returned fewer units than the cart asked for.")
	m.skipped = counter("holdtime.reservation.units.skipped", "{unit}",
		"Units asked for but not returned by a unit fetch (locked by others, or not pooled).")
	m.refills = counter("holdtime.reservation.refills", "{refill}",
		"Refills by mode: inline (on the reserve path) or background.")
	m.refilled = counter("holdtime.reservation.refill.units", "{unit}", "Units added to pools by refills.")
	m.refillWaits = histogram("holdtime.reservation.refill.wait.duration",
		"Time a reserve spent in inline refill, waiting for the item's refill lock included.")
	m.expiries = counter("holdtime.reservation.expiries", "{reservation}", "Holds ended because they expired, by the sweeper or by a claim that found them due.")
	m.prunes = counter("holdtime.reservation.pruned", "{reservation}",
		"Ended reservation rows deleted after Config.Retention.")
	_, err := meter.Int64ObservableGauge("holdtime.reservation.pool.depth", metric.WithUnit("{unit}"),
		metric.WithDescription("Pooled units of the items in this engine's working set: counted by the last refill, "+
			"kept live by this engine's own reserves, releases and expiries."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(depth(), metric.WithAttributes(m.strategy))
			return nil
		}))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("reservation: create metrics on Config.MeterProvider: %w", err)
	}
	return m, nil
}

// outcome names how an operation ended, the "outcome" attribute.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrInsufficientStock):
		return "insufficient_stock"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrExpired):
		return "expired"
	case errors.Is(err, ErrReleased), errors.Is(err, ErrClaimed):
		return "conflict"
	case errors.Is(err, ErrOutcomeUnknown):
		return "unknown"
	case errors.Is(err, ErrRetryable):
		return "retryable"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	default:
		return "error"
	}
}

func (m *metrics) op(ctx context.Context, op string, start time.Time, err error) {
	if m.off {
		return
	}
	attrs := metric.WithAttributes(m.strategy, attribute.String("operation", op), attribute.String("outcome", outcome(err)))
	m.operations.Add(ctx, 1, attrs)
	i := 0
	switch op {
	case opClaim:
		i = 1
	case opRelease:
		i = 2
	}
	m.duration[i].Record(ctx, time.Since(start).Seconds(), attrs)
}

// retryReason names why an attempt was repeated, the "reason" attribute.
func retryReason(err error) string {
	switch {
	case errors.Is(err, ErrDeadlock):
		return "deadlock"
	case errors.Is(err, ErrLockWaitTimeout):
		return "lock_wait_timeout"
	case errors.Is(err, ErrConnectionLost):
		return "connection_lost"
	case errors.Is(err, errContention):
		return "contention"
	default:
		return "other"
	}
}

func (m *metrics) retry(ctx context.Context, op string, err error) {
	if m.off {
		return
	}
	m.retries.Add(ctx, 1, metric.WithAttributes(m.strategy, attribute.String("operation", op),
		attribute.String("reason", retryReason(err))))
}

func (m *metrics) shortRead(ctx context.Context, short []int64) {
	if m.off {
		return
	}
	var n int64
	for _, s := range short {
		n += s
	}
	m.shortReads.Add(ctx, 1, metric.WithAttributes(m.strategy))
	m.skipped.Add(ctx, n, metric.WithAttributes(m.strategy))
}

func (m *metrics) refilledUnits(ctx context.Context, units int64) {
	if m.off {
		return
	}
	m.refilled.Add(ctx, units, metric.WithAttributes(m.strategy))
}

func (m *metrics) refillWait(ctx context.Context, d time.Duration) {
	if m.off {
		return
	}
	m.refills.Add(ctx, 1, metric.WithAttributes(m.strategy, attribute.String("mode", "inline")))
	m.refillWaits.Record(ctx, d.Seconds(), metric.WithAttributes(m.strategy))
}

func (m *metrics) backgroundRefill(ctx context.Context) {
	if m.off {
		return
	}
	m.refills.Add(ctx, 1, metric.WithAttributes(m.strategy, attribute.String("mode", "background")))
}

func (m *metrics) pruned(ctx context.Context, n int) {
	if m.off {
		return
	}
	if n > 0 {
		m.prunes.Add(ctx, int64(n), metric.WithAttributes(m.strategy))
	}
}

func (m *metrics) expired(ctx context.Context, n int) {
	if m.off {
		return
	}
	if n > 0 {
		m.expiries.Add(ctx, int64(n), metric.WithAttributes(m.strategy))
	}
}
