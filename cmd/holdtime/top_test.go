package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// hogWorkload runs until ctx ends: "hog" keeps transactions open for 200 ms
// while it waits on nothing, "quick" runs short statements.
func hogWorkload(t *testing.T, ctx context.Context, d *testenv.Database) *sync.WaitGroup {
	t.Helper()
	connector, err := mysql.NewConnector(d.Config())
	if err != nil {
		t.Fatal(err)
	}
	db := conntag.OpenDB(connector, conntag.WithoutMetrics())
	t.Cleanup(func() { db.Close() })
	// The server sees a transaction only once it touches an InnoDB table.
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS carts (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	loop := func(tag string, step func(context.Context) error) {
		defer wg.Done()
		tctx := conntag.WithTag(ctx, tag)
		for ctx.Err() == nil {
			if err := step(tctx); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", tag, err)
				return
			}
		}
	}
	hog := func(ctx context.Context) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "SELECT COUNT(*) FROM carts"); err != nil {
			return err
		}
		select {
		case <-time.After(200 * time.Millisecond): // the hog's idle hold: the behaviour under observation
		case <-ctx.Done():
		}
		return tx.Commit()
	}
	quick := func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "SELECT 1")
		return err
	}
	wg.Add(3)
	go loop("hog", hog)
	go loop("hog", hog)
	go loop("quick", quick)
	return &wg
}

func TestTopRanksHogFirst(t *testing.T) {
	d := testenv.NewDatabase(t)
	ctx, cancel := context.WithCancel(context.Background())
	wg := hogWorkload(t, ctx, d)
	defer func() { cancel(); wg.Wait() }()

	check := func(t *testing.T, args []string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		var doc collector.TopResponse
		if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
			t.Fatalf("--json output is not JSON: %v\n%s", err, stdout.String())
		}
		if len(doc.Rows) == 0 || doc.Rows[0].Tag != "hog" {
			t.Fatalf("first row is not the hog: %s", stdout.String())
		}
		if doc.Rows[0].IdleShare < 0.5 {
			t.Errorf("hog idle share %.2f, want most of its hold idle", doc.Rows[0].IdleShare)
		}
	}
	t.Run("direct", func(t *testing.T) {
		check(t, []string{"top", "--mysql", d.DSN(), "--once", "--json", "--window", "10s", "--interval", "2s"})
	})
	t.Run("collector", func(t *testing.T) {
		c, err := collector.New(collector.Config{MySQL: []collector.MySQLConfig{{Name: "db", DSN: d.DSN(), Interval: 250 * time.Millisecond}}})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); c.Run(runCtx) }()
		defer func() { stop(); <-done }()
		srv := httptest.NewServer(c.Handler())
		defer srv.Close()
		// Wait until the collector's own ranking shows a few polls' worth.
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		timeout := time.After(20 * time.Second)
	wait:
		for {
			if rows := c.Top(10 * time.Second); len(rows) > 0 && rows[0].Tag == "hog" && rows[0].HoldSeconds > 0.4 {
				break
			}
			select {
			case <-tick.C:
			case <-timeout:
				break wait // check reports what the collector says
			}
		}
		check(t, []string{"top", "--collector", srv.URL, "--once", "--json", "--window", "10s"})
	})
	t.Run("table", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"top", "--mysql", d.DSN(), "--once", "--window", "10s", "--interval", "2s"}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		lines := strings.Split(stdout.String(), "\n")
		if len(lines) < 4 || !strings.Contains(lines[2], "OCCUPANCY") || !strings.Contains(lines[3], "hog") ||
			!strings.Contains(lines[1], "mysql up") {
			t.Errorf("table:\n%s", stdout.String())
		}
		if strings.Contains(stdout.String(), "\x1b[") {
			t.Error("colour codes written to a non-terminal")
		}
	})
}

func TestTopErrors(t *testing.T) {
	// A port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := l.Addr().String()
	l.Close()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no source":       {[]string{"top"}, "nothing to watch"},
		"bad window":      {[]string{"top", "--collector", "http://x", "--window", "2m"}, "use 10s, 1m or 5m"},
		"bad sort":        {[]string{"top", "--collector", "http://x", "--sort", "speed"}, "use one of"},
		"collector down":  {[]string{"top", "--collector", "http://" + deadAddr, "--once"}, "is `holdtime collect` running there?"},
		"bad DSN":         {[]string{"top", "--mysql", "root:s3cret@tcp(127.0.0.1:3306"}, "not a DSN"},
		"unreachable DSN": {[]string{"top", "--mysql", "root:s3cret@tcp(" + deadAddr + ")/", "--once", "--timeout", "1s"}, "refused the connection"},
		"negative limit":  {[]string{"top", "--collector", "http://x", "--limit", "-1"}, "--limit -1"},
		"zero timeout":    {[]string{"top", "--mysql", "root:s3cret@tcp(" + deadAddr + ")/", "--timeout", "0s"}, "--timeout 0s"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, &stdout, &stderr); code == 0 {
				t.Fatal("exit 0")
			}
			msg := stderr.String()
			if !strings.Contains(msg, tc.want) || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
				t.Errorf("error %q: want one line containing %q", msg, tc.want)
			}
			if strings.Contains(msg+stdout.String(), "s3cret") {
				t.Errorf("password in output: %q", msg)
			}
		})
	}
}
