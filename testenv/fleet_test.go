package testenv

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProxySQLFleet starts five ProxySQLs in front of the shared server and
// checks that each is its own instance on its own ports, reaching the
// backend, and that the test's cleanup stops them all and removes their
// directories.
func TestProxySQLFleet(t *testing.T) {
	RequireProxySQL(t)
	d := NewDatabase(t)
	ctx := context.Background()
	if _, err := d.Open(t).ExecContext(ctx, "CREATE TABLE t (n INT) SELECT 42 AS n"); err != nil {
		t.Fatal(err)
	}
	const n = 5
	var pids []int
	var dirs []string
	t.Run("fleet", func(t *testing.T) {
		start := time.Now()
		fleet := NewProxySQLFleet(t, FleetOptions{ProxySQL: ProxySQLOptions{Backend: d.Target, Schema: d.Name}, N: n})
		t.Logf("%d ProxySQLs up in %v", n, time.Since(start).Round(time.Millisecond))
		if len(fleet) != n {
			t.Fatalf("%d instances, want %d", len(fleet), n)
		}
		addrs := map[string]bool{}
		for i, p := range fleet {
			addrs[p.AppAddr], addrs[p.AdminAddr] = true, true
			pids, dirs = append(pids, p.Pid()), append(dirs, p.Dir())
			// One client connection to this instance through its app port...
			app, err := sql.Open("mysql", p.AppDSN())
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close()
			c, err := app.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var v int
			if err := c.QueryRowContext(ctx, "SELECT n FROM t").Scan(&v); err != nil || v != 42 {
				t.Fatalf("instance %d: SELECT through ProxySQL: %d, %v", i, v, err)
			}
			// ...is the only session its own admin port lists: every
			// instance is its own ProxySQL.
			stats, err := sql.Open("mysql", p.StatsDSN())
			if err != nil {
				t.Fatal(err)
			}
			defer stats.Close()
			var sessions int
			if err := stats.QueryRowContext(ctx, "SELECT COUNT(*) FROM stats_mysql_processlist").Scan(&sessions); err != nil {
				t.Fatalf("instance %d: stats: %v", i, err)
			}
			if sessions != 1 {
				t.Errorf("instance %d lists %d client sessions, want its one", i, sessions)
			}
		}
		if len(addrs) != 2*n {
			t.Errorf("%d distinct addresses for %d instances: %v", len(addrs), n, addrs)
		}
	})
	for i, pid := range pids {
		if pid == 0 || processExists(pid) {
			t.Errorf("ProxySQL %d (pid %d) still runs after its test's cleanup", i, pid)
		}
		if _, err := os.Stat(dirs[i]); !os.IsNotExist(err) {
			t.Errorf("ProxySQL %d's directory %s still exists: %v", i, dirs[i], err)
		}
	}
}

func TestProxySQLFleetNeedsN(t *testing.T) {
	if _, err := StartProxySQLFleet(context.Background(), FleetOptions{}); err == nil || !strings.Contains(err.Error(), "N > 0") {
		t.Errorf("fleet of 0: %v", err)
	}
}

// BenchmarkProxySQLFleet measures a fleet's start on this machine: the wall
// time from asking to every instance answering on both interfaces
// ("start-s") and the CPU each instance used for it ("start-cpu-s-each"),
// each instance's resident memory after one client query
// ("rss-MB-mean", "rss-MB-max", from /proc), and the CPU the idle fleet
// then uses over two seconds ("idle-cores"). Run it with -benchtime 1x.
func BenchmarkProxySQLFleet(b *testing.B) {
	RequireProxySQL(b)
	d := NewDatabase(b)
	for _, n := range []int{5, 20} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			parallel := 0 // the default
			if v := os.Getenv("HOLDTIME_FLEET_PARALLEL"); v != "" {
				parallel, _ = strconv.Atoi(v)
			}
			for b.Loop() {
				start := time.Now()
				fleet, err := StartProxySQLFleet(context.Background(), FleetOptions{ProxySQL: ProxySQLOptions{Backend: d.Target, Schema: d.Name}, N: n, Parallel: parallel})
				if err != nil {
					b.Fatal(err)
				}
				up := time.Since(start)
				startCPU := fleetCPU(b, fleet)
				var sum, most float64
				for _, p := range fleet {
					db, err := sql.Open("mysql", p.AppDSN())
					if err != nil {
						b.Fatal(err)
					}
					if _, err := db.Exec("SELECT 1"); err != nil {
						b.Fatal(err)
					}
					db.Close()
					rss := rssMB(b, p.Pid())
					sum += rss
					most = max(most, rss)
				}
				cpu0 := fleetCPU(b, fleet)
				t0 := time.Now()
				time.Sleep(2 * time.Second) // the measured interval itself
				idle := (fleetCPU(b, fleet) - cpu0) / time.Since(t0).Seconds()
				for _, p := range fleet {
					p.Close()
				}
				b.ReportMetric(up.Seconds(), "start-s")
				b.ReportMetric(startCPU/float64(n), "start-cpu-s-each")
				b.ReportMetric(sum/float64(n), "rss-MB-mean")
				b.ReportMetric(most, "rss-MB-max")
				b.ReportMetric(idle, "idle-cores")
			}
		})
	}
}

// rssMB is a process's resident set (VmRSS) in MiB.
func rssMB(tb testing.TB, pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		tb.Skipf("no /proc: %v", err)
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb / 1024
		}
	}
	tb.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// fleetCPU is the CPU seconds (user + system) the fleet's processes used so
// far, from /proc/PID/stat (in clock ticks of 1/100 s, Linux's USER_HZ).
func fleetCPU(tb testing.TB, fleet []*ProxySQL) float64 {
	var sum float64
	for _, p := range fleet {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.Pid()), "stat"))
		if err != nil {
			tb.Skipf("no /proc: %v", err)
		}
		// Fields after the command name, which is in parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		sum += (utime + stime) / 100
	}
	return sum
}
