package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation/flashsale"
)

// flashsaleSpanDB opens the sale's pool the way flashsale.Run opens its own
// (conntag, InterpolateParams, Concurrency+4 connections), with spans on:
// every hold and statement goes to the OTLP endpoint, and each connection
// learns its session id (the ProxySQL SessionID behind ProxySQL) so the
// collector joins app holds to proxy sessions exactly. stop flushes the
// spans still buffered.
func flashsaleSpanDB(ctx context.Context, endpoint string, mc *mysql.Config, cfg flashsale.Config) (*sql.DB, func(), error) {
	tp, err := exportSpans(ctx, endpoint)
	if err != nil {
		return nil, nil, err
	}
	mc = mc.Clone()
	mc.InterpolateParams = true
	connector, err := mysql.NewConnector(mc)
	if err != nil {
		tp.Shutdown(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	opts := []conntag.Option{conntag.WithTracerProvider(tp), conntag.WithSessionID()}
	if cfg.MeterProvider != nil {
		opts = append(opts, conntag.WithMeterProvider(cfg.MeterProvider))
	}
	db := conntag.OpenDB(connector, opts...)
	db.SetMaxOpenConns(cfg.Concurrency + 4)
	db.SetMaxIdleConns(cfg.Concurrency + 4)
	return db, func() {
		db.Close()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		tp.Shutdown(sctx)
	}, nil
}

// otlpTracesURL checks an OTLP/HTTP traces endpoint; a URL without a path
// gets the standard /v1/traces.
func otlpTracesURL(endpoint string) (string, error) {
	return otlpURL("otlp-endpoint", endpoint, "/v1/traces")
}

// otlpURL checks the OTLP/HTTP endpoint given to --flag; a URL without a
// path gets the signal's standard path.
func otlpURL(flag, endpoint, path string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Not echoed: it may carry credentials.
		return "", fmt.Errorf("--%s wants an http:// or https:// URL, e.g. http://127.0.0.1:9479%s", flag, path)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = path
	}
	return u.String(), nil
}

// counterExportInterval is how often conntag's counters are exported: the
// collector credits an export in the window it arrives in, so exports at
// least as often as its shortest window (10 s) keep that window smooth.
const counterExportInterval = 10 * time.Second

// exportCounters returns a reader that exports conntag's counters to an
// OTLP/HTTP metrics endpoint such as the collector's /v1/metrics.
func exportCounters(ctx context.Context, endpoint string) (sdkmetric.Reader, error) {
	exporter, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("counter exporter: %w", err)
	}
	return sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithInterval(counterExportInterval)), nil
}

// exportSpans returns a TracerProvider that batches spans to an OTLP/HTTP
// traces endpoint such as the collector's /v1/traces.
func exportSpans(ctx context.Context, endpoint string) (*sdktrace.TracerProvider, error) {
	exporter, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("span exporter: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter, sdktrace.WithBatchTimeout(500*time.Millisecond))), nil
}
