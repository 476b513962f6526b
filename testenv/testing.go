package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/internal/doctor"
)

// DSNEnv names the variable that points the suite at an existing server.
const DSNEnv = "HOLDTIME_MYSQL_DSN"

// Target is the server the tests of one binary share: either a throwaway
// server started on first use, or the one HOLDTIME_MYSQL_DSN names.
type Target struct {
	Flavor  Flavor
	Version string // SELECT VERSION()

	base   *mysql.Config // admin credentials, no database
	admin  *sql.DB
	server *MySQLServer // nil when HOLDTIME_MYSQL_DSN is used
}

// Server returns the started server, or nil when the target is an existing
// server named by HOLDTIME_MYSQL_DSN.
func (t *Target) Server() *MySQLServer { return t.server }

// Config returns a new driver config for the target's admin account, using
// dbName.
func (t *Target) Config(dbName string) *mysql.Config {
	cfg := t.base.Clone()
	cfg.DBName = dbName
	return cfg
}

// Admin is a pool connected as the admin account, with no default database.
// Tests use it to look at the server (performance_schema, KILL, ...).
func (t *Target) Admin() *sql.DB { return t.admin }

// Redacted describes the target without credentials, for messages.
func (t *Target) Redacted() string { return redact(t.base) }

func redact(cfg *mysql.Config) string {
	return fmt.Sprintf("%s@%s(%s)", cfg.User, cfg.Net, cfg.Addr)
}

// The server one test binary shares. This is test-helper state by design:
// "one server per test binary" needs exactly one place to keep it.
var shared struct {
	mu     sync.Mutex
	target *Target
	err    error
}

// Main runs a package's tests and stops the shared server afterwards. Use it
// from TestMain; without it the server is still killed when the binary exits
// (Linux) or reaped by the next run.
func Main(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	if shared.target != nil {
		shared.target.close()
		shared.target = nil
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// Shared returns the server shared by this test binary, starting it on first
// use. With no server available it skips the test (outside CI) or fails it
// (CI=true), naming the install command.
func Shared(tb testing.TB) *Target {
	tb.Helper()
	t, err := SharedTarget()
	if err != nil {
		if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true" {
			tb.Skipf("%v", err)
		}
		tb.Fatalf("%v", err)
	}
	return t
}

// SharedTarget is Shared for code that has no testing.TB, such as Example
// functions: it returns the binary's shared target, starting it on first use.
func SharedTarget() (*Target, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.target == nil && shared.err == nil {
		shared.target, shared.err = openTarget(context.Background())
	}
	return shared.target, shared.err
}

// Require skips the test when no server can be had (no binary installed and
// no HOLDTIME_MYSQL_DSN), naming the install command, and fails it instead
// under CI=true. Use it in tests that start a server of their own (through
// StartMySQL or a command) rather than the shared one.
func Require(tb testing.TB) {
	tb.Helper()
	if Available() {
		return
	}
	msg := "no MySQL-compatible server: " + installHint
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

// Available reports whether a server can be had (HOLDTIME_MYSQL_DSN is set
// or a supported binary is installed) without starting one.
func Available() bool {
	if os.Getenv(DSNEnv) != "" {
		return true
	}
	_, err := findMySQL("")
	return err == nil
}

// OpenTarget starts a throwaway server, or connects to HOLDTIME_MYSQL_DSN when
// it is set, for programs other than tests (the demo, `holdtime testenv up`).
// The caller must Close it.
func OpenTarget(ctx context.Context) (*Target, error) { return openTarget(ctx) }

// Close stops a started server, or just disconnects from an existing one.
func (t *Target) Close() error { return t.close() }

func openTarget(ctx context.Context) (*Target, error) {
	if dsn := os.Getenv(DSNEnv); dsn != "" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			// The parse error can echo the DSN: do not wrap it.
			return nil, fmt.Errorf("testenv: %s is not a go-sql-driver/mysql DSN (want user:pass@tcp(host:port)/)", DSNEnv)
		}
		cfg.DBName = ""
		cfg.ParseTime = true
		return connectTarget(ctx, cfg, nil)
	}
	s, err := StartMySQL(ctx, MySQLOptions{})
	if err != nil {
		return nil, err
	}
	t, err := connectTarget(ctx, s.Config(""), s)
	if err != nil {
		s.Close()
		return nil, err
	}
	return t, nil
}

func connectTarget(ctx context.Context, cfg *mysql.Config, s *MySQLServer) (*Target, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: %w", redact(cfg), err)
	}
	db := sql.OpenDB(connector)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("testenv: cannot query %s: %w", redact(cfg), err)
	}
	t := &Target{Flavor: MySQL, Version: version, base: cfg, admin: db, server: s}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		t.Flavor = MariaDB
	}
	return t, nil
}

func (t *Target) close() error {
	err := t.admin.Close()
	if t.server != nil {
		err = errors.Join(err, t.server.Close())
	}
	return err
}

// Database is a test's own database on the shared target.
type Database struct {
	Name   string
	Target *Target
}

// DSN is a go-sql-driver/mysql DSN for the database (parseTime=true).
func (d *Database) DSN() string { return d.Target.Config(d.Name).FormatDSN() }

// Config returns a new driver config for the database, to adjust and pass to
// mysql.NewConnector.
func (d *Database) Config() *mysql.Config { return d.Target.Config(d.Name) }

// Open returns a pool on the database, closed in t.Cleanup.
func (d *Database) Open(tb testing.TB) *sql.DB {
	tb.Helper()
	connector, err := mysql.NewConnector(d.Config())
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	db := sql.OpenDB(connector)
	tb.Cleanup(func() { db.Close() })
	return db
}

var unsafeName = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates a fresh database for the test on the shared target
// and drops it in t.Cleanup.
func NewDatabase(tb testing.TB) *Database {
	tb.Helper()
	target := Shared(tb)
	d, err := target.CreateDatabase(context.Background(), tb.Name())
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := d.Drop(context.Background()); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return d
}

// CreateDatabase creates a database whose name starts with ht_, carries hint
// (sanitised) and ends in a random suffix, so concurrent runs never collide.
func (t *Target) CreateDatabase(ctx context.Context, hint string) (*Database, error) {
	name := unsafeName.ReplaceAllString(strings.ToLower(hint), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name = "ht_" + strings.Trim(name, "_") + "_" + randomHex(4)
	if _, err := t.admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		return nil, fmt.Errorf("testenv: create database on %s: %w", t.Redacted(), err)
	}
	return &Database{Name: name, Target: t}, nil
}

// Drop removes the database.
func (d *Database) Drop(ctx context.Context) error {
	if _, err := d.Target.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+d.Name+"`"); err != nil {
		return fmt.Errorf("testenv: drop database %s: %w", d.Name, err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// CreateMonitor creates an account with exactly the privileges the README
// gives the collector's MySQL account (doctor.MonitorGrants: PROCESS and
// SELECT on performance_schema) and returns a config for it, with no
// database. Tests that read the server as the collector does use it, so a
// privilege the setup does not list fails them. Each call makes a new
// account, named from hint and a random suffix.
func (t *Target) CreateMonitor(ctx context.Context, hint string) (*mysql.Config, error) {
	user := unsafeName.ReplaceAllString(strings.ToLower(hint), "_")
	if len(user) > 20 {
		user = user[:20]
	}
	user = "mon_" + strings.Trim(user, "_") + "_" + randomHex(3)
	pass := randomHex(8)
	host := "%"
	stmts := append([]string{fmt.Sprintf("CREATE USER '%s'@'%s' IDENTIFIED BY '%s'", user, host, pass)},
		doctor.MonitorGrants(user, host)...)
	for _, q := range stmts {
		if _, err := t.admin.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("testenv: create the monitor account on %s: %w", t.Redacted(), err)
		}
	}
	cfg := t.base.Clone()
	cfg.User, cfg.Passwd, cfg.DBName = user, pass, ""
	return cfg, nil
}
