package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/testenv"
)

func TestTestenvUp(t *testing.T) {
	testenv.Require(t)
	started := os.Getenv(testenv.DSNEnv) == "" // else it reuses that server and prints no credentials
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"testenv", "up"}, pw, &errOut)
		pw.Close()
	}()

	var dsn string
	var lines []string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if f := strings.Fields(line); len(f) > 1 && f[0] == "mysql:" {
			dsn = f[1]
		}
		if strings.HasPrefix(line, "ready:") {
			break
		}
	}
	if dsn == "" {
		t.Fatalf("no mysql: DSN line before ready (stderr %q):\n%s", errOut.String(), strings.Join(lines, "\n"))
	}
	if started {
		db := openDSN(t, dsn)
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("the printed DSN does not work: %v", err)
		}
		db.Close()
	}

	cancel()
	go io.Copy(io.Discard, pr) // the goodbye line
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after Ctrl-C, want 0: %s", code, errOut.String())
	}
	if started {
		db := openDSN(t, dsn)
		defer db.Close()
		if err := db.PingContext(t.Context()); err == nil {
			t.Fatal("the server still answers after testenv up stopped")
		}
	}
}

func openDSN(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("printed DSN %q does not parse: %v", dsn, err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sql.OpenDB(connector)
}

// shellWords splits a pasted command line as a POSIX shell would for the
// forms testenv up prints: words separated by spaces, single-quoted parts.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			cur.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.ContainsRune("\"$`\\;&|<>()", r):
			t.Fatalf("pasted line %q has %q outside single quotes: the shell would change it", line, r)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("pasted line %q leaves a quote open", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// TestTestenvUpPrintsLinesThatPaste runs each command testenv up prints, as
// pasted, and checks it works against the servers testenv up started.
func TestTestenvUpPrintsLinesThatPaste(t *testing.T) {
	testenv.Require(t)
	if os.Getenv(testenv.DSNEnv) != "" {
		t.Skip("testenv up prints no credentials of a server it did not start (" + testenv.DSNEnv + " is set)")
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"testenv", "up"}, pw, &errOut)
		pw.Close()
	}()
	defer func() {
		cancel()
		go io.Copy(io.Discard, pr)
		<-done
	}()
	var pasted [][]string
	sc := bufio.NewScanner(pr)
	paste := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "ready:") {
			break
		}
		if paste {
			words := shellWords(t, strings.TrimSpace(line))
			if len(words) < 2 || words[0] != "holdtime" {
				t.Fatalf("pasted line %q is not a holdtime command", line)
			}
			pasted = append(pasted, words[1:])
		}
		paste = paste || line == "paste into another terminal:"
	}
	commands := map[string][]string{}
	for _, args := range pasted {
		commands[args[0]] = args
	}
	for _, want := range []string{"top", "collect", "doctor", "flashsale"} {
		if commands[want] == nil {
			t.Fatalf("no %s line among %v (stderr %q)", want, pasted, errOut.String())
		}
	}
	if testenv.ProxySQLAvailable() && !strings.Contains(strings.Join(commands["collect"], " "), "--proxysql-events-log") {
		t.Errorf("the collect line names no events log: %v", commands["collect"])
	}

	t.Run("doctor", func(t *testing.T) {
		if code, out, errOut := runCLI(t, commands["doctor"]...); code != 0 {
			t.Errorf("exit %d:\n%s%s", code, out, errOut)
		}
	})
	t.Run("top", func(t *testing.T) {
		// --once: the pasted line refreshes until Ctrl-C; one table is what
		// this test reads.
		code, out, errOut := runCLI(t, append(commands["top"], "--once")...)
		if code != 0 || !strings.Contains(out, "TAG") {
			t.Errorf("exit %d:\n%s%s", code, out, errOut)
		}
	})
	t.Run("collect", func(t *testing.T) {
		// The listen address is the one change: the default port may be
		// taken by another run on this machine.
		cctx, ccancel := context.WithCancel(t.Context())
		cpr, cpw := io.Pipe()
		var cerr bytes.Buffer
		cdone := make(chan int, 1)
		go func() {
			cdone <- run(cctx, append(commands["collect"], "--listen", "127.0.0.1:0"), cpw, &cerr)
			cpw.Close()
		}()
		line, _ := bufio.NewReader(cpr).ReadString('\n')
		ccancel()
		go io.Copy(io.Discard, cpr)
		code := <-cdone
		if !strings.Contains(line, "serving on") || (code != 0 && code != 130) || cerr.Len() > 0 {
			t.Errorf("collect as pasted: first line %q, exit %d, stderr %q", line, code, cerr.String())
		}
	})
	t.Run("flashsale", func(t *testing.T) {
		if code, out, errOut := runCLI(t, commands["flashsale"]...); code != 0 {
			t.Errorf("exit %d:\n%s%s", code, out, errOut)
		}
	})
}
