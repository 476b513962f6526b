package collector

import (
	"context"
	"errors"
	"testing"
	"time"

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

// TestLatePollsSayWhy: a source that once answers after more than two
// intervals makes the next poll late, counted as overran (the source was
// slow), not delayed (the collector was busy); and the cause rule on
// itself, both ways.
func TestLatePollsSayWhy(t *testing.T) {
	c, err := New(Config{Registerer: prometheus.NewRegistry(), OTLP: OTLPConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	const interval = 20 * time.Millisecond
	var n int
	polledAfterSlow := make(chan struct{})
	p := &poller{c: c, polled: polled{target: "t", source: SourceMySQL, interval: interval,
		poll: func(context.Context) error {
			n++
			switch n {
			case 3:
				time.Sleep(4 * interval) // the slow answer under test
			case 5:
				close(polledAfterSlow)
			}
			return nil
		}}}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.run(ctx); close(done) }()
	<-polledAfterSlow
	stop()
	<-done
	overran := value(c.pollsLate.WithLabelValues("t", string(SourceMySQL), lateOverran))
	delayed := value(c.pollsLate.WithLabelValues("t", string(SourceMySQL), lateDelayed))
	if overran < 2 {
		t.Errorf("after a poll 4 intervals long: %v late polls counted overran (%v delayed), want at least 2", overran, delayed)
	}
	due := time.Unix(1_800_000_000, 0)
	if got := lateCause(due, due.Add(90*time.Millisecond), due.Add(100*time.Millisecond)); got != lateOverran {
		t.Errorf("the previous poll ended 90 ms past due, this one started at 100 ms: %s", got)
	}
	if got := lateCause(due, due.Add(-5*time.Millisecond), due.Add(100*time.Millisecond)); got != lateDelayed {
		t.Errorf("the previous poll ended before due, this one started 100 ms late: %s", got)
	}
}

// TestADownSourceShowsNoStaleOwnFigures: a source's figures without a tag
// (here the ProxySQL pool's) are served while it answers and absent from
// the moment its poll fails, never its last good values, as the per-tag
// gauges in the store.
func TestADownSourceShowsNoStaleOwnFigures(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, err := New(Config{Registerer: reg, OTLP: OTLPConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	pool := newPoolMetrics("px")
	if err := reg.Register(pool); err != nil {
		t.Fatal(err)
	}
	polled1, fail := make(chan struct{}), make(chan struct{})
	failed := make(chan struct{}, 1)
	n := 0
	p := &poller{c: c, polled: polled{target: "px", source: SourceProxySQLPool, interval: time.Millisecond, own: pool.ownMetrics,
		poll: func(ctx context.Context) error {
			n++
			if n == 1 {
				pool.set([]PoolServer{{Server: "db:3306", ConnUsed: 2}}, &proxysqlGlobal{clientConnections: 5})
				return nil
			}
			if n == 2 {
				close(polled1)
				<-fail
			}
			return errors.New("connection refused")
		}}}
	c.onPoll = func(_ string, _ Source, err error) {
		if err != nil {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.run(ctx); close(done) }()
	defer func() { stop(); <-done }()
	families := func() map[string]bool {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, mf := range mfs {
			out[mf.GetName()] = true
		}
		return out
	}
	<-polled1
	up := families()
	for _, f := range []string{"holdtime_proxysql_pool_connections", "holdtime_proxysql_client_connections"} {
		if !up[f] {
			t.Errorf("up: %s absent", f)
		}
	}
	close(fail)
	<-failed
	down := families()
	for _, f := range []string{"holdtime_proxysql_pool_connections", "holdtime_proxysql_client_connections"} {
		if down[f] {
			t.Errorf("down: %s still served (stale)", f)
		}
	}
	for _, st := range c.Sources() {
		if st.Target == "px" && st.Source == SourceProxySQLPool && st.Up {
			t.Error("the store says the failed source is up")
		}
	}
}
