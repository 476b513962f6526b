package collector

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestEveryPollIsTimedFailedOnesToo: the runner observes each poll's
// duration per target and source, a failed poll (connection refused)
// included.
func TestEveryPollIsTimedFailedOnesToo(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, err := New(Config{Registerer: reg, OTLP: OTLPConfig{Enabled: true},
		ProxySQL: []ProxySQLConfig{{Name: "px", DSN: "admin:admin@tcp(127.0.0.1:1)/", DigestInterval: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan struct{}, 64)
	c.onPoll = func(target string, src Source, err error) {
		if target == "px" && src == SourceProxySQLProcesslist && err != nil {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	<-failed
	stop()
	<-done
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var count uint64
	for _, mf := range mfs {
		if mf.GetName() != "holdtime_collector_poll_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == string(SourceProxySQLProcesslist) {
					count += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if count == 0 {
		t.Error("the failed poll of px/proxysql_processlist was not timed")
	}
}
