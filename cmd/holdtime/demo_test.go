package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/holdtime/holdtime/testenv"
)

// requireServer skips (or, under CI=true, fails) a test that starts its own
// server through a command when none can be had, as testenv.Shared does.
func requireServer(t *testing.T) {
	t.Helper()
	if testenv.Available() {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no MySQL-compatible server: install mariadb-server or set " + testenv.DSNEnv)
	}
	t.Skip("no MySQL-compatible server: install one with `sudo apt-get install -y mariadb-server` or set " + testenv.DSNEnv)
}

func TestDemoRanksTheHogFirst(t *testing.T) {
	requireServer(t)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--duration", "1s", "--slow-call", "50ms"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	t.Log("\n" + out)
	rows := regexp.MustCompile(`(?m)^\s*(\S+)\s+([\d.]+)\s+\d+\s+\S+\s+(\d+)%\s+\d+\s*$`).FindAllStringSubmatch(out, -1)
	if len(rows) < 2 {
		t.Fatalf("no table rows in output")
	}
	if rows[0][1] != "checkout_tax_quote" {
		t.Errorf("first row is %s, want the hog checkout_tax_quote", rows[0][1])
	}
	if idle, _ := strconv.Atoi(rows[0][3]); idle < 80 {
		t.Errorf("hog idle share %d%%, want most of its hold idle", idle)
	}
	if strings.Contains(out, "password") {
		t.Error("output mentions a password")
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--duration", "0s"}, &stdout, &stderr); code == 0 {
		t.Fatal("zero duration accepted")
	}
	if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n"); lines != 0 || !strings.HasPrefix(stderr.String(), "holdtime: ") {
		t.Errorf("error is not one line: %q", stderr.String())
	}
}
