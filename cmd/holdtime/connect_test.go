package main

import (
	"context"
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
