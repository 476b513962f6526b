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
	cutovers   metric.Int64Counter
	cutoverDur metric.Float64Histogram
}

func newMetrics(mp metric.MeterProvider, r *Router) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter(meterName)
	m := &metrics{}
	var errs [10]error
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
	m.cutovers, errs[5] = meter.Int64Counter("holdtime.migration.cutovers", metric.WithUnit("{cutover}"),
		metric.WithDescription("Shops moved from one stage to another, by outcome (ok, gated, refused, error)."))
	m.cutoverDur, errs[6] = meter.Float64Histogram("holdtime.migration.cutover.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a shop's calls waited on its cutover (the fence), by from and to stage."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	_, errs[7] = meter.Int64ObservableGauge("holdtime.migration.drifted_shops", metric.WithUnit("{shop}"),
		metric.WithDescription("Shops whose last reconcile found the two systems' books apart."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			r.mu.Lock()
			n := len(r.drifted)
			r.mu.Unlock()
			o.Observe(int64(n))
			return nil
		}))
	_, errs[8] = meter.Int64ObservableGauge("holdtime.migration.gated_shops", metric.WithUnit("{shop}"),
		metric.WithDescription("Shops the promotion gate holds in shadow (quiet period or drift)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(len(r.Gated())))
			return nil
		}))
	_, errs[9] = meter.Int64ObservableGauge("holdtime.migration.item_drift", metric.WithUnit("{unit}"),
		metric.WithDescription("Per shop, item and location group found drifted by the shop's last reconcile: "+
			"Redis's figure minus MySQL's (figure=available|held). An item leaves when a reconcile finds it agreeing."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, d := range r.itemDrift() {
				shop := attribute.Int64("shop", int64(d.Key.ShopID))
				item := attribute.Int64("item", int64(d.Key.ItemID))
				group := attribute.Int64("group", int64(d.Key.GroupID))
				o.Observe(d.Redis.Available-d.MySQL.Available, metric.WithAttributes(shop, item, group, attribute.String("figure", "available")))
				o.Observe(d.Redis.Held-d.MySQL.Held, metric.WithAttributes(shop, item, group, attribute.String("figure", "held")))
			}
			return nil
		}))
	return m, errors.Join(errs[:]...)
}

func (m *metrics) cutover(ctx context.Context, from, to Stage, outcome string, start time.Time) {
	attrs := metric.WithAttributes(attribute.String("from", string(from)), attribute.String("to", string(to)),
		attribute.String("outcome", outcome))
	m.cutovers.Add(ctx, 1, attrs)
	m.cutoverDur.Record(ctx, time.Since(start).Seconds(), attrs)
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
