package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if got := stdout.String(); got != "holdtime "+version+"\n" {
		t.Errorf("version printed %q", got)
	}
}

// TestHelp checks that every command has help with a short description
// and that an unknown command or flag is a one-line error, not a stack.
func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, cmd := range []string{"analyze", "collect", "dashboards", "demo", "flashsale", "testenv", "top", "version"} {
		if !strings.Contains(stdout.String(), "\n  "+cmd+" ") {
			t.Errorf("root help does not list %s:\n%s", cmd, stdout.String())
		}
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{cmd, "--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("%s --help: exit %d, %q", cmd, code, errOut.String())
		}
	}
	for _, args := range [][]string{{"frobnicate"}, {"top", "--no-such-flag"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code == 0 {
			t.Errorf("%v: exit 0", args)
		}
		msg := strings.TrimSpace(errOut.String())
		if !strings.HasPrefix(msg, "holdtime: ") || strings.Contains(msg, "\n") || strings.Contains(msg, "goroutine") {
			t.Errorf("%v: error is not one line: %q", args, errOut.String())
		}
	}
}
