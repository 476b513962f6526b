package testenv

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/internal/doctor"
)

const proxysqlDirPrefix = "holdtime-proxysql-"

// proxysqlAppUser is the account apps log in to ProxySQL with, and ProxySQL
// to the backend.
const proxysqlAppUser = "holdtime_app"

// ProxySQLOptions configures StartProxySQL.
type ProxySQLOptions struct {
	// Backend is the MySQL server ProxySQL sends queries to (hostgroup 0).
	// Required. Its admin account creates the app user on the backend.
	Backend *Target
	// Schema is the app user's default schema on the backend (optional).
	Schema string
	// Binary is the proxysql binary. Default: "proxysql" on PATH.
	Binary string
	// Threads is mysql-threads. Default 2.
	Threads int
	// Timeout bounds the start. Default 30 s.
	Timeout time.Duration
	// StatsUser and StatsPass are the admin interface's read-only account
	// (admin-stats_credentials), which sees the stats schema and nothing it
	// could change. Default: "holdtime_stats" with a random password.
	StatsUser string
	StatsPass string
	// DigestsDropComments sets mysql-query_digests_keep_comment=false,
	// ProxySQL's own default: digests (and the checks ProxySQL runs on
	// them) without comments. Default false: comments kept, as the
	// collector's digest source needs.
	DigestsDropComments bool
	// AppPass is the app account's password, on ProxySQL and on the
	// backend (StartProxySQL sets it there). ProxySQLs in front of one
	// backend must share it: each start sets the backend account's
	// password, so a different one would lock the others out of new
	// backend connections. Default: a random one (StartProxySQLFleet picks
	// one for the whole fleet).
	AppPass string

	// appPort and adminPort, when set, are the ports to listen on
	// (StartProxySQLFleet reserves them, all distinct, for the fleet).
	appPort, adminPort int
	// backendUserDone: the fleet made the backend account already.
	backendUserDone bool
	// configTail is appended to the config file (tests of a failed start).
	configTail string
}

// ProxySQL is a running throwaway ProxySQL in front of a test server, with
// mysql-query_digests_keep_comment=true (unless DigestsDropComments),
// mysql-show_processlist_extended=2 and a JSON events log of every query
// (mysql-eventslog_format=2).
type ProxySQL struct {
	AppAddr   string // the MySQL interface apps connect to
	AdminAddr string // the admin interface (stats tables)
	AppUser   string
	AppPass   string
	AdminUser string
	AdminPass string
	StatsUser string // the read-only admin account (stats_credentials)
	StatsPass string
	// EventsLog is the events log path prefix; ProxySQL appends a sequence
	// number (events.json.00000001, ...).
	EventsLog string
	Schema    string

	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
}

// ProxySQLAvailable reports whether a proxysql binary is on PATH.
func ProxySQLAvailable() bool { _, err := exec.LookPath("proxysql"); return err == nil }

// RequireProxyEnv, set to 1, makes RequireProxySQL fail instead of skip: CI
// sets it when it has put a proxysql binary on PATH, so that a live ProxySQL
// test can never pass by skipping there.
const RequireProxyEnv = "HOLDTIME_REQUIRE_PROXYSQL"

const proxysqlInstallHint = "proxysql is not on PATH: install it from ProxySQL's packages " +
	"(https://proxysql.com/documentation/installing-proxysql/) or put a proxysql binary on PATH"

// RequireProxySQL skips the test when no proxysql binary is on PATH, naming
// the install, as on a user's machine; with HOLDTIME_REQUIRE_PROXYSQL=1 it
// fails it instead.
func RequireProxySQL(tb testing.TB) {
	tb.Helper()
	if ProxySQLAvailable() {
		return
	}
	if os.Getenv(RequireProxyEnv) == "1" {
		tb.Fatal(proxysqlInstallHint + " (" + RequireProxyEnv + "=1 requires the live ProxySQL tests to run)")
	}
	tb.Skip(proxysqlInstallHint)
}

// The config file format is libconfig's, as in ProxySQL's etc/proxysql.cnf.
var proxysqlConfig = template.Must(template.New("proxysql.cnf").Parse(`datadir="{{.Dir}}"
errorlog="{{.Dir}}/proxysql.log"
admin_variables=
{
	admin_credentials="{{.AdminUser}}:{{.AdminPass}}"
	stats_credentials="{{.StatsUser}}:{{.StatsPass}}"
	mysql_ifaces="{{.AdminAddr}}"
	restapi_enabled=false
	web_enabled=false
}
mysql_variables=
{
	threads={{.Threads}}
	interfaces="{{.AppAddr}}"
	server_version="8.0.11"
	monitor_enabled=false
	poll_timeout=2000
{{range .SetupVariables}}	{{index . 0}}={{index . 1}}
{{end}}	eventslog_filename="{{.EventsLog}}"
	eventslog_format=2
	eventslog_default_log=1
}
mysql_servers=
(
	{ address="{{.BackendHost}}", port={{.BackendPort}}, hostgroup=0, max_connections=200 }
)
mysql_users=
(
	{ username="{{.AppUser}}", password="{{.AppPass}}", default_hostgroup=0, default_schema="{{.Schema}}", transaction_persistent=1, active=1 }
)
{{.ConfigTail}}`))

// StartProxySQL starts ProxySQL in front of opts.Backend and waits until both
// its admin and app interfaces answer. Without a proxysql binary it returns
// an error wrapping ErrNotInstalled.
func StartProxySQL(ctx context.Context, opts ProxySQLOptions) (_ *ProxySQL, err error) {
	bin := opts.Binary
	if bin == "" {
		if bin, err = exec.LookPath("proxysql"); err != nil {
			return nil, fmt.Errorf("testenv: %s: %w", proxysqlInstallHint, ErrNotInstalled)
		}
	}
	if opts.Backend == nil {
		return nil, fmt.Errorf("testenv: StartProxySQL needs a Backend")
	}
	// ProxySQL logs in to the backend with an account StartProxySQL creates.
	// On a server it did not start (HOLDTIME_MYSQL_DSN) that would leave an
	// account with every privilege behind, reachable from 127.0.0.1 only.
	if opts.Backend.Server() == nil {
		return nil, fmt.Errorf("testenv: ProxySQL runs only in front of a server testenv started, not the one %s names", DSNEnv)
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(opts.Timeout, 30*time.Second))
	defer cancel()
	reapLeftovers()

	dir, err := newRunDir("", proxysqlDirPrefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	appPort, adminPort := opts.appPort, opts.adminPort
	if appPort == 0 || adminPort == 0 {
		var err1, err2 error
		appPort, err1 = freePort()
		adminPort, err2 = freePort()
		for err1 == nil && err2 == nil && adminPort == appPort {
			adminPort, err2 = freePort()
		}
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("testenv: free port: %v %v", err1, err2)
		}
	}
	backendCfg := opts.Backend.Config("")
	host, port, err := net.SplitHostPort(backendCfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("testenv: ProxySQL needs a TCP backend, not %s: %w", opts.Backend.Redacted(), err)
	}
	p := &ProxySQL{
		AppAddr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(appPort)),
		AdminAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(adminPort)),
		AppUser:   proxysqlAppUser,
		AppPass:   cmp.Or(opts.AppPass, randomHex(8)),
		AdminUser: "holdtime_admin",
		AdminPass: randomHex(8),
		StatsUser: cmp.Or(opts.StatsUser, "holdtime_stats"),
		StatsPass: cmp.Or(opts.StatsPass, randomHex(8)),
		EventsLog: filepath.Join(dir, "events.json"),
		Schema:    opts.Schema,
		dir:       dir,
		done:      make(chan struct{}),
	}
	if !opts.backendUserDone {
		if err := createBackendUser(ctx, opts.Backend, p.AppUser, p.AppPass); err != nil {
			return nil, err
		}
	}
	seedProxySQLTLS(dir)
	cfgPath := filepath.Join(dir, "proxysql.cnf")
	f, err := os.Create(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	err = proxysqlConfig.Execute(f, map[string]any{
		"Dir": dir, "AdminUser": p.AdminUser, "AdminPass": p.AdminPass, "AdminAddr": p.AdminAddr,
		"StatsUser": p.StatsUser, "StatsPass": p.StatsPass,
		"AppAddr": p.AppAddr, "Threads": cmp.Or(opts.Threads, 2), "EventsLog": p.EventsLog,
		"SetupVariables": setupVariables(opts),
		"BackendHost":    host, "BackendPort": port, "AppUser": p.AppUser, "AppPass": p.AppPass, "Schema": opts.Schema,
		"ConfigTail": opts.configTail,
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("testenv: write %s: %w", cfgPath, err)
	}
	// -f: foreground; --initial: ignore any proxysql.db and take the file.
	p.cmd = exec.Command(bin, "-f", "--initial", "-c", cfgPath, "-D", dir)
	logFile, err := os.Create(filepath.Join(dir, "stdout.log"))
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	setDeathSignal(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("testenv: start proxysql: %w", err)
	}
	_ = os.WriteFile(filepath.Join(dir, "server.pid"), []byte(strconv.Itoa(p.cmd.Process.Pid)), 0o644)
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	for _, dsn := range []string{p.AdminDSN(), p.AppDSN()} {
		if err := waitSQL(ctx, dsn, p.done); err != nil {
			// Read the logs before Close removes the directory: a failed
			// start says why.
			logs := p.logTails(startLogLines)
			p.Close()
			return nil, fmt.Errorf("testenv: proxysql did not come up: %w\n%s", err, logs)
		}
	}
	keepProxySQLTLS(dir)
	return p, nil
}

// createBackendUser makes (or resets) the account ProxySQL logs in to the
// backend with: the app user, with the same password. ProxySQL 2.x
// authenticates to backends with mysql_native_password, which MySQL 8 must
// be told to use (8.4 starts with it enabled by serverArgs); MariaDB uses
// it by default.
func createBackendUser(ctx context.Context, backend *Target, user, pass string) error {
	identified := "IDENTIFIED BY '" + pass + "'"
	if backend.Flavor == MySQL {
		identified = "IDENTIFIED WITH mysql_native_password BY '" + pass + "'"
	}
	for _, q := range []string{
		"CREATE USER IF NOT EXISTS '" + user + "'@'127.0.0.1' " + identified,
		"ALTER USER '" + user + "'@'127.0.0.1' " + identified,
		"GRANT ALL PRIVILEGES ON *.* TO '" + user + "'@'127.0.0.1'",
	} {
		if _, err := backend.Admin().ExecContext(ctx, q); err != nil {
			return fmt.Errorf("testenv: create ProxySQL's backend user: %w", err)
		}
	}
	return nil
}

// AdminDSN is a DSN for ProxySQL's admin interface (the stats tables).
func (p *ProxySQL) AdminDSN() string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = p.AdminUser, p.AdminPass, "tcp", p.AdminAddr
	return cfg.FormatDSN()
}

// StatsDSN is a DSN for the admin interface's read-only account: what a
// collector needs, and nothing more.
func (p *ProxySQL) StatsDSN() string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = p.StatsUser, p.StatsPass, "tcp", p.AdminAddr
	return cfg.FormatDSN()
}

// AppDSN is a DSN for the app interface, using dbName (may be empty).
func (p *ProxySQL) AppDSN() string { return p.AppConfig().FormatDSN() }

// AppConfig returns a new driver config for the app interface.
func (p *ProxySQL) AppConfig() *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = p.AppUser, p.AppPass, "tcp", p.AppAddr, p.Schema
	cfg.ParseTime = true
	return cfg
}

// Pid is the ProxySQL process's id (0 before it started).
func (p *ProxySQL) Pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Dir is ProxySQL's private directory (config, datadir, logs).
func (p *ProxySQL) Dir() string { return p.dir }

// Close stops ProxySQL and removes its directory.
func (p *ProxySQL) Close() error {
	var err error
	p.once.Do(func() {
		if p.cmd != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		err = os.RemoveAll(p.dir)
	})
	return err
}

func waitSQL(ctx context.Context, dsn string, exited <-chan struct{}) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pingCtx, cancel := context.WithTimeout(ctx, time.Second)
		err = db.PingContext(pingCtx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("process exited during start")
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// startLogLines is how many of each log's last lines a failed start
// reports.
const startLogLines = 20

// logTails returns the last n lines of ProxySQL's stdout/stderr and of its
// error log, each under its name, with the instance's passwords blanked.
func (p *ProxySQL) logTails(n int) string {
	var b strings.Builder
	for _, name := range []string{"stdout.log", "proxysql.log"} {
		data, err := os.ReadFile(filepath.Join(p.dir, name))
		if err != nil {
			fmt.Fprintf(&b, "--- %s: %v\n", name, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		lines = lines[max(len(lines)-n, 0):]
		text := strings.Join(lines, "\n")
		for _, pw := range []string{p.AdminPass, p.AppPass, p.StatsPass} {
			if pw != "" {
				text = strings.ReplaceAll(text, pw, "xxx")
			}
		}
		fmt.Fprintf(&b, "--- last %d lines of %s:\n%s\n", len(lines), name, text)
	}
	return strings.TrimRight(b.String(), "\n")
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// setupVariables are the mysql_variables of holdtime's setup list
// (doctor.ProxySQLVariables), exactly as users are told to set them, with
// keep_comment turned off for DigestsDropComments.
func setupVariables(opts ProxySQLOptions) [][2]string {
	vars := doctor.ProxySQLVariables()
	for i, v := range vars {
		if v[0] == "query_digests_keep_comment" && opts.DigestsDropComments {
			vars[i][1] = "false"
		}
	}
	return vars
}
