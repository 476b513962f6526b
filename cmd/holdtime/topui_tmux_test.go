package main

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// tmuxPane drives one program in a real terminal: a tmux server of its own,
// one window of a given size, keys sent as a person types them, the screen
// read back as the person sees it.
type tmuxPane struct {
	t      *testing.T
	socket string
}

func startTmux(t *testing.T, width, height int, command string) *tmuxPane {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("tmux is not installed: .ci/install-deps installs it")
		}
		t.Skip("tmux is not installed (apt-get install tmux)")
	}
	p := &tmuxPane{t: t, socket: fmt.Sprintf("holdtime-test-%d-%d", os.Getpid(), time.Now().UnixNano())}
	p.run("new-session", "-d", "-s", "top", "-x", fmt.Sprint(width), "-y", fmt.Sprint(height), command)
	p.run("set-option", "-t", "top", "remain-on-exit", "on")
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", p.socket, "kill-server").Run() })
	return p
}

func (p *tmuxPane) run(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", p.socket}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (p *tmuxPane) screen() string { return p.run("capture-pane", "-p", "-t", "top") }

func (p *tmuxPane) keys(keys ...string) {
	p.run(append([]string{"send-keys", "-t", "top"}, keys...)...)
}

// waitFor polls the screen until ok holds; the screen changes on the
// program's own schedule, and tmux gives no signal of a redraw.
func (p *tmuxPane) waitFor(what string, ok func(screen string) bool) string {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var s string
	for time.Now().Before(deadline) {
		s = p.screen()
		if ok(s) {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("screen never showed %s; last screen:\n%s", what, s)
	return ""
}

func (p *tmuxPane) dead() bool {
	return strings.TrimSpace(p.run("list-panes", "-t", "top", "-F", "#{pane_dead}")) == "1"
}

// tableTags returns the tags of the table's rows, in screen order.
func tableTags(screen string) []string {
	var tags []string
	inTable := false
	for _, l := range strings.Split(screen, "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimPrefix(l, "> "), "  "))
		if len(f) > 0 && f[0] == "TAG" {
			inTable = true
			continue
		}
		if !inTable || len(f) == 0 || strings.HasPrefix(l, "rows ") {
			if strings.HasPrefix(l, "rows ") {
				break
			}
			continue
		}
		tags = append(tags, f[0])
	}
	return tags
}

// rowFields returns the fields of the table row of tag.
func rowFields(screen, tag string) []string {
	for _, l := range strings.Split(screen, "\n") {
		f := strings.Fields(strings.TrimPrefix(l, "> "))
		if len(f) > 0 && f[0] == tag {
			return f
		}
	}
	return nil
}

func buildHoldtime(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "holdtime")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestTopConsoleInATerminal is the console's definition of done: top runs
// in a real terminal against a live collector while a hog holds
// connections idle in transactions; a person sorts, filters, pauses,
// switches layers, drills into the hog (its hottest frame read from the
// app's hold profile) and back, resizes the terminal, loses the collector
// and gets it back, then quits, and every screen is checked.
func TestTopConsoleInATerminal(t *testing.T) {
	d := testenv.NewDatabase(t)
	ctx, cancel := context.WithCancel(context.Background())
	// The workload is the app, serving its hold profile; every borrow
	// sampled, so the hog's are there by the time the test drills in.
	hp := conntag.NewHoldProfile(1)
	wg := hogWorkload(t, ctx, d, conntag.WithHoldProfile(hp))
	defer func() { cancel(); wg.Wait() }()
	profileURL := serveTestHoldProfile(t, hp)
	c := runTestCollector(t, collector.Config{MySQL: []collector.MySQLConfig{{Name: "db", DSN: d.DSN(), Interval: 200 * time.Millisecond}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) *httptest.Server {
		srv := httptest.NewUnstartedServer(c.Handler())
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		return srv
	}
	srv := serve(ln)
	defer func() { srv.Close() }()

	bin := buildHoldtime(t)
	p := startTmux(t, 160, 30, bin+" top --collector http://"+addr+" --interval 200ms --window 10s --color never --hold-profile "+profileURL)

	// The hog ranks first once the server layer covers 2 s.
	s := p.waitFor("the hog first with a figure", func(s string) bool {
		tags := tableTags(s)
		f := rowFields(s, "hog")
		return len(tags) > 0 && tags[0] == "hog" && len(f) > 1 && f[1] != "warming"
	})
	for _, want := range []string{"holdtime top", "ranked by max layer", "sort occupancy", "(? help, q quits)", "db/mysql up", "warming: the layer covers under 2s"} {
		if !strings.Contains(s, want) {
			t.Errorf("first screen lacks %q:\n%s", want, s)
		}
	}

	// Sort by tag, then by hold.
	p.keys("T")
	s = p.waitFor("sort tag", func(s string) bool { return strings.Contains(s, "sort tag") })
	if tags := tableTags(s); len(tags) < 2 || !(tags[0] < tags[1]) {
		t.Errorf("sorted by tag, rows are %v:\n%s", tags, s)
	}
	p.keys("H")
	s = p.waitFor("sort hold", func(s string) bool { return strings.Contains(s, "sort hold") })
	if tags := tableTags(s); len(tags) == 0 || tags[0] != "hog" {
		t.Errorf("sorted by hold, the hog is not first: %v\n%s", tags, s)
	}

	// Filter to the quick tag, then clear it.
	p.keys("/")
	p.waitFor("the filter prompt", func(s string) bool { return strings.Contains(s, "filter: /") })
	p.keys("qui", "Enter")
	s = p.waitFor("only quick", func(s string) bool {
		tags := tableTags(s)
		return strings.Contains(s, "filter /qui/") && len(tags) == 1 && tags[0] == "quick"
	})
	p.keys("/")
	p.waitFor("the filter prompt again", func(s string) bool { return strings.Contains(s, "filter: /qui") })
	p.keys("Escape")
	p.waitFor("the filter cleared", func(s string) bool { return !strings.Contains(s, "filter /") && len(tableTags(s)) >= 2 })

	// Pause: the clock in the title stops with the figures.
	p.keys("Space")
	s = p.waitFor("PAUSED", func(s string) bool { return strings.Contains(s, "PAUSED") })
	p.keys("Space")
	p.waitFor("resumed", func(s string) bool { return !strings.Contains(s, "PAUSED") })

	// Layers: the server ranks; the app layer has no source here.
	p.keys("s")
	p.waitFor("the server layer", func(s string) bool { return strings.Contains(s, "ranked by server layer") })
	p.keys("m")
	p.waitFor("max again", func(s string) bool { return strings.Contains(s, "ranked by max layer") })

	// Drill into the hog (the first row after Home) and back.
	p.keys("Home", "Enter")
	s = p.waitFor("the hog's drill-down", func(s string) bool { return strings.Contains(s, "tag hog") })
	for _, want := range []string{"LAYER", "server", "mysql", "every source"} {
		if !strings.Contains(s, want) {
			t.Errorf("drill-down lacks %q:\n%s", want, s)
		}
	}
	// What the collector says of the hog now: its open transactions (the
	// hog is in one most of the time), and what it cannot tell yet.
	s = p.waitFor("the hog's open transactions", func(s string) bool {
		return strings.Contains(s, "open transactions") && strings.Contains(s, "ProxySQL sessions holding now (0)")
	})
	if f := rowFields(s, "db"); len(f) < 4 || f[1] == "0" {
		t.Errorf("the hog's transactions row is %v:\n%s", f, s)
	}
	// The hog's hottest frame, as conntag names it: the hog's line in
	// hogWorkload that borrowed, from the profile top read over HTTP.
	frame, _ := conntag.HottestFrame(hp.Profile(), map[string]string{"conn_tag": "hog"})
	fn, loc, _ := strings.Cut(frame, " ")
	file, line, _ := strings.Cut(loc, ":")
	if !strings.Contains(fn, "hogWorkload") {
		t.Fatalf("conntag's hottest frame of the hog is %q, not hogWorkload's", frame)
	}
	want := shortFrame(fn, file, 0) + " top_test.go:" + line
	s = p.waitFor("the hog's hottest frame", func(s string) bool { return strings.Contains(framesPart(s), want) })
	if part := framesPart(s); !strings.Contains(part, "(the app's hold profile since ") {
		t.Errorf("the frames part:\n%s", part)
	}
	p.keys("Escape")
	p.waitFor("the table again", func(s string) bool { return strings.Contains(s, "rows ") && !strings.Contains(s, "tag hog") })

	// Help.
	p.keys("?")
	s = p.waitFor("help", func(s string) bool { return strings.Contains(s, "keys (any key returns)") })
	if !strings.Contains(s, "drill into the selected tag") {
		t.Errorf("help lacks the drill-down key:\n%s", s)
	}
	p.keys("x")
	p.waitFor("the table after help", func(s string) bool { return strings.Contains(s, "rows ") })

	// A terminal of 5 rows: the title stays, rows scroll, nothing overflows.
	p.run("resize-window", "-t", "top", "-x", "200", "-y", "5")
	s = p.waitFor("a 5-row screen", func(s string) bool {
		lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
		return len(lines) <= 5 && strings.HasPrefix(lines[0], "holdtime top") && strings.Contains(s, "TAG")
	})
	p.run("resize-window", "-t", "top", "-x", "200", "-y", "30")
	s = p.waitFor("a 200-column screen", func(s string) bool { return strings.Contains(s, "rows ") })
	for _, l := range strings.Split(s, "\n") {
		if len([]rune(l)) > 200 {
			t.Errorf("a line wider than the terminal: %q", l)
		}
	}

	// The collector goes away: the last table stays, marked DOWN; it comes
	// back, and so do live figures.
	srv.Close()
	s = p.waitFor("DOWN with the last table", func(s string) bool {
		return strings.Contains(s, "COLLECTOR DOWN") && len(tableTags(s)) >= 2
	})
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the collector's port was taken meanwhile: %v", err)
	}
	srv = serve(ln)
	p.waitFor("back up", func(s string) bool { return !strings.Contains(s, "DOWN") && len(tableTags(s)) >= 2 })

	p.keys("q")
	deadline := time.Now().Add(10 * time.Second)
	for !p.dead() {
		if time.Now().After(deadline) {
			t.Fatalf("q did not end top:\n%s", p.screen())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReadmeListsTopKeys keeps the README's key table equal to the help.
func TestReadmeListsTopKeys(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(topKeys, topReplayKeys...) {
		if row := "| " + k.keys + " | " + k.what + " |"; !strings.Contains(string(readme), row) {
			t.Errorf("README.md lacks the key row %q", row)
		}
	}
}
