package collector

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestTargetsRejectBadDSN: a target built from a DSN that does not parse
// returns the error; it never keeps a nil pool that a poll would panic on.
func TestTargetsRejectBadDSN(t *testing.T) {
	c := &Collector{cfg: Config{Timeout: time.Second}, st: newStore(10, time.Now)}
	const bad = "app:hunter2@tcp(127.0.0.1:6032/"
	if _, err := newProxySQLTarget(c.st, c.cfg, c.board, c.router, ProxySQLConfig{Name: "px", DSN: bad}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("proxysql target from a bad DSN: %v; want an error without the password", err)
	}
	if _, err := newMySQLTarget(c.st, c.cfg, c.router, MySQLConfig{Name: "db", DSN: bad}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("mysql target from a bad DSN: %v; want an error without the password", err)
	}
	for _, cfg := range []Config{
		{ProxySQL: []ProxySQLConfig{{Name: "px", DSN: bad}}},
		{MySQL: []MySQLConfig{{Name: "db", DSN: bad}}},
		{MySQL: []MySQLConfig{{Name: "db"}}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted it", cfg)
		}
	}
}

func TestScrub(t *testing.T) {
	for _, tt := range []struct{ msg, secret, want string }{
		{"access denied for app:s3cret@db", "s3cret", "access denied for app:xxx@db"},
		{"dial: pw=ab", "ab", "dial: pw=xxx"},
		{"dial: pw=k", "k", "dial: pw=xxx"},
		{"no password here", "", "no password here"},
	} {
		if got := scrub(errors.New(tt.msg), tt.secret); got != tt.want {
			t.Errorf("scrub(%q, %q) = %q; want %q", tt.msg, tt.secret, got, tt.want)
		}
	}
}
