package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDashboardsWritesEveryDashboard(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"dashboards", "--out", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 4 {
		t.Fatalf("%d files written, want at least 4 dashboards", len(entries))
	}
	for _, e := range entries {
		if !strings.Contains(stdout.String(), e.Name()) {
			t.Errorf("output does not name %s:\n%s", e.Name(), stdout.String())
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			UID    string            `json:"uid"`
			Panels []json.RawMessage `json:"panels"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if d.UID+".json" != e.Name() || len(d.Panels) == 0 {
			t.Errorf("%s: uid %q, %d panels", e.Name(), d.UID, len(d.Panels))
		}
	}
}

func TestDashboardsNeedsOut(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"dashboards"}, &stdout, &stderr); code == 0 {
		t.Fatal("no --out accepted")
	}
	if got := stderr.String(); !strings.HasPrefix(got, "holdtime: --out is required") || strings.Count(got, "\n") != 1 {
		t.Errorf("error is not one actionable line: %q", got)
	}
}
