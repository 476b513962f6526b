package redisstock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
)

const meterName = "github.com/holdtime/holdtime/reservation/redisstock"

// Latency buckets in seconds: a Redis command is tens of microseconds on
// loopback and milliseconds when the server or the client is busy.
var durationBuckets = []float64{.00005, .0001, .0002, .0005, .001, .002, .005, .01, .02, .05, .1, .5, 1}

// metrics are the Store's instruments and the go-redis hook that times every
// command per tag.
type metrics struct {
	commands   metric.Float64Histogram
	operations metric.Int64Counter
	opDuration metric.Float64Histogram
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter(meterName)
	m := &metrics{}
	var errs [3]error
	m.commands, errs[0] = meter.Float64Histogram("holdtime.redis.command.duration", metric.WithUnit("s"),
		metric.WithDescription("Redis command round trips by conn_tag and command (a Lua script by its name)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.operations, errs[1] = meter.Int64Counter("holdtime.redisstock.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Reserve, claim, release and expiry calls of the Redis design by outcome."))
	m.opDuration, errs[2] = meter.Float64Histogram("holdtime.redisstock.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of the Redis design's operations (both systems for a claim)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	return m, errors.Join(errs[:]...)
}

type commandKey struct{}

// withCommand names the command a context's next Redis call runs, for a
// script (EVALSHA says nothing about which).
func withCommand(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, commandKey{}, name)
}

func tagOf(ctx context.Context) string {
	if t, ok := conntag.TagFrom(ctx); ok {
		return t
	}
	return "untagged"
}

func (m *metrics) DialHook(next redis.DialHook) redis.DialHook { return next }

func (m *metrics) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		name, _ := ctx.Value(commandKey{}).(string)
		if name == "" || !strings.HasPrefix(name, "script:") || !isEval(cmd.Name()) {
			name = cmd.Name()
		}
		m.commands.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(
			attribute.String("conn_tag", tagOf(ctx)), attribute.String("command", name), outcomeAttr(err)))
		return err
	}
}

func (m *metrics) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		m.commands.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(
			attribute.String("conn_tag", tagOf(ctx)), attribute.String("command", "pipeline"), outcomeAttr(err)))
		return err
	}
}

func isEval(name string) bool { return strings.HasPrefix(name, "eval") }

func outcomeAttr(err error) attribute.KeyValue {
	switch {
	case err == nil:
		return attribute.String("outcome", "ok")
	case errors.Is(err, redis.Nil):
		return attribute.String("outcome", "nil")
	}
	return attribute.String("outcome", "error")
}

func (m *metrics) op(ctx context.Context, op string, start time.Time, err error) {
	attrs := metric.WithAttributes(attribute.String("operation", op), attribute.String("outcome", outcome(err)))
	m.operations.Add(ctx, 1, attrs)
	m.opDuration.Record(ctx, time.Since(start).Seconds(), attrs)
}

func (m *metrics) expired(ctx context.Context, start time.Time, n int, err error) {
	m.operations.Add(ctx, int64(n), metric.WithAttributes(attribute.String("operation", opExpire), attribute.String("outcome", "ok")))
	if err != nil {
		m.operations.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", opExpire), attribute.String("outcome", outcome(err))))
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	}
	for _, c := range []struct {
		err  error
		name string
	}{{reservation.ErrInsufficientStock, "insufficient_stock"}, {reservation.ErrNotFound, "not_found"},
		{reservation.ErrExpired, "expired"}, {reservation.ErrReleased, "conflict"}, {reservation.ErrClaimed, "conflict"}} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "error"
}
