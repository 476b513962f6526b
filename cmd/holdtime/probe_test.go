package main

import (
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/testenv"
)

// oneLineError checks the way a failed probe reports: exit 1, nothing on
// stdout, one line on stderr containing want, and never the secret.
func oneLineError(t *testing.T, args []string, code int, out, errOut, want, secret string) {
	t.Helper()
	if code != 1 || out != "" {
		t.Errorf("%v: exit %d, stdout %q; want exit 1 and no output", args, code, out)
	}
	msg := strings.TrimSuffix(errOut, "\n")
	if !strings.HasPrefix(msg, "holdtime: ") || strings.Contains(msg, "\n") {
		t.Errorf("%v: error is not one line: %q", args, errOut)
	}
	if !strings.Contains(msg, want) {
		t.Errorf("%v: error %q lacks %q", args, msg, want)
	}
	if secret != "" && strings.Contains(out+errOut, secret) {
		t.Errorf("%v: the password is printed: %q", args, out+errOut)
	}
}

func TestProbeHTTP(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("sources down: px/proxysql_processlist\nsecond line\n"))
			return
		}
		w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	withPass := strings.Replace(srv.URL, "http://", "http://probe:pr0bepass@", 1)

	args := []string{"probe", withPass + "/readyz"}
	code, out, errOut := runCLI(t, args...)
	oneLineError(t, args, code, out, errOut, "503 Service Unavailable: sources down: px/proxysql_processlist", "pr0bepass")
	if strings.Contains(errOut, "second line") {
		t.Errorf("more than the first line of the body: %q", errOut)
	}

	ready.Store(true)
	code, out, errOut = runCLI(t, args...)
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "ok ") || !strings.Contains(out, "200 OK") {
		t.Errorf("healthy: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if strings.Contains(out, "pr0bepass") {
		t.Errorf("the password is printed: %q", out)
	}

	args = []string{"probe", srv.URL + "/nope"}
	code, out, errOut = runCLI(t, args...)
	oneLineError(t, args, code, out, errOut, "404 Not Found", "")
}

func TestProbeHTTPDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	args := []string{"probe", "http://" + addr + "/healthz"}
	code, out, errOut := runCLI(t, args...)
	oneLineError(t, args, code, out, errOut, "connection refused", "")
}

// TestProbeTimeout: a server that accepts and never answers costs the
// probe --timeout, not the health check's own (longer) kill timeout.
func TestProbeTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	args := []string{"probe", "--timeout", "300ms", srv.URL + "/readyz"}
	start := time.Now()
	code, out, errOut := runCLI(t, args...)
	took := time.Since(start)
	oneLineError(t, args, code, out, errOut, "no answer within 300ms", "")
	if took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("probe took %v with --timeout 300ms", took)
	}
}

func TestProbeRejectsBadInputWithoutEchoingIt(t *testing.T) {
	const secret = "s3cretpw"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"probe", "admin:" + secret + "@tcp(127.0.0.1:6032)/"}, "an http:// or https:// URL, or the word mysql"},
		{[]string{"probe", "ftp://u:" + secret + "@host/x"}, "an http:// or https:// URL"},
		{[]string{"probe", "mysql", "--dsn", "admin:" + secret + "@nonsense(((/x"}, "--dsn is not a go-sql-driver/mysql DSN"},
		{[]string{"probe", "mysql"}, "probe mysql needs --dsn"},
		{[]string{"probe", "--timeout", "0s", "http://127.0.0.1:1/"}, "--timeout must be positive"},
	} {
		t.Setenv(probeDSNEnv, "")
		code, out, errOut := runCLI(t, c.args...)
		oneLineError(t, c.args, code, out, errOut, c.want, secret)
	}
}

func TestProbeMySQL(t *testing.T) {
	target := testenv.Shared(t)
	cfg := target.Config("")
	dsn := cfg.FormatDSN()
	for _, c := range []struct {
		query string
		want  string // "" for healthy
	}{
		{"SELECT 1", ""},
		{"SELECT 'yes'", ""},
		{"SELECT 0", `returned "0", not healthy`},
		{"SELECT NULL", "returned NULL, not healthy"},
		{"SELECT ''", `returned "", not healthy`},
		{"SELECT 1 FROM DUAL WHERE 1 = 0", "returned no row"},
		{"SELECT * FROM no_such_table", "Error 1046"},
	} {
		args := []string{"probe", "mysql", "--dsn", dsn, "--query", c.query}
		code, out, errOut := runCLI(t, args...)
		if c.want == "" {
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "ok mysql "+cfg.User+"@tcp(") {
				t.Errorf("%s: exit %d, stdout %q, stderr %q", c.query, code, out, errOut)
			}
		} else {
			oneLineError(t, args, code, out, errOut, c.want, "")
		}
		if cfg.Passwd != "" && strings.Contains(out+errOut, cfg.Passwd) {
			t.Errorf("%s: the password is printed: %q", c.query, out+errOut)
		}
	}

	// The DSN from the environment, and a wrong password.
	t.Setenv(probeDSNEnv, dsn)
	if code, out, errOut := runCLI(t, "probe", "mysql"); code != 0 {
		t.Errorf("$%s: exit %d, %q %q", probeDSNEnv, code, out, errOut)
	}
	bad := cfg.Clone()
	bad.Passwd = "wr0ngPassword"
	args := []string{"probe", "mysql", "--dsn", bad.FormatDSN()}
	code, out, errOut := runCLI(t, args...)
	oneLineError(t, args, code, out, errOut, "Access denied", "wr0ngPassword")
}

// TestProbeMySQLTimeout: a server that accepts TCP and never sends its
// handshake costs --timeout.
func TestProbeMySQLTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	args := []string{"probe", "mysql", "--timeout", "300ms", "--dsn", "u:p4ssword@tcp(" + l.Addr().String() + ")/"}
	start := time.Now()
	code, out, errOut := runCLI(t, args...)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("probe took %v with --timeout 300ms", took)
	}
	oneLineError(t, args, code, out, errOut, "no answer within 300ms", "p4ssword")
}

// TestProbeMySQLClosed: a server that closes the connection at once is one
// line on stderr, and the driver does not log lines of its own as well.
func TestProbeMySQLClosed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// The driver's default logger writes to the process's stderr, which
	// runCLI does not capture: catch it here.
	var logged syncBuffer
	mysql.SetLogger(log.New(&logged, "[mysql] ", 0))
	defer mysql.SetLogger(log.New(os.Stderr, "[mysql] ", log.Ldate|log.Ltime))
	args := []string{"probe", "mysql", "--dsn", "u:p4ssword@tcp(" + l.Addr().String() + ")/"}
	code, out, errOut := runCLI(t, args...)
	oneLineError(t, args, code, out, errOut, "the connection closed before the server answered", "p4ssword")
	if logged.String() != "" {
		t.Errorf("the driver logged besides the probe's line: %q", logged.String())
	}
}

func TestProbeHelp(t *testing.T) {
	code, out, errOut := runCLI(t, "--help")
	if code != 0 || !strings.Contains(out, "\n  probe ") {
		t.Errorf("root help does not list probe: exit %d, %q", code, errOut)
	}
	code, out, errOut = runCLI(t, "probe", "--help")
	if code != 0 || !strings.Contains(out, "Usage:") || !strings.Contains(out, "holdtime probe http://127.0.0.1:9479/readyz") {
		t.Errorf("probe --help: exit %d, %q %q", code, out, errOut)
	}
	args := []string{"probe"}
	code, out, errOut = runCLI(t, args...)
	oneLineError(t, args, code, out, errOut, "accepts 1 arg(s)", "")
}
