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
