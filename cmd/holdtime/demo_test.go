package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/testenv"
)

// TestDemoTellsTheStory runs the demo with halves just longer than the
// views' 10 s window: the hog is the top tag before the fix, its occupancy
// falls after, the tables show every layer, the closing lesson is read from
// the app layer, and the sale's books balance (the command fails
// otherwise). After the fix no tag is painted as waste unless conntag's own
// counters (not the spans the collector read) say the app wasted most of
// its hold.
func TestDemoTellsTheStory(t *testing.T) {
	testenv.Require(t)
	var stdout bytes.Buffer
	d := &demoCmd{}
	cmd := newDemoCmdFor(d)
	cmd.SetArgs([]string{"--duration", "22s", "--slow-call", "100ms", "--no-proxysql", "--no-redis-lesson", "--color", "always"})
	cmd.SetOut(&stdout)
	cmd.SetErr(io.Discard)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	out := stripANSI(stdout.String())
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
	// The fix removes the idle part of the hog's hold: its occupancy falls
	// by a fifth at least, by how much more depends on how slow the
	// statements left are (CI under load: 4.88 to 2.34, the hold 98 %
	// active after); its idle share goes from most of the hold to almost
	// none on any machine.
	if before < 1 || after > 0.8*before {
		t.Errorf("hog occupancy before %.2f, after %.2f: want it to fall by a fifth at least", before, after)
	}
	idle := field(hogTag + " idle share of hold")
	idleBefore, _ := strconv.ParseFloat(strings.TrimSuffix(idle[0], "%"), 64)
	idleAfter, _ := strconv.ParseFloat(strings.TrimSuffix(idle[1], "%"), 64)
	if idleBefore < 50 || idleAfter > 10 {
		t.Errorf("hog idle share before %.0f%%, after %.0f%%: want most of the hold idle before the fix, at most 10%% after", idleBefore, idleAfter)
	}
	// The sale's speed-up is claimed only when measured; otherwise the
	// demo says it was not faster, with both figures.
	if !regexp.MustCompile(`made the sale \d+\.\dx faster|The sale was not faster in this run \(\d+ reserves/s before, \d+ after\)`).MatchString(out) {
		t.Error("the demo neither measures a speed-up nor says the sale was not faster")
	}
	books := regexp.MustCompile(`oversold / undersold / leaked\s+0 / 0 / 0\s+0 / 0 / 0`)
	if !books.MatchString(out) {
		t.Error("the books line does not show 0 / 0 / 0 before and after")
	}
	if strings.Contains(out, "window reaches") {
		t.Error("halves longer than the window, yet the demo says its window reaches back")
	}
	if !strings.Contains(out, "/metrics") {
		t.Error("the demo does not print its /metrics address")
	}
	if !strings.Contains(out, "The hog, from the app layer") || !regexp.MustCompile(`app occupancy / idle share \(otlp\)\s+\d`).MatchString(out) {
		t.Error("the closing lesson is not read from the app layer")
	}
	// Each half's table has every layer the demo watches.
	if n := len(regexp.MustCompile(`(?m)^TAG\s+APP\s+IDLE\s+SERVER\s+IDLE\s+LAYER`).FindAllString(out, -1)); n != 2 {
		t.Errorf("%d tables with APP and SERVER columns, want one per half", n)
	}

	if len(d.results) != 2 {
		t.Fatalf("%d halves", len(d.results))
	}
	for _, half := range d.results {
		v := newTopView(half.top)
		for _, r := range half.top.Rows {
			for _, l := range collector.Layers {
				if !v.wasteAt(r, l) {
					continue
				}
				if truth := half.idleShare(r.Tag); truth < wasteIdleShare {
					t.Errorf("%s: %s painted as waste at the %s layer (%.0f%% idle there), but conntag counts %.0f%% of its app hold idle",
						half.name, r.Tag, l, 100*r.Layers[l].IdleShare, 100*truth)
				}
			}
		}
		// What the rule guards against: a busy tag the server sees idle.
		for _, r := range half.top.Rows {
			if s := r.Layers[collector.LayerServer]; s != nil && s.IdleShare >= wasteIdleShare && s.Occupancy >= wasteOccupancy &&
				half.idleShare(r.Tag) < wasteIdleShare {
				t.Logf("%s: %s is %.0f%% idle at the server, %.0f%% in the app: not painted", half.name, r.Tag,
					100*s.IdleShare, 100*half.idleShare(r.Tag))
			}
		}
	}
	if hog := d.results[0].top.Rows; len(hog) == 0 || hog[0].Tag != hogTag || !newTopView(d.results[0].top).wasteAt(hog[0], collector.LayerApp) {
		t.Errorf("before the fix the hog is not first and painted at the app layer: %+v", hog)
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

// TestDemoSaysWhenItsWindowReachesBack: halves shorter than the views' 10 s
// window make the after table reach back before the fix; the demo says so.
func TestDemoSaysWhenItsWindowReachesBack(t *testing.T) {
	testenv.Require(t)
	code, out, errOut := runCLI(t, "demo", "--duration", "4s", "--no-proxysql", "--no-redis-lesson", "--color", "never")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	if !strings.Contains(out, "window reaches 8s back into the half before the fix: give --duration 20s or more") {
		t.Errorf("no note that the after table reaches back before the fix:\n%s", out)
	}
}
