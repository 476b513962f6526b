package migration

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

const meterName = "github.com/holdtime/holdtime/reservation/migration"

var durationBuckets = []float64{.0001, .0002, .0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5}

type metrics struct {
	operations metric.Int64Counter
	duration   metric.Float64Histogram
	mismatches metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider, r *Router) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter(meterName)
	m := &metrics{}
	var errs [5]error
	m.operations, errs[0] = meter.Int64Counter("holdtime.migration.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Reservation calls per stage, backend and role (truth or shadow), by outcome."))
	m.duration, errs[1] = meter.Float64Histogram("holdtime.migration.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of reservation calls per stage, backend and role."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.mismatches, errs[2] = meter.Int64Counter("holdtime.migration.mismatches", metric.WithUnit("{mismatch}"),
		metric.WithDescription("Differences between the source of truth and the shadow, by kind and stage."))
	_, errs[3] = meter.Int64ObservableGauge("holdtime.migration.kill_switch",
		metric.WithDescription("1 while the kill switch sends new reservations of switched shops back to Redis."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			v := int64(0)
			if r.KillSwitch() {
				v = 1
			}
			o.Observe(v)
			return nil
		}))
	_, errs[4] = meter.Int64ObservableGauge("holdtime.migration.shops", metric.WithUnit("{shop}"),
		metric.WithDescription("Shops of Config.ShopsByVolume per stage (the kill switch applied)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			n := map[Stage]int64{StageRedis: 0, StageShadow: 0, StageMySQL: 0}
			for _, s := range r.cfg.ShopsByVolume {
				n[r.Stage(s)]++
			}
			for st, v := range n {
				o.Observe(v, metric.WithAttributes(attribute.String("stage", string(st))))
			}
			return nil
		}))
	return m, errors.Join(errs[:]...)
}

func (m *metrics) op(ctx context.Context, op string, stage Stage, b Backend, role string, start time.Time, err error) {
	attrs := metric.WithAttributes(attribute.String("operation", op), attribute.String("stage", string(stage)),
		attribute.String("backend", string(b)), attribute.String("role", role), attribute.String("outcome", outcomeText(err)))
	m.operations.Add(ctx, 1, attrs)
	m.duration.Record(ctx, time.Since(start).Seconds(), attrs)
}

func (m *metrics) mismatch(ctx context.Context, mm Mismatch) {
	m.mismatches.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", string(mm.Kind)), attribute.String("stage", string(mm.Stage))))
}
