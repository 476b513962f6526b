package testdata

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var write = flag.Bool("write", false, "write the capture into proxysql/ instead of a temporary folder")

// CaptureFile is the committed capture, relative to this folder.
const CaptureFile = "proxysql/processlist_extended_2.7.1.tsv"

// processlistQuery is the collector's processlist query, word for word,
// so the capture has exactly the columns the collector reads.
const processlistQuery = `SELECT ThreadID, SessionID, user, db, cli_host, cli_port, hostgroup, l_srv_host, l_srv_port, ` +
	`srv_host, srv_port, command, time_ms, info, status_flags, extended_info FROM stats_mysql_processlist`

// The sessions the capture drives, by state. The backend allows as many
// connections as there are holding sessions, so the waiting ones wait.
const (
	nRunning = 2 // a statement running on a backend (SELECT SLEEP)
	nIdleTx  = 2 // a transaction open, idle between statements, holding its backend
	nPinned  = 1 // no transaction, a user variable pins the backend
	nWaiting = 3 // a statement waiting for a backend
	nIdle    = 6 // connected, no backend
	nSamples = 3
)

// TestCaptureProcesslist starts a real ProxySQL (testenv: the setup the
// README gives, mysql-show_processlist_extended=2), drives client sessions
// into each state a processlist sample sees, samples stats_mysql_processlist
// with the collector's query through the read-only stats account, and
// writes the samples in the collector's recording layout. It checks that
// every state is in every sample and that the collector reads the file
// back. With -write it replaces CaptureFile.
func TestCaptureProcesslist(t *testing.T) {
	testenv.RequireProxySQL(t)
	d := testenv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	px, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	values := make([]string, 20)
	for i := range values {
		values[i] = fmt.Sprintf("(%d, 100)", i+1)
	}
	for _, q := range []string{"CREATE TABLE stock (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO stock VALUES " + strings.Join(values, ", ")} {
		if _, err := d.Open(t).ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	admin := open(t, px.AdminDSN())
	stats := open(t, px.StatsDSN())
	var version string
	if err := admin.QueryRowContext(ctx, "SELECT variable_value FROM global_variables WHERE variable_name = 'admin-version'").Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("ProxySQL %s", version)
	holding := nRunning + nIdleTx + nPinned
	for _, q := range []string{fmt.Sprintf("UPDATE mysql_servers SET max_connections = %d", holding), "LOAD MYSQL SERVERS TO RUNTIME"} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	connector, err := mysql.NewConnector(px.AppConfig())
	if err != nil {
		t.Fatal(err)
	}
	// conntag tags every statement, as an app would; no metrics needed.
	app := conntag.OpenDB(connector, conntag.WithoutMetrics())
	t.Cleanup(func() { app.Close() })
	conn := func(tag string) (*sql.Conn, context.Context) {
		t.Helper()
		cctx, stop := context.WithCancel(conntag.WithTag(ctx, tag))
		c, err := app.Conn(cctx)
		if err != nil {
			t.Fatal(err)
		}
		// Cancelling ends a statement still running or waiting (the
		// driver closes its connection), so Close does not wait for it.
		t.Cleanup(func() { stop(); c.Close() })
		return c, cctx
	}
	exec := func(c *sql.Conn, cctx context.Context, q string) {
		t.Helper()
		if _, err := c.ExecContext(cctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Plain idle sessions first: their statements borrow and return a
	// backend while backends are free.
	for i := range nIdle {
		c, cctx := conn("catalog_browse")
		exec(c, cctx, fmt.Sprintf("SELECT n FROM stock WHERE id = %d", i+1))
	}
	for i := range nIdleTx {
		c, cctx := conn("checkout_completion")
		exec(c, cctx, "BEGIN")
		exec(c, cctx, fmt.Sprintf("SELECT n FROM stock WHERE id = %d FOR UPDATE", 10+i))
	}
	for range nPinned {
		c, cctx := conn("cart_session")
		exec(c, cctx, "SET @cart = 1")
	}
	// Running and waiting statements block: they run in goroutines and
	// end when ProxySQL stops (t.Cleanup), their errors expected.
	for range nRunning {
		c, cctx := conn("report_export")
		go c.ExecContext(cctx, "SELECT SLEEP(60)")
	}
	if err := waitFor(ctx, stats, func(s census) bool { return s.running == nRunning }); err != nil {
		t.Fatal(err)
	}
	for range nWaiting {
		c, cctx := conn("inventory_reserve")
		go c.ExecContext(cctx, "UPDATE stock SET n = n - 1 WHERE id = 1")
	}
	want := census{running: nRunning, idleHolding: nIdleTx + nPinned, waiting: nWaiting, idle: nIdle}
	if err := waitFor(ctx, stats, func(s census) bool { return s == want }); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	if *write {
		dir = "."
	}
	path := filepath.Join(dir, CaptureFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := collector.NewProcesslistWriter(f)
	for i := range nSamples {
		if i > 0 {
			time.Sleep(250 * time.Millisecond) // the collector's default interval
		}
		at := time.Now()
		rows, err := sample(ctx, stats, at)
		if err != nil {
			t.Fatal(err)
		}
		if got := count(rows); got != want {
			t.Fatalf("sample %d: %+v, want %+v", i, got, want)
		}
		if err := w.Write(rows); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	checkCapture(t, path, want)
}

// TestCommittedCapture checks the committed file: the collector reads it
// without a malformed line, and every sample has every state.
func TestCommittedCapture(t *testing.T) {
	checkCapture(t, CaptureFile, census{running: nRunning, idleHolding: nIdleTx + nPinned, waiting: nWaiting, idle: nIdle})
}

func checkCapture(t *testing.T, path string, want census) {
	t.Helper()
	r, err := collector.OpenProcesslist([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	samples := map[time.Time][]collector.ProcesslistRow{}
	for r.Next() {
		row := *r.Row()
		samples[row.SampleTime] = append(samples[row.SampleTime], row)
		if !row.ExtendedInfo.Valid || !strings.HasPrefix(row.ExtendedInfo.String, "{") {
			t.Errorf("session %d without extended_info", row.SessionID)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if n, bad := r.Malformed(); n != 0 {
		t.Fatalf("%d malformed lines: %v", n, bad)
	}
	if len(samples) != nSamples {
		t.Errorf("%d samples, want %d", len(samples), nSamples)
	}
	for at, rows := range samples {
		if got := count(rows); got != want {
			t.Errorf("sample at %v: %+v, want %+v", at, got, want)
		}
	}
}

// census counts a sample's sessions by state, as the collector tells them:
// a backend (srv_host) with a statement running or without one, waiting
// for a backend (command Connect, no srv_host), idle without a backend.
type census struct{ running, idleHolding, waiting, idle int }

func count(rows []collector.ProcesslistRow) census {
	var c census
	for _, r := range rows {
		switch {
		case r.SrvHost.Valid && r.Info.Valid:
			c.running++
		case r.SrvHost.Valid:
			c.idleHolding++
		case r.Command.String == "Connect":
			c.waiting++
		case r.Command.String == "Sleep":
			c.idle++
		}
	}
	return c
}

func sample(ctx context.Context, stats *sql.DB, at time.Time) ([]collector.ProcesslistRow, error) {
	rows, err := stats.QueryContext(ctx, processlistQuery)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []collector.ProcesslistRow
	for rows.Next() {
		r := collector.ProcesslistRow{SampleTime: at}
		if err := rows.Scan(&r.ThreadID, &r.SessionID, &r.User, &r.DB, &r.CliHost, &r.CliPort, &r.Hostgroup,
			&r.LSrvHost, &r.LSrvPort, &r.SrvHost, &r.SrvPort, &r.Command, &r.TimeMS, &r.Info, &r.StatusFlags, &r.ExtendedInfo); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// waitFor samples until ok holds, every 20 ms, within ctx.
func waitFor(ctx context.Context, stats *sql.DB, ok func(census) bool) error {
	var last census
	for {
		rows, err := sample(ctx, stats, time.Now())
		if err != nil {
			return err
		}
		if last = count(rows); ok(last) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sessions never reached the wanted states; last sample %+v: %w", last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
