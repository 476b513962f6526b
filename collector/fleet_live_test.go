package collector

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/holdtime/holdtime/testenv"
)

// TestFleetOfTwentyProxySQLsKeepsUp is issue 26's fleet check: one
// collector polls 20 real ProxySQLs at the default processlist interval
// (250 ms), and every poll starts less than two intervals after it was
// due, as the runner's own metrics (holdtime_collector_poll_lag_seconds,
// read after every poll) show. It runs without -race (make accuracy): the
// race detector slows the collector several times over, and lateness is
// what this test measures.
func TestFleetOfTwentyProxySQLsKeepsUp(t *testing.T) {
	if raceDetector {
		t.Skip("measures lateness: runs without -race, in make accuracy")
	}
	testenv.RequireProxySQL(t)
	d := testenv.NewDatabase(t)
	fleet := testenv.NewProxySQLFleet(t, testenv.FleetOptions{ProxySQL: testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name}, N: 20})
	const interval = 250 * time.Millisecond
	var cfg Config
	for i, px := range fleet {
		cfg.ProxySQL = append(cfg.ProxySQL, ProxySQLConfig{Name: fmt.Sprintf("px%02d", i+1), DSN: px.AdminDSN(),
			ProcesslistInterval: interval})
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	worst := map[string]float64{}
	polls := map[string]int{}
	allPolled := make(chan struct{})
	c.onPoll = func(target string, src Source, err error) {
		if src != SourceProxySQLProcesslist || err != nil {
			return
		}
		lag := value(c.pollLag.WithLabelValues(target, string(src)))
		mu.Lock()
		defer mu.Unlock()
		worst[target] = max(worst[target], lag)
		polls[target]++
		if len(polls) == len(fleet) && allPolled != nil {
			done := true
			for _, n := range polls {
				done = done && n >= 40 // 10 s of polls each
			}
			if done {
				close(allPolled)
				allPolled = nil
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-allPolled:
	case <-time.After(2 * time.Minute):
		t.Error("not every ProxySQL was polled 40 times in 2 minutes")
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	var all float64
	for i := range fleet {
		target := fmt.Sprintf("px%02d", i+1)
		late := value(c.pollsLate.WithLabelValues(target, string(SourceProxySQLProcesslist), lateOverran)) +
			value(c.pollsLate.WithLabelValues(target, string(SourceProxySQLProcesslist), lateDelayed))
		all = max(all, worst[target])
		if worst[target] >= 2*interval.Seconds() {
			t.Errorf("%s: a poll started %.3f s late (%d polls, %v intervals missed): want under two intervals", target, worst[target], polls[target], late)
		}
	}
	t.Logf("20 ProxySQLs, %v interval: worst lag %.3f s over %d targets", interval, all, len(fleet))
}

// value reads a gauge's or a counter's value.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return -1
	}
	if g := d.GetGauge(); g != nil {
		return g.GetValue()
	}
	return d.GetCounter().GetValue()
}
