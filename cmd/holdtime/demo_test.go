package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/holdtime/holdtime/testenv"
)

// TestDemoTellsTheStory runs the demo short: the hog is the top tag before
// the fix, its occupancy falls after, and the sale's books balance (the
// command fails otherwise).
func TestDemoTellsTheStory(t *testing.T) {
	testenv.Require(t)
	var stdout, stderr bytes.Buffer
	args := []string{"demo", "--duration", "6s", "--slow-call", "100ms", "--no-proxysql"}
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr.String(), stdout.String())
	}
	out := stdout.String()
	t.Log("\n" + out)
	field := func(label string) []string {
		m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(label) + `\s+(\S+)\s+(\S+)\s*$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no %q row in the summary", label)
		}
		return m[1:]
	}
	top := field("top tag by occupancy")
	if top[0] != hogTag {
		t.Errorf("top tag before the fix is %s, want %s", top[0], hogTag)
	}
	if top[1] == hogTag {
		t.Errorf("%s is still the top tag after the fix", hogTag)
	}
	occ := field(hogTag + " occupancy (connections)")
	before, _ := strconv.ParseFloat(occ[0], 64)
	after, _ := strconv.ParseFloat(occ[1], 64)
	if before < 1 || after > before/3 {
		t.Errorf("hog occupancy before %.2f, after %.2f: want it to fall", before, after)
	}
	books := regexp.MustCompile(`oversold / undersold / leaked\s+0 / 0 / 0\s+0 / 0 / 0`)
	if !books.MatchString(out) {
		t.Error("the books line does not show 0 / 0 / 0 before and after")
	}
	if !strings.Contains(out, "/metrics") {
		t.Error("the demo does not print its /metrics address")
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--duration", "1s"},
		{"demo", "--pool", "4", "--checkouts", "4"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code == 0 {
			t.Fatalf("%v accepted", args)
		}
		if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n"); lines != 0 || !strings.HasPrefix(stderr.String(), "holdtime: ") {
			t.Errorf("error is not one line: %q", stderr.String())
		}
	}
}
