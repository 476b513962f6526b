package main

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/testenv"
)

// TestFlashsaleServerThatNeverAnswers: --dsn at a server that accepts and
// never answers fails after --timeout with an error saying so, instead of
// hanging until killed.
func TestFlashsaleServerThatNeverAnswers(t *testing.T) {
	peer := silentPeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	var out, errOut syncBuffer
	code := run(ctx, []string{"flashsale", "--dsn", "app:pw@tcp(" + peer + ")/shop", "--timeout", "2s"}, &out, &errOut)
	took := time.Since(start)
	msg := errOut.String()
	if code != 1 || took > 15*time.Second || !strings.Contains(msg, "did not answer within 2s") || !strings.Contains(msg, peer) {
		t.Errorf("exit %d after %v: %q; want a failure after about 2s saying the server did not answer", code, took.Round(time.Millisecond), msg)
	}
}

// TestTopSaysWhatFailed: top fails at once on a failure waiting cannot fix,
// and its message matches the kind of source and the failure: a refused
// connection is not blamed on the password, a MySQL server is not told
// about ProxySQL's admin port.
func TestTopSaysWhatFailed(t *testing.T) {
	target := testenv.Shared(t)
	good := target.Config("")
	dead := deadAddr(t)
	silent := silentPeer(t)
	wrongPW := good.Clone()
	wrongPW.Passwd = "wrong-password"
	noDB := good.Clone()
	noDB.DBName = "no_such_db_holdtime"
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    []string
		notWant []string
		fast    bool // well before --timeout
	}{
		{"mysql refused", []string{"top", "--mysql", "app:pw@tcp(" + dead + ")/", "--timeout", "10s"},
			nil, []string{"MySQL server at " + dead, "refused the connection", "check the host and port"},
			[]string{"password", "credentials", "6032", "ProxySQL"}, true},
		{"proxysql refused", []string{"top", "--proxysql", "admin:pw@tcp(" + dead + ")/", "--timeout", "10s"},
			nil, []string{"ProxySQL admin interface at " + dead, "refused the connection", "6032"},
			[]string{"password", "credentials"}, true},
		{"wrong password", []string{"top", "--mysql", wrongPW.FormatDSN(), "--timeout", "10s"},
			nil, []string{"MySQL server at " + good.Addr, "refused the login", "user and password"},
			[]string{"6032", "ProxySQL"}, true},
		{"unknown database", []string{"top", "--mysql", noDB.FormatDSN(), "--timeout", "10s"},
			nil, []string{"MySQL server at " + good.Addr, "does not exist", "end the DSN with /"},
			[]string{"password", "6032"}, true},
		{"never answers", []string{"top", "--mysql", "app:pw@tcp(" + silent + ")/", "--timeout", "1s"},
			nil, []string{"--mysql " + silent, "sent no MySQL greeting"},
			[]string{"password", "6032"}, false},
		{"socket without NAME=", []string{"top", "--mysql", "app:pw@unix(/run/mysqld/mysqld.sock)/"},
			nil, []string{"put a name in front", "--mysql db1="}, nil, true},
		{"negative limit", []string{"top", "--collector", "http://127.0.0.1:1", "--limit", "-1"},
			nil, []string{"--limit -1"}, nil, true},
		{"';' in a password in HOLDTIME_MYSQL", []string{"top"},
			map[string]string{"HOLDTIME_MYSQL": "db1=app:p;w@tcp(" + dead + ")/"}, []string{"HOLDTIME_MYSQL", "';' separates", "--mysql"}, nil, true},
		{"';' in a password in HOLDTIME_MYSQL, collect", []string{"collect"},
			map[string]string{"HOLDTIME_MYSQL": "db1=app:p;w@tcp(" + dead + ")/"}, []string{"HOLDTIME_MYSQL", "';' separates", "--mysql"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			start := time.Now()
			var out, errOut syncBuffer
			args := tc.args
			if args[0] == "top" {
				args = append(args, "--once")
			}
			code := run(ctx, args, &out, &errOut)
			took := time.Since(start)
			msg := errOut.String()
			t.Logf("%v: %s", took.Round(time.Millisecond), msg)
			if code != 1 {
				t.Errorf("exit %d", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(msg, w) {
					t.Errorf("message says %q: not this failure's cause", w)
				}
			}
			if tc.fast && took > 5*time.Second {
				t.Errorf("took %v: a failure waiting cannot fix must not wait for --timeout", took)
			}
		})
	}
}

// TestFlashsaleMissingDatabase: --dsn naming a database that does not
// exist says so, directly or through ProxySQL (which accepts the login and
// fails the first statement), never "another Migrate held the lock".
func TestFlashsaleMissingDatabase(t *testing.T) {
	target := testenv.Shared(t)
	noDB := target.Config("")
	noDB.DBName = "no_such_db_holdtime"
	dsns := map[string]string{"mysql": noDB.FormatDSN()}
	if testenv.ProxySQLAvailable() && target.Server() != nil {
		d := testenv.NewDatabase(t)
		p, err := testenv.StartProxySQL(t.Context(), testenv.ProxySQLOptions{Backend: target, Schema: d.Name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		app := p.AppConfig()
		app.DBName = "no_such_db_holdtime"
		dsns["proxysql"] = app.FormatDSN()
	}
	for name, dsn := range dsns {
		t.Run(name, func(t *testing.T) {
			var out, errOut syncBuffer
			code := run(t.Context(), []string{"flashsale", "--dsn", dsn, "--buyers", "10", "--timeout", "10s"}, &out, &errOut)
			msg := errOut.String()
			t.Logf("%s", msg)
			if code != 1 || !strings.Contains(msg, "no_such_db_holdtime") || !strings.Contains(msg, "does not exist") ||
				strings.Contains(msg, "Migrate") {
				t.Errorf("exit %d: %q; want the missing database named as the cause", code, msg)
			}
		})
	}
}

// closingPeer listens on a loopback port and closes every connection it
// accepts before saying anything: the driver reads EOF where the server's
// greeting should be, and logs it.
func closingPeer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// TestDriverLogGoesThroughHoldtime: the binary's driver log lines are
// holdtime's own (one "holdtime:" line each, the password redacted), never
// the driver's raw "[mysql] ... packets.go:58 unexpected EOF".
func TestDriverLogGoesThroughHoldtime(t *testing.T) {
	bin := buildHoldtime(t)
	peer := closingPeer(t)
	cmd := exec.Command(bin, "flashsale", "--dsn", "app:s3cret-pw@tcp("+peer+")/shop", "--timeout", "5s")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	_ = cmd.Run()
	stderr := errOut.String()
	t.Logf("%s", stderr)
	if !strings.Contains(stderr, "mysql driver: ") {
		t.Fatalf("the driver logged nothing through holdtime (did it log at all?): %q", stderr)
	}
	for _, l := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if !strings.HasPrefix(l, "holdtime: ") || strings.Contains(l, "[mysql]") || strings.Contains(l, "s3cret-pw") {
			t.Errorf("a line not holdtime's: %q", l)
		}
	}
	if !strings.Contains(stderr, "did not answer as a MySQL server does") {
		t.Errorf("the error does not say the peer is no MySQL server (it said 'invalid connection'): %q", stderr)
	}
}
