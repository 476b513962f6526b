package collector

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/holdtime/holdtime/collector/internal/otlp"
	otelattr "go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// dialledAddress puts the address an app dials on its hold spans as
// server.address and server.port, what the collector routes a span's
// session id by. conntag does not write them (yet): an application adds
// them the same way, with this span processor on its tracer provider.
type dialledAddress struct {
	host string
	port int64
}

func newDialledAddress(t *testing.T, addr string) sdktrace.SpanProcessor {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.ParseInt(port, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return dialledAddress{host: host, port: p}
}

func (d dialledAddress) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	if s.Name() == otlp.SpanHold {
		s.SetAttributes(otelattr.String(otlp.AttrServerAddress, d.host), otelattr.Int64(otlp.AttrServerPort, d.port))
	}
}
func (dialledAddress) OnEnd(sdktrace.ReadOnlySpan)      {}
func (dialledAddress) Shutdown(context.Context) error   { return nil }
func (dialledAddress) ForceFlush(context.Context) error { return nil }
