package testenv

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestProxySQLFailedStartSaysWhy: a ProxySQL that exits during start (here
// on a config it cannot parse) fails StartProxySQL with the last lines of
// its output, read before its directory is removed, and no password.
func TestProxySQLFailedStartSaysWhy(t *testing.T) {
	RequireProxySQL(t)
	d := NewDatabase(t)
	const pass = "app_pw_kept_out"
	_, err := StartProxySQL(context.Background(), ProxySQLOptions{Backend: d.Target, Schema: d.Name, AppPass: pass,
		configTail: "this is not a config\n"})
	if err == nil {
		t.Fatal("ProxySQL started on a config it cannot parse")
	}
	msg := err.Error()
	t.Log(msg)
	if !strings.Contains(msg, "process exited during start") || !strings.Contains(msg, "syntax error") {
		t.Errorf("failed start: %q, want the exit and ProxySQL's own parse error", msg)
	}
	if strings.Contains(msg, pass) {
		t.Errorf("failed start: the app password is in %q", msg)
	}
	// The directory is gone all the same.
	if m := regexp.MustCompile(`Parse error at (\S+)/proxysql\.cnf`).FindStringSubmatch(msg); m == nil {
		t.Errorf("failed start: no config path in %q", msg)
	} else if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("ProxySQL's directory %s is left behind (%v)", m[1], err)
	}
}
