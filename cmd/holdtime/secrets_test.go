package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// secretPW is distinctive: it appears in no message unless a password leaks.
const secretPW = "Zq9-S3cretPW"

// deadAddr returns a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// silentPeer accepts connections and never answers.
func silentPeer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestNoCommandEchoesAPassword runs every command with a DSN or URL carrying
// a distinctive password in every place a user may put it, by design or by
// slip: the password appears in neither stdout nor stderr, and the error is
// one line.
func TestNoCommandEchoesAPassword(t *testing.T) {
	dead := deadAddr(t)
	dsn := "monitor:" + secretPW + "@tcp(" + dead + ")/"
	dsnDB := "monitor:" + secretPW + "@tcp(" + dead + ")/shop"
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	u404 := strings.Replace(notFound.URL, "http://", "http://u:"+secretPW+"@", 1)
	cases := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"unknown command", []string{dsn}, nil},
		{"version DSN", []string{"version", dsn}, nil},
		{"top DSN", []string{"top", dsn}, nil},
		{"top --mysql NAME DSN", []string{"top", "--mysql", "db1", dsn}, nil},
		{"top --collector refused", []string{"top", "--collector", "http://u:" + secretPW + "@" + dead, "--once"}, nil},
		{"top --collector 404", []string{"top", "--collector", u404, "--once"}, nil},
		{"top --collector bad scheme", []string{"top", "--collector", "ftp://u:" + secretPW + "@127.0.0.1:1/"}, nil},
		{"top --collector unparsable", []string{"top", "--collector", "http://u:" + secretPW + "@[::1"}, nil},
		{"top --collector no host", []string{"top", "--collector", "http://u:" + secretPW + "@/x"}, nil},
		{"top --mysql refused", []string{"top", "--mysql", dsn, "--once", "--timeout", "3s"}, nil},
		{"top --proxysql refused", []string{"top", "--proxysql", dsn, "--once", "--timeout", "3s"}, nil},
		{"top --mysql bad form", []string{"top", "--mysql", "monitor:" + secretPW + "@tcp(127.0.0.1:3306"}, nil},
		{"top --mysql socket without NAME", []string{"top", "--mysql", "monitor:" + secretPW + "@unix(/no/such.sock)/", "--once"}, nil},
		{"top --limit DSN", []string{"top", "--collector", "http://127.0.0.1:1", "--limit", dsn}, nil},
		{"top --window DSN", []string{"top", "--collector", "http://127.0.0.1:1", "--window", dsn}, nil},
		{"top --filter DSN", []string{"top", "--collector", "http://127.0.0.1:1", "--filter", dsn + "("}, nil},
		{"top HOLDTIME_MYSQL", []string{"top", "--once", "--timeout", "3s"}, map[string]string{"HOLDTIME_MYSQL": dsn}},
		{"top HOLDTIME_MYSQL with ;", []string{"top", "--once"}, map[string]string{"HOLDTIME_MYSQL": "db1=monitor:Zq9;S3cretPW@tcp(" + dead + ")/"}},
		{"top HOLDTIME_COLLECTOR", []string{"top", "--once"}, map[string]string{"HOLDTIME_COLLECTOR": u404}},
		{"collect DSN", []string{"collect", dsn}, nil},
		{"collect --mysql NAME DSN", []string{"collect", "--mysql", "db1", dsn}, nil},
		{"collect --proxysql DSN", []string{"collect", "--proxysql", dsn}, nil},
		{"collect --listen DSN", []string{"collect", "--otlp", "--listen", dsn}, nil},
		{"collect --otlp-listen DSN", []string{"collect", "--otlp-listen", dsn}, nil},
		{"collect --record DSN", []string{"collect", "--otlp", "--listen", "127.0.0.1:0", "--record", "/dev/null/" + dsn}, nil},
		{"collect --max-tags DSN", []string{"collect", "--max-tags", dsn}, nil},
		{"collect --timeout=DSN", []string{"collect", "--timeout=" + dsn}, nil},
		{"collect HOLDTIME_MYSQL with ;", []string{"collect"}, map[string]string{"HOLDTIME_MYSQL": "db1=monitor:Zq9;S3cretPW@tcp(" + dead + ")/"}},
		{"collect HOLDTIME_TIMEOUT", []string{"collect", "--otlp"}, map[string]string{"HOLDTIME_TIMEOUT": dsn}},
		{"analyze DSN", []string{"analyze", dsn}, nil},
		{"analyze --processlist DSN", []string{"analyze", "--processlist", dsn}, nil},
		{"analyze --from DSN", []string{"analyze", "--from", dsn, workloadLog}, nil},
		{"analyze --format DSN", []string{"analyze", "--format", dsn, workloadLog}, nil},
		{"flashsale DSN", []string{"flashsale", dsn}, nil},
		{"flashsale --dsn refused", []string{"flashsale", "--dsn", dsnDB}, nil},
		{"flashsale --dsn bad form", []string{"flashsale", "--dsn", "monitor:" + secretPW + "@tcp(127.0.0.1:1"}, nil},
		{"flashsale --dsn no database", []string{"flashsale", "--dsn", dsn}, nil},
		{"flashsale --dsn silent", []string{"flashsale", "--dsn", "monitor:" + secretPW + "@tcp(" + silentPeer(t) + ")/shop", "--timeout", "1s"}, nil},
		{"flashsale --metrics-listen DSN", []string{"flashsale", "--metrics-listen", dsn, "--dsn", dsnDB}, nil},
		{"flashsale --strategy DSN", []string{"flashsale", "--strategy", dsn}, nil},
		{"testenv DSN", []string{"testenv", dsn}, nil},
		{"testenv up DSN", []string{"testenv", "up", dsn}, nil},
		{"dashboards DSN", []string{"dashboards", dsn}, nil},
		{"dashboards --out DSN", []string{"dashboards", "--out", filepath.Join("/dev/null", dsn)}, nil},
		{"demo DSN", []string{"demo", dsn}, nil},
		{"demo --listen DSN", []string{"demo", "--listen", dsn}, nil},
		{"demo --duration DSN", []string{"demo", "--duration", dsn}, nil},
		{"help of a DSN", []string{"help", dsn}, nil},
		{"flashsale --otlp-endpoint bad URL", []string{"flashsale", "--otlp-endpoint", "ftp://u:" + secretPW + "@h/"}, nil},
		{"flashsale --otlp-endpoint DSN", []string{"flashsale", "--otlp-endpoint", dsn}, nil},
		{"locks DSN", []string{"locks", dsn}, nil},
		{"locks --mysql refused", []string{"locks", "--mysql", dsn, "--timeout", "3s"}, nil},
		{"locks --mysql bad form", []string{"locks", "--mysql", "monitor:" + secretPW + "@tcp(x"}, nil},
		{"locks --mysql socket without NAME", []string{"locks", "--mysql", "monitor:" + secretPW + "@unix(/no/such.sock)/"}, nil},
		{"locks --interval DSN", []string{"locks", "--mysql", dsn, "--interval", dsn}, nil},
		{"locks HOLDTIME_MYSQL", []string{"locks", "--timeout", "3s"}, map[string]string{"HOLDTIME_MYSQL": dsn}},
		{"probe DSN", []string{"probe", dsn}, nil},
		{"probe URL refused", []string{"probe", "http://u:" + secretPW + "@" + dead + "/readyz"}, nil},
		{"probe URL 404", []string{"probe", u404 + "/readyz"}, nil},
		{"probe two arguments", []string{"probe", "mysql", dsn}, nil},
		{"probe mysql refused", []string{"probe", "mysql", "--dsn", dsn}, nil},
		{"probe mysql bad form", []string{"probe", "mysql", "--dsn", "monitor:" + secretPW + "@tcp(x"}, nil},
		{"probe mysql HOLDTIME_PROBE_DSN", []string{"probe", "mysql"}, map[string]string{"HOLDTIME_PROBE_DSN": dsn}},
		{"flashsale HOLDTIME_MYSQL_DSN", []string{"flashsale"}, map[string]string{"HOLDTIME_MYSQL_DSN": dsn}},
		{"testenv up HOLDTIME_MYSQL_DSN", []string{"testenv", "up"}, map[string]string{"HOLDTIME_MYSQL_DSN": dsn}},
		{"demo HOLDTIME_MYSQL_DSN", []string{"demo"}, map[string]string{"HOLDTIME_MYSQL_DSN": dsn}},
		{"demo HOLDTIME_MYSQL_DSN bad form", []string{"demo"}, map[string]string{"HOLDTIME_MYSQL_DSN": "monitor:" + secretPW + "@tcp(x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out, errOut syncBuffer
			code := run(ctx, tc.args, &out, &errOut)
			all := out.String() + errOut.String()
			for _, leak := range []string{secretPW, "S3cretPW", "Zq9;"} {
				if strings.Contains(all, leak) {
					t.Errorf("exit %d; %q leaked:\nstdout: %s\nstderr: %s", code, leak, out.String(), errOut.String())
				}
			}
			msg := strings.TrimSpace(errOut.String())
			if tc.name != "help of a DSN" {
				if code == 0 || !strings.HasPrefix(msg, "holdtime: ") || strings.Contains(msg, "\n") {
					t.Errorf("exit %d, stderr %q: want a failure in one line", code, msg)
				}
			}
			t.Logf("%s", msg)
		})
	}
}
