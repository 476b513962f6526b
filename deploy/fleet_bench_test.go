package deploy_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/testenv"
)

// BenchmarkFleetPolling: what one collector of a sharded fleet costs per
// ProxySQL it polls. One collector polls 10, then 100, real ProxySQL 2.7.1
// instances of one fleet, each a light target (two client sessions: one
// idle in a transaction, holding a backend, one idle between statements),
// with the stats account, at the default intervals (processlist 250 ms,
// pool 5 s, digests 10 s). Each iteration is one second of collection once
// every source has answered. Reported: cores (the process's CPU-seconds
// per second: the collector, the ProxySQLs are other processes),
// millicores per target, late polls (holdtime_collector_polls_late_total
// over every source: polls that started an interval or more after they
// were due) and the largest poll lag at the end. targets=10 is the
// baseline of the same run, per target.
func BenchmarkFleetPolling(b *testing.B) {
	testenv.RequireProxySQL(b)
	d := testenv.NewDatabase(b)
	fleet := startFleet(b, testenv.FleetOptions{ProxySQL: testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name}, N: 100})
	// The fleet shares the collector's cores here, as it would not in
	// production: at the lowest priority, it answers with what the
	// collector leaves (the processlist polls of 100 instances cost them
	// over a core of this machine).
	for _, px := range fleet {
		lowestPriority(b, px.Pid())
	}
	ctx := context.Background()
	for _, px := range fleet {
		db, err := sql.Open("mysql", px.AppDSN())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tx.Rollback() })
		if _, err := tx.ExecContext(ctx, "SELECT 1 /* conn_tag:fleet_open_tx */"); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "SELECT 1 /* conn_tag:fleet_idle */"); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("targets=%d", n), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			cfg := collector.Config{Registerer: reg}
			for i, px := range fleet[:n] {
				cfg.ProxySQL = append(cfg.ProxySQL, collector.ProxySQLConfig{Name: fmt.Sprintf("px%03d", i), DSN: px.StatsDSN()})
			}
			c, err := collector.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.Run(runCtx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					b.Error(err)
				}
			}()
			for deadline := time.Now().Add(time.Minute); ; {
				if ok, _ := c.Ready(); ok {
					break
				}
				if time.Now().After(deadline) {
					_, down := c.Ready()
					b.Fatalf("sources not up after a minute: %v", down)
				}
				time.Sleep(100 * time.Millisecond)
			}
			late0 := gathered(b, reg, "holdtime_collector_polls_late_total", sum)
			delayed0 := gatheredWhere(b, reg, "holdtime_collector_polls_late_total", "cause", "delayed", sum)
			pollSum0, polls0 := pollDurations(b, reg)
			cpu0, fleet0, busy0, t0 := cpuSeconds(b), fleetSeconds(fleet), machineBusySeconds(), time.Now()
			b.ResetTimer()
			for range b.N {
				time.Sleep(time.Second) // the collector polls meanwhile: what is measured
			}
			b.StopTimer()
			wall := time.Since(t0).Seconds()
			cores := (cpuSeconds(b) - cpu0) / wall
			// What else ran on the machine meanwhile: the fleet itself (on
			// the collector's machine only in this benchmark) and the rest.
			b.ReportMetric((fleetSeconds(fleet)-fleet0)/wall, "fleet_cores")
			b.ReportMetric((machineBusySeconds()-busy0)/wall, "machine_busy_cores")
			b.ReportMetric(cores, "cores")
			b.ReportMetric(1000*cores/float64(n), "millicores/target")
			b.ReportMetric(gathered(b, reg, "holdtime_collector_polls_late_total", sum)-late0, "late_polls")
			// The collector's part: polls whose timer fired late (the rest
			// waited on a ProxySQL still answering the previous one).
			b.ReportMetric(gatheredWhere(b, reg, "holdtime_collector_polls_late_total", "cause", "delayed", sum)-delayed0, "late_polls_delayed")
			b.ReportMetric(gathered(b, reg, "holdtime_collector_poll_lag_seconds", maxOf), "max_lag_s")
			// How long a processlist poll took: near its interval (250 ms),
			// the ProxySQLs answer too slowly for the next to start on time.
			pollSum, polls := pollDurations(b, reg)
			if polls > polls0 {
				b.ReportMetric(1000*(pollSum-pollSum0)/(polls-polls0), "poll_ms")
			}
		})
	}
}

// startFleet is testenv.NewProxySQLFleet with up to three attempts: on a
// loaded machine one instance in a hundred sometimes exits during its start
// ("process exited during start", 2 runs in 3 back to back here), and the
// benchmark measures the collector, not that.
func startFleet(b *testing.B, opts testenv.FleetOptions) []*testenv.ProxySQL {
	var fleet []*testenv.ProxySQL
	var err error
	for attempt := 1; ; attempt++ {
		if fleet, err = testenv.StartProxySQLFleet(context.Background(), opts); err == nil {
			break
		}
		if attempt == 3 {
			b.Fatal(err)
		}
		b.Logf("starting the fleet, attempt %d: %v", attempt, err)
	}
	b.Cleanup(func() {
		var wg sync.WaitGroup
		for _, p := range fleet {
			wg.Go(func() {
				if err := p.Close(); err != nil {
					b.Errorf("stop ProxySQL %s: %v", p.AdminAddr, err)
				}
			})
		}
		wg.Wait()
	})
	return fleet
}

// gathered folds every series of one metric (a counter or a gauge).
func gathered(b *testing.B, g prometheus.Gatherer, name string, fold func(float64, float64) float64) float64 {
	return gatheredWhere(b, g, name, "", "", fold)
}

// gatheredWhere is gathered over the series whose label is value ("": all).
func gatheredWhere(b *testing.B, g prometheus.Gatherer, name, label, value string, fold func(float64, float64) float64) float64 {
	mfs, err := g.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if label != "" && lp.GetName() == label && lp.GetValue() != value {
					continue series
				}
			}
			x := m.GetCounter().GetValue()
			if m.GetGauge() != nil {
				x = m.GetGauge().GetValue()
			}
			v = fold(v, x)
		}
	}
	return v
}

// pollDurations is the sum and count of the processlist polls' durations.
func pollDurations(b *testing.B, g prometheus.Gatherer) (total, n float64) {
	mfs, err := g.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "holdtime_collector_poll_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == string(collector.SourceProxySQLProcesslist) {
					total += m.GetHistogram().GetSampleSum()
					n += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return total, n
}

func sum(a, b float64) float64   { return a + b }
func maxOf(a, b float64) float64 { return max(a, b) }

func cpuSeconds(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// fleetSeconds is the CPU-seconds the fleet's ProxySQL processes used so
// far (0 where /proc cannot be read).
func fleetSeconds(fleet []*testenv.ProxySQL) float64 {
	var s float64
	for _, px := range fleet {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(px.Pid()) + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseFloat(f[11], 64)
			k, _ := strconv.ParseFloat(f[12], 64)
			s += (u + k) / clockTicks
		}
	}
	return s
}

// machineBusySeconds is the CPU-seconds every core spent on anything but
// idle and iowait so far (/proc/stat).
func machineBusySeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy float64
	for i, v := range strings.Fields(line)[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		if i != 3 && i != 4 && i < 8 { // idle, iowait; guest time is in user already
			busy += x
		}
	}
	return busy / clockTicks
}

// lowestPriority sets nice 19 on every thread of process pid (a thread's
// priority is its own on Linux; threads made later inherit it from theirs).
func lowestPriority(b *testing.B, pid int) {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, 19); err != nil {
			b.Fatalf("nice ProxySQL %d thread %d: %v", pid, tid, err)
		}
	}
}
