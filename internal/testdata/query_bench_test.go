package testdata

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

	"github.com/holdtime/holdtime/testenv"
)

// BenchmarkProcesslistQuery measures what a processlist query costs
// ProxySQL 2.7.1 (mysql-show_processlist_extended=2) with many idle client
// sessions and a few holding a backend: does asking for fewer rows or
// columns make ProxySQL do less? Per variant it reports the client's wall
// time per query and ProxySQL's own CPU per query ("proxysql-cpu-ms", from
// /proc), and the rows returned. Variants: the collector's query (full),
// the same without extended_info, the same filtered to sessions that hold
// or wait for a backend, and COUNT(*); then the full query with
// mysql-show_processlist_extended=1 (compact JSON), and the full query and
// COUNT(*) with it 0. Run it with -benchtime 20x.
func BenchmarkProcesslistQuery(b *testing.B) {
	testenv.RequireProxySQL(b)
	d := testenv.NewDatabase(b)
	ctx := context.Background()
	px, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { px.Close() })
	stats := open(b, px.StatsDSN())
	admin := open(b, px.AdminDSN())
	extended := func(v int) {
		for _, q := range []string{fmt.Sprintf("SET mysql-show_processlist_extended = %d", v), "LOAD MYSQL VARIABLES TO RUNTIME"} {
			if _, err := admin.ExecContext(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
	}
	app := open(b, px.AppDSN())
	const holding = 5
	var kept []*sql.Conn // open client sessions, closed at the end
	b.Cleanup(func() {
		for _, c := range kept {
			c.Close()
		}
	})
	keep := func(c *sql.Conn) { kept = append(kept, c) }
	idleNow := 0
	for _, idle := range []int{1000, 4000} {
		for ; idleNow < idle; idleNow++ {
			c, err := app.Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := c.PingContext(ctx); err != nil {
				b.Fatal(err)
			}
			keep(c)
		}
		if idle == 1000 {
			for range holding {
				c, err := app.Conn(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.ExecContext(ctx, "BEGIN"); err != nil {
					b.Fatal(err)
				}
				if _, err := c.ExecContext(ctx, "SELECT 1"); err != nil {
					b.Fatal(err)
				}
				keep(c)
			}
		}
		for _, v := range []struct {
			name, query string
			extended    int
		}{
			{"full", processlistQuery, 2},
			{"no_extended_info", strings.Replace(processlistQuery, ", extended_info", "", 1), 2},
			{"filtered", processlistQuery + " WHERE srv_host IS NOT NULL OR command = 'Connect'", 2},
			{"count", "SELECT COUNT(*) FROM stats_mysql_processlist", 2},
			{"full_extended_1", processlistQuery, 1},
			{"full_extended_off", processlistQuery, 0},
			{"count_extended_off", "SELECT COUNT(*) FROM stats_mysql_processlist", 0},
		} {
			extended(v.extended)
			b.Run(fmt.Sprintf("sessions=%d/%s", idle+holding, v.name), func(b *testing.B) {
				var rows int
				cpu0 := procCPU(b, px.Pid())
				for b.Loop() {
					n, err := drain(ctx, stats, v.query)
					if err != nil {
						b.Fatal(err)
					}
					rows = n
				}
				b.StopTimer()
				cpu := procCPU(b, px.Pid()) - cpu0
				b.ReportMetric(cpu*1e3/float64(b.N), "proxysql-cpu-ms")
				b.ReportMetric(float64(rows), "rows")
			})
		}
	}
}

// drain runs q and reads every row, as the collector does, returning the
// number of rows.
func drain(ctx context.Context, db *sql.DB, q string) (int, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// procCPU is the CPU seconds (user + system) process pid used so far, from
// /proc/PID/stat (clock ticks of 1/100 s).
func procCPU(tb testing.TB, pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		tb.Skipf("no /proc: %v", err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}
