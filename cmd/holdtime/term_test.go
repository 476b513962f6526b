package main

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holdtime/holdtime/collector"
)

// openPTY opens a pseudo-terminal: the controlling side a test types into
// and reads the screen from, and the terminal a program sees.
func openPTY(t *testing.T) (control, term *os.File) {
	t.Helper()
	control, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { control.Close() })
	if err := unix.IoctlSetPointerInt(int(control.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(control.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Close() })
	unix.IoctlSetWinsize(int(term.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 60})
	return control, term
}

// screen collects what a program draws on the terminal.
func screen(control *os.File) *frames {
	f := newFrames()
	go io.Copy(f, control) // ends when the test closes the terminal
	return f
}

// liveTop runs top on the terminal term against a collector with nothing
// to report, until it returns.
func liveTop(t *testing.T, ctx context.Context, term *os.File) <-chan error {
	t.Helper()
	c, err := collector.New(collector.Config{OTLP: collector.OTLPConfig{Enabled: true, Target: "app"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	root := newRootCmd(term, io.Discard)
	root.SetIn(term)
	root.SetArgs([]string{"top", "--collector", srv.URL, "--interval", "100ms"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	return done
}

func termios(t *testing.T, f *os.File) unix.Termios {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return *tio
}

func waitDone(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: top returned %v", what, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: top did not end", what)
	}
}

// TestTopQuitsOnQ: on a terminal, q ends top at once, and the terminal is
// as it was: echo and line editing back, the main screen and the cursor
// back.
func TestTopQuitsOnQ(t *testing.T) {
	control, term := openPTY(t)
	before := termios(t, term)
	scr := screen(control)
	done := liveTop(t, context.Background(), term)
	scr.waitFor(t, "first refresh", 20*time.Second, func(s string) bool { return strings.Contains(s, "sources:") })
	if raw := termios(t, term); raw.Lflag&unix.ECHO != 0 || raw.Lflag&unix.ICANON != 0 {
		t.Error("the terminal still echoes and edits lines while top runs: q would need Enter")
	}
	control.Write([]byte("q"))
	waitDone(t, done, "q")
	if after := termios(t, term); after != before {
		t.Errorf("terminal not restored after q:\nbefore %+v\nafter  %+v", before, after)
	}
	out := scr.waitFor(t, "main screen back", 5*time.Second, restoredScreen)
	if line := strings.Split(stripANSI(out), "\n")[0]; len([]rune(strings.Trim(line, "\r"))) > 60 {
		t.Errorf("line not cut at the terminal's 60 columns: %q", line)
	}
}

// TestTopRestoresTheTerminalOnSignals: ended by a signal (SIGTERM, SIGHUP)
// or by its context (Ctrl-C through main), top restores the terminal.
func TestTopRestoresTheTerminalOnSignals(t *testing.T) {
	for _, how := range []string{"context", "SIGHUP", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			control, term := openPTY(t)
			before := termios(t, term)
			scr := screen(control)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := liveTop(t, ctx, term)
			// The first refresh is drawn after top took the terminal and
			// its signals.
			scr.waitFor(t, "first refresh", 20*time.Second, func(s string) bool { return strings.Contains(s, "sources:") })
			switch how {
			case "context":
				cancel()
			case "SIGHUP":
				syscall.Kill(os.Getpid(), syscall.SIGHUP)
			case "SIGTERM":
				syscall.Kill(os.Getpid(), syscall.SIGTERM)
			}
			waitDone(t, done, how)
			if after := termios(t, term); after != before {
				t.Errorf("terminal not restored after %s", how)
			}
			if out := scr.waitFor(t, "main screen back", 5*time.Second, restoredScreen); out == "" {
				t.Error("no output")
			}
		})
	}
}

// restoredScreen reports whether the output leaves the terminal as found:
// the main screen back after the last switch to the alternate one, and the
// cursor shown after it was last hidden.
func restoredScreen(s string) bool {
	return strings.LastIndex(s, "\x1b[?1049l") > strings.LastIndex(s, "\x1b[?1049h") &&
		strings.LastIndex(s, "\x1b[?25h") > strings.LastIndex(s, "\x1b[?25l")
}
