package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/flashsale"
	"github.com/holdtime/holdtime/testenv"
)

// flashsaleTarget opens a throwaway server for a test, or skips when none
// can be had outside CI.
func flashsaleTarget(t *testing.T) *testenv.Target {
	t.Helper()
	testenv.Require(t)
	target, err := testenv.OpenTarget(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Close() })
	return target
}

func TestFlashsaleReport(t *testing.T) {
	testenv.Require(t)
	code, out, errOut := runCLI(t, "flashsale", "--buyers", "200", "--concurrency", "8", "--items", "2",
		"--locations", "2", "--stock", "20", "--cart-size", "2", "--abandon-rate", "0.2", "--duration", "20s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{`strategy +skip_locked`, `throughput +[0-9.]+ reserves/s`, `p50 .*, p99 `,
		`sold +80 of 80 units`, `\noversold +0\n`, `\nundersold +0\n`, `\nleaked +0\n`, `retries +[0-9]+`, `refills +[0-9]+`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if errOut != "" {
		t.Errorf("stderr not empty (no progress bar off a terminal): %q", errOut)
	}
}

func TestFlashsaleCompareJSON(t *testing.T) {
	target := flashsaleTarget(t)
	d, err := target.CreateDatabase(t.Context(), "flashsale_cli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Drop(context.Background()) })
	code, out, errOut := runCLI(t, "flashsale", "--dsn", d.DSN(), "--compare", "--json", "--buyers", "60",
		"--concurrency", "4", "--stock", "50", "--tx-work", "1ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Server string `json:"server"`
		Runs   []struct {
			Strategy   string  `json:"strategy"`
			Throughput float64 `json:"throughput_per_second"`
			Sold       int64   `json:"sold"`
			Stock      int64   `json:"stock"`
			Oversold   int64   `json:"oversold"`
			Undersold  int64   `json:"undersold"`
			Leaked     int64   `json:"leaked"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out)
	}
	if len(doc.Runs) != 3 {
		t.Fatalf("--compare ran %d strategies, want 3: %s", len(doc.Runs), out)
	}
	for _, r := range doc.Runs {
		if r.Oversold != 0 || r.Leaked != 0 || r.Undersold != 0 || r.Sold != 50 || r.Throughput <= 0 {
			t.Errorf("%s: %+v", r.Strategy, r)
		}
	}
	if strings.Contains(doc.Server, "@tcp") && !strings.HasSuffix(doc.Server, "/"+d.Name) {
		t.Errorf("server = %q, want the database named", doc.Server)
	}
}

// TestFlashsaleCompareDefaults: --compare without --stock stocks 9/10 of
// the buyers, so the compared figure is reserving with stock available, and
// the buyers turned away are reported apart (the sold-out path).
func TestFlashsaleCompareDefaults(t *testing.T) {
	target := flashsaleTarget(t)
	d, err := target.CreateDatabase(t.Context(), "flashsale_cmp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Drop(context.Background()) })
	code, out, errOut := runCLI(t, "flashsale", "--dsn", d.DSN(), "--compare", "--json", "--buyers", "60", "--concurrency", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Runs []struct {
			Strategy            string  `json:"strategy"`
			Stock               int64   `json:"stock"`
			Sold                int64   `json:"sold"`
			Reserves            int64   `json:"reserves"`
			SoldOut             int64   `json:"sold_out"`
			Elapsed             float64 `json:"elapsed_seconds"`
			ReservingElapsed    float64 `json:"reserving_elapsed_seconds"`
			ReservingThroughput float64 `json:"reserving_throughput_per_second"`
			SoldOutAfter        int64   `json:"sold_out_after_last_unit"`
			SoldOutElapsed      float64 `json:"sold_out_elapsed_seconds"`
			SoldOutP50          float64 `json:"sold_out_p50_seconds"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out)
	}
	if len(doc.Runs) != 3 {
		t.Fatalf("--compare ran %d strategies, want 3: %s", len(doc.Runs), out)
	}
	for _, r := range doc.Runs {
		if r.Stock != 54 || r.Sold != 54 || r.Reserves != 54 || r.SoldOut != 6 {
			t.Errorf("%s: stock %d, sold %d, reserves %d, turned away %d; want 54 of 60 buyers served, 6 turned away",
				r.Strategy, r.Stock, r.Sold, r.Reserves, r.SoldOut)
		}
		if r.ReservingElapsed <= 0 || r.ReservingElapsed+r.SoldOutElapsed > r.Elapsed || r.SoldOutAfter > r.SoldOut || r.SoldOutP50 <= 0 {
			t.Errorf("%s: reserving %.4fs, sold out %.4fs (%d after the last unit, p50 %.4fs) in a sale of %.4fs",
				r.Strategy, r.ReservingElapsed, r.SoldOutElapsed, r.SoldOutAfter, r.SoldOutP50, r.Elapsed)
		}
		if want := float64(r.Reserves) / r.ReservingElapsed; math.Abs(r.ReservingThroughput-want) > want*1e-6 {
			t.Errorf("%s: reserving throughput %.1f/s, want reserves over the reserving part, %.1f/s", r.Strategy, r.ReservingThroughput, want)
		}
	}
}

// TestFlashsaleComparisonTable: the compared figure is reserving while stock
// lasts, not the whole sale's; the sold-out path is a table of its own.
func TestFlashsaleComparisonTable(t *testing.T) {
	rep := func(s reservation.Strategy, whole, reserving float64) flashsale.Report {
		return flashsale.Report{Strategy: s, Throughput: whole, ReservingThroughput: reserving, SoldOut: 10, SoldOutAfter: 9,
			SoldOutRate: whole * 3, SoldOutP50: 2 * time.Millisecond, SoldOutP99: 5 * time.Millisecond}
	}
	var b strings.Builder
	err := writeFlashsaleComparison(&b, []flashsale.Report{rep(reservation.StrategySkipLocked, 100, 500),
		rep(reservation.StrategyForUpdate, 90, 250), rep(reservation.StrategyCounter, 80, 100)})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{`reserving, while stock lasts`, `skip_locked +500\.0 +5\.00x +2\.00x `,
		`counter +100\.0 +1\.00x +0\.40x `, `\(sold \.\.\. refills count the whole sale`, `sold-out path, not in the comparison`,
		`refused +after the last unit +refusals/s`, `skip_locked +10 +9 +300\.0 +2ms +5ms`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("comparison lacks %q:\n%s", want, out)
		}
	}
}

func TestFlashsaleErrors(t *testing.T) {
	const secret = "s3cretPassw0rd"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dsn", "root:" + secret + "@tcp(127.0.0.1:1)/shop"}, "server at 127.0.0.1:1 refused the connection"},
		{[]string{"--dsn", "root:" + secret + "@nonsense(((/x"}, "--dsn is not a go-sql-driver/mysql DSN"},
		{[]string{"--dsn", "root:" + secret + "@tcp(127.0.0.1:1)/"}, "names no database"},
		{[]string{"--strategy", "fifo"}, "unknown --strategy"},
		{[]string{"--cart-size", "3", "--items", "2"}, "--cart-size 3 is more than --items 2"},
		{[]string{"--abandon-rate", "1.5"}, "--abandon-rate"},
		{[]string{"--buyers", "0"}, "--buyers 0"},
		{[]string{"--timeout", "0s"}, "--timeout 0s"},
		{[]string{"--metrics-listen", "nonsense"}, "--metrics-listen: the value given is not a host:port"},
	} {
		code, out, errOut := runCLI(t, append([]string{"flashsale"}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", c.args, code, errOut, c.want)
		}
		if strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.HasPrefix(errOut, "holdtime: ") {
			t.Errorf("%v: error is not one line: %q", c.args, errOut)
		}
		if strings.Contains(out+errOut, secret) {
			t.Errorf("%v: the password is printed: %q", c.args, out+errOut)
		}
	}
}

// TestFlashsaleServesMetrics scrapes --metrics-listen while a sale runs:
// the app side's tagged hold time is there for Prometheus.
func TestFlashsaleServesMetrics(t *testing.T) {
	testenv.Require(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	done := make(chan int, 1)
	go func() {
		code, _, _ := runCLI(t, "flashsale", "--buyers", "100000", "--concurrency", "4", "--stock", "100000",
			"--duration", "4s", "--metrics-listen", addr)
		done <- code
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	want := regexp.MustCompile(`holdtime_connection_hold_time_seconds_total\{[^}]*conn_tag="inventory_reserve"`)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want.Match(body) && strings.Contains(string(body), "holdtime_reservation_") {
				break
			}
		}
		select {
		case code := <-done:
			t.Fatalf("sale ended (exit %d) before /metrics showed the reserve hold", code)
		case <-tick.C:
		}
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestFlashsaleBooks: the line under an interrupted sale's report says the
// books balance, or names each reason they do not, and what is still held
// or was claimed as its buyer was cut off.
func TestFlashsaleBooks(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    flashsale.Report
		want string
	}{
		{"balanced", flashsale.Report{Stock: 100, Sold: 7, OnHand: 93, Paid: 7},
			"books balance: 7 sold + 93 on hand = 100 stocked, 0 oversold, 0 leaked"},
		{"held and claimed as cut off", flashsale.Report{Stock: 100, Sold: 8, OnHand: 92, Paid: 7, Held: 1, Undersold: 1},
			"books balance: 8 sold + 92 on hand = 100 stocked, 0 oversold, 0 leaked; 1 unit still held by buyers the signal " +
				"cut off before paying (they expire like any hold); 1 unit claimed as the signal cut their buyer off before the answer " +
				"(undersold: sold, nobody told)"},
		{"oversold and leaked", flashsale.Report{Stock: 150, Sold: 58, OnHand: 92, Paid: 67, Oversold: 9, Leaked: 5},
			"books DO NOT balance: 9 oversold; 5 leaked"},
		{"units lost", flashsale.Report{Stock: 100, Sold: 7, OnHand: 90, Paid: 7, Held: 2},
			"books DO NOT balance: 7 sold + 90 on hand is not the 100 stocked; 2 units still held by buyers the signal cut off " +
				"before paying (they expire like any hold)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := flashsaleBooks(tc.r); got != tc.want {
				t.Errorf("flashsaleBooks(%+v)\n got %s\nwant %s", tc.r, got, tc.want)
			}
		})
	}
}
