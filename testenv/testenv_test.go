package testenv

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

func TestNewDatabaseIsolation(t *testing.T) {
	a := NewDatabase(t)
	b := NewDatabase(t)
	if a.Name == b.Name {
		t.Fatalf("two databases share the name %s", a.Name)
	}
	dbA, dbB := a.Open(t), b.Open(t)
	ctx := context.Background()
	if _, err := dbA.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := dbA.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	var n int
	err := dbB.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n)
	if err == nil {
		t.Fatalf("table from %s is visible in %s", a.Name, b.Name)
	}
	var current string
	if err := dbA.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&current); err != nil || current != a.Name {
		t.Fatalf("DATABASE() = %q, %v; want %q", current, err, a.Name)
	}
}

func TestDatabaseDroppedOnCleanup(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) {
		name = NewDatabase(t).Name
	})
	var n int
	err := Shared(t).Admin().QueryRow(
		"SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

func TestSharedServerShape(t *testing.T) {
	target := Shared(t)
	ctx := context.Background()
	var ps string
	if err := target.Admin().QueryRowContext(ctx, "SELECT @@performance_schema").Scan(&ps); err != nil {
		t.Fatal(err)
	}
	if ps != "1" {
		t.Errorf("performance_schema = %s, want 1", ps)
	}
	if target.Flavor == MariaDB != strings.Contains(strings.ToLower(target.Version), "mariadb") {
		t.Errorf("flavor %s does not match version %s", target.Flavor, target.Version)
	}
	s := target.Server()
	if s == nil {
		t.Skip("HOLDTIME_MYSQL_DSN is set: no started server to inspect")
	}
	host, _, _ := net.SplitHostPort(s.Addr)
	if host != "127.0.0.1" {
		t.Errorf("server bound to %s, want 127.0.0.1", s.Addr)
	}
	// The unix socket answers too.
	cfg := s.Config("")
	cfg.Net, cfg.Addr = "unix", s.Socket
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("socket %s: %v", s.Socket, err)
	}
}

// TestStartAndClose starts a second, private server next to the shared one
// (the case of two test binaries running at once) and checks that Close
// removes everything.
func TestStartAndClose(t *testing.T) {
	if os.Getenv(DSNEnv) != "" {
		t.Skip("HOLDTIME_MYSQL_DSN is set")
	}
	Shared(t) // skips or fails as the suite would when nothing is installed
	start := time.Now()
	s, err := StartMySQL(context.Background(), MySQLOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second server started in %v (%s %s)", time.Since(start), s.Flavor, s.Version)
	if shared := Shared(t).Server(); shared != nil && shared.Addr == s.Addr {
		t.Fatalf("second server reuses the shared address %s", s.Addr)
	}
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	dir := s.Dir()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("server directory %s still exists after Close: %v", dir, err)
	}
	conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Close", s.Addr)
	}
}

// TestReapLeftovers simulates a killed run: a server directory whose owner
// pid is dead, with a server process still running in it.
func TestReapLeftovers(t *testing.T) {
	if os.Getenv(DSNEnv) != "" {
		t.Skip("HOLDTIME_MYSQL_DSN is set")
	}
	Shared(t)
	s, err := StartMySQL(context.Background(), MySQLOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// A pid that cannot be alive: above the kernel's pid_max limit.
	if err := os.WriteFile(filepath.Join(s.Dir(), "owner.pid"), []byte("99999999"), 0o644); err != nil {
		t.Fatal(err)
	}
	reapLeftovers()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatal("leftover server was not killed")
	}
	if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover directory %s was not removed: %v", s.Dir(), err)
	}
	// The shared server, whose owner is alive, survives.
	if err := Shared(t).Admin().Ping(); err != nil {
		t.Fatalf("reaping hit a live server: %v", err)
	}
}

func TestDSNOverride(t *testing.T) {
	target := Shared(t)
	// Point a second target at the first one through the variable.
	t.Setenv(DSNEnv, target.Config("").FormatDSN())
	other, err := OpenTarget(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if other.Server() != nil {
		t.Fatal("OpenTarget started a server although HOLDTIME_MYSQL_DSN is set")
	}
	d, err := other.CreateDatabase(context.Background(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := target.Admin().QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", d.Name).Scan(&n); err != nil || n != 1 {
		t.Fatalf("database made through the DSN is not on the target server: n=%d err=%v", n, err)
	}
	if err := d.Drop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestBadDSNKeepsPasswordOut(t *testing.T) {
	t.Setenv(DSNEnv, "root:s3cret-pw@tcp(127.0.0.1:1)/?badparam=%zz")
	_, err := OpenTarget(context.Background())
	if err == nil {
		t.Fatal("no error for an unreachable DSN")
	}
	if strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("error leaks the password: %v", err)
	}
	t.Setenv(DSNEnv, "root:s3cret-pw@tcp(127.0.0.1:1)/")
	_, err = OpenTarget(context.Background())
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("unreachable server: err=%v", err)
	}
}

func TestNotInstalledMessage(t *testing.T) {
	_, err := findMySQL("/nonexistent/mariadbd")
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("err = %v, want ErrNotInstalled", err)
	}
	if !strings.Contains(err.Error(), "apt-get install") {
		t.Errorf("message does not name the install command: %v", err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := StartProxySQL(context.Background(), ProxySQLOptions{}); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("StartProxySQL without a binary: %v", err)
	}
	if _, err := StartPrometheus(context.Background(), PrometheusOptions{}); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("StartPrometheus without a binary: %v", err)
	}
}
