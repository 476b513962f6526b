package doctor_test

import (
	"context"
	"database/sql"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/internal/doctor"
	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func startProxySQL(t *testing.T) *testenv.ProxySQL {
	t.Helper()
	testenv.RequireProxySQL(t)
	target := testenv.Shared(t)
	p, err := testenv.StartProxySQL(context.Background(), testenv.ProxySQLOptions{Backend: target})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func cfgFor(t *testing.T, user, pass, addr string) *mysql.Config {
	t.Helper()
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr = user, pass, "tcp", addr
	return c
}

func open(t *testing.T, cfg *mysql.Config) *sql.DB {
	t.Helper()
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })
	return db
}

// silentListener accepts connections and never writes, as an HTTP or Redis
// port does before the client speaks.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { <-done; c.Close() }()
		}
	}()
	return l.Addr().String()
}

func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestIdentifyNamesEveryKindOfEndpointWithinASecond(t *testing.T) {
	target := testenv.Shared(t)
	p := startProxySQL(t)
	mysqlCfg := target.Config("")
	http := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(http.Close)

	for _, tc := range []struct {
		name    string
		cfg     *mysql.Config
		want    doctor.Kind
		refused bool
		detail  string
	}{
		{"a MariaDB server", mysqlCfg, doctor.KindMySQL, false, ""},
		{"ProxySQL's admin interface", cfgFor(t, p.StatsUser, p.StatsPass, p.AdminAddr), doctor.KindProxySQLAdmin, false, ""},
		{"ProxySQL's client interface", cfgFor(t, p.AppUser, p.AppPass, p.AppAddr), doctor.KindProxySQLClient, false, ""},
		{"ProxySQL's client port with admin credentials", cfgFor(t, p.StatsUser, p.StatsPass, p.AppAddr), doctor.KindProxySQL, true, ""},
		{"ProxySQL's admin port with the server's credentials", cfgFor(t, mysqlCfg.User, mysqlCfg.Passwd, p.AdminAddr), doctor.KindProxySQL, true, ""},
		{"a MariaDB server with a wrong password", cfgFor(t, mysqlCfg.User, "wrong", mysqlCfg.Addr), doctor.KindMySQL, true, ""},
		{"a port that never greets", cfgFor(t, "u", "p", silentListener(t)), doctor.KindNotMySQL, false, "sent no MySQL greeting"},
		{"an HTTP server", cfgFor(t, "u", "p", strings.TrimPrefix(http.URL, "http://")), doctor.KindNotMySQL, false, "sent no MySQL greeting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			ep, err := doctor.Identify(context.Background(), tc.cfg)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("Identify: %v", err)
			}
			if ep.Kind != tc.want || ep.LoginRefused != tc.refused {
				t.Fatalf("got %+v, want kind %s refused=%v", ep, tc.want, tc.refused)
			}
			if !strings.Contains(ep.Detail, tc.detail) {
				t.Errorf("detail %q does not say %q", ep.Detail, tc.detail)
			}
			if took > doctor.IdentifyTimeout+200*time.Millisecond {
				t.Errorf("took %v, more than its bound %v", took, doctor.IdentifyTimeout)
			}
			if tc.want == doctor.KindMySQL && ep.Flavor != string(target.Flavor) {
				t.Errorf("flavor %q, want %q", ep.Flavor, target.Flavor)
			}
			t.Logf("%s: %s", tc.name, ep.Describe())
		})
	}

	t.Run("nothing listening", func(t *testing.T) {
		ep, err := doctor.Identify(context.Background(), cfgFor(t, "u", "p", closedPort(t)))
		if err == nil || ep.Kind != doctor.KindUnreachable {
			t.Fatalf("got %+v, %v; want unreachable with an error", ep, err)
		}
	})
}

func TestWrongEndpointNamesWhatWasFoundAndWhatToGive(t *testing.T) {
	for _, tc := range []struct {
		want  doctor.Kind
		found doctor.Endpoint
		flag  string
		says  []string
	}{
		{doctor.KindProxySQLAdmin, doctor.Endpoint{Kind: doctor.KindMySQL, Flavor: "mariadb", Version: "10.11.19-MariaDB"}, "proxysql",
			[]string{"MariaDB server (10.11.19-MariaDB)", "give it as --mysql"}},
		{doctor.KindProxySQLAdmin, doctor.Endpoint{Kind: doctor.KindProxySQLClient}, "proxysql",
			[]string{"client interface", "admin port (6032"}},
		{doctor.KindMySQL, doctor.Endpoint{Kind: doctor.KindProxySQLAdmin, Version: "2.7.1"}, "mysql",
			[]string{"admin interface (2.7.1)", "give it as --proxysql"}},
		{doctor.KindMySQL, doctor.Endpoint{Kind: doctor.KindNotMySQL, Detail: "it sent \"HTTP/1.1\""}, "mysql",
			[]string{"not a MySQL-protocol server", "HTTP/1.1", "--mysql"}},
	} {
		msg := doctor.WrongEndpoint(tc.want, tc.found, tc.flag)
		for _, s := range tc.says {
			if !strings.Contains(msg, s) {
				t.Errorf("WrongEndpoint(%s, %+v) = %q: does not say %q", tc.want, tc.found, msg, s)
			}
		}
	}
	if msg := doctor.WrongEndpoint(doctor.KindMySQL, doctor.Endpoint{Kind: doctor.KindMySQL}, "mysql"); msg != "" {
		t.Errorf("the right endpoint is called wrong: %q", msg)
	}
}

func statuses(rs []doctor.Result) map[string]doctor.Result {
	m := map[string]doctor.Result{}
	for _, r := range rs {
		m[r.ID] = r
	}
	return m
}

func TestTheSetupListHoldsOnTestenvServers(t *testing.T) {
	target := testenv.Shared(t)
	ctx := context.Background()
	mon, err := target.CreateMonitor(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range doctor.Check(ctx, open(t, mon), doctor.KindMySQL) {
		if r.Status != doctor.StatusOK {
			t.Errorf("%s: %s (got %q, %s): testenv must start the server with the whole setup list", r.ID, r.Status, r.Got, r.Reason)
		}
	}

	p := startProxySQL(t)
	admin := open(t, cfgFor(t, p.AdminUser, p.AdminPass, p.AdminAddr))
	for _, r := range doctor.Check(ctx, admin, doctor.KindProxySQLAdmin) {
		if r.Status != doctor.StatusOK {
			t.Errorf("ProxySQL %s: %s (got %q, %s)", r.ID, r.Status, r.Got, r.Reason)
		}
	}
	// The read-only account the README recommends cannot read variables:
	// doctor says so, naming the query to run elsewhere, and never guesses.
	stats := statuses(doctor.Check(ctx, open(t, cfgFor(t, p.StatsUser, p.StatsPass, p.AdminAddr)), doctor.KindProxySQLAdmin))
	if r := stats["proxysql.stats"]; r.Status != doctor.StatusOK {
		t.Errorf("the stats account reads the stats schema, doctor says %s: %s", r.Status, r.Reason)
	}
	if r := stats["proxysql.query_digests_keep_comment"]; r.Status != doctor.StatusUnknown || !strings.Contains(r.Reason, "global_variables") {
		t.Errorf("a stats account's keep_comment: %+v, want unknown naming global_variables", r)
	}
}

// TestEachMissingItemIsNamedWithItsFix removes the items of the setup list
// one at a time and checks that doctor names exactly that item, with a fix.
func TestEachMissingItemIsNamedWithItsFix(t *testing.T) {
	target := testenv.Shared(t)
	ctx := context.Background()
	admin := target.Admin()
	mon, err := target.CreateMonitor(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	monDB := open(t, mon)
	exec := func(t *testing.T, db *sql.DB, q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	expectOnly := func(t *testing.T, rs []doctor.Result, id string) {
		t.Helper()
		found := false
		for _, r := range rs {
			switch {
			case r.ID == id:
				found = true
				if r.Status != doctor.StatusMissing || (r.Fix == "" && r.Config == "") || r.Why == "" {
					t.Errorf("%s: %+v, want missing with why and fix", id, r)
				}
			case r.Status == doctor.StatusMissing:
				t.Errorf("%s reported missing too (%q), only %s was removed", r.ID, r.Got, id)
			}
		}
		if !found {
			t.Errorf("%s not checked", id)
		}
	}

	for _, it := range doctor.Items() {
		if it.Target != doctor.KindMySQL || !strings.HasPrefix(it.ID, "mysql.consumer.") {
			continue
		}
		name := strings.TrimPrefix(it.ID, "mysql.consumer.")
		t.Run(it.ID, func(t *testing.T) {
			exec(t, admin, "UPDATE performance_schema.setup_consumers SET ENABLED = 'NO' WHERE NAME = '"+name+"'")
			t.Cleanup(func() {
				_, _ = admin.ExecContext(ctx, "UPDATE performance_schema.setup_consumers SET ENABLED = 'YES' WHERE NAME = '"+name+"'")
			})
			expectOnly(t, doctor.Check(ctx, monDB, doctor.KindMySQL), it.ID)
			// The printed fix is what brings it back.
			exec(t, admin, it.Fix)
			for _, r := range doctor.Check(ctx, monDB, doctor.KindMySQL) {
				if r.Status != doctor.StatusOK {
					t.Errorf("after the fix %s is %s", r.ID, r.Status)
				}
			}
		})
	}
	t.Run("mysql.instruments.statement", func(t *testing.T) {
		exec(t, admin, "UPDATE performance_schema.setup_instruments SET TIMED = 'NO' WHERE NAME = 'statement/sql/select'")
		t.Cleanup(func() {
			_, _ = admin.ExecContext(ctx, "UPDATE performance_schema.setup_instruments SET TIMED = 'YES' WHERE NAME = 'statement/sql/select'")
		})
		expectOnly(t, doctor.Check(ctx, monDB, doctor.KindMySQL), "mysql.instruments.statement")
	})
	t.Run("mysql.instruments.transaction", func(t *testing.T) {
		exec(t, admin, "UPDATE performance_schema.setup_instruments SET ENABLED = 'NO', TIMED = 'NO' WHERE NAME = 'transaction'")
		t.Cleanup(func() {
			_, _ = admin.ExecContext(ctx, "UPDATE performance_schema.setup_instruments SET ENABLED = 'YES', TIMED = 'YES' WHERE NAME = 'transaction'")
		})
		expectOnly(t, doctor.Check(ctx, monDB, doctor.KindMySQL), "mysql.instruments.transaction")
		exec(t, admin, statuses(doctor.Check(ctx, monDB, doctor.KindMySQL))["mysql.instruments.transaction"].Fix)
		for _, r := range doctor.Check(ctx, monDB, doctor.KindMySQL) {
			if r.Status != doctor.StatusOK {
				t.Errorf("after the fix %s is %s", r.ID, r.Status)
			}
		}
	})
	t.Run("mysql.actors", func(t *testing.T) {
		conn, err := admin.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "UPDATE performance_schema.threads SET INSTRUMENTED = 'NO' WHERE PROCESSLIST_ID = CONNECTION_ID()"); err != nil {
			t.Fatal(err)
		}
		expectOnly(t, doctor.Check(ctx, monDB, doctor.KindMySQL), "mysql.actors")
		if _, err := conn.ExecContext(ctx, "UPDATE performance_schema.threads SET INSTRUMENTED = 'YES' WHERE PROCESSLIST_ID = CONNECTION_ID()"); err != nil {
			t.Fatal(err)
		}
	})
	for _, grant := range []struct{ id, keep string }{
		{"mysql.grant.process", "SELECT ON performance_schema.*"},
		{"mysql.grant.performance_schema", "PROCESS ON *.*"},
	} {
		t.Run(grant.id, func(t *testing.T) {
			exec(t, admin, "DROP USER IF EXISTS 'doctor_partial'@'%'")
			exec(t, admin, "CREATE USER 'doctor_partial'@'%' IDENTIFIED BY 'pw'")
			t.Cleanup(func() { _, _ = admin.ExecContext(ctx, "DROP USER IF EXISTS 'doctor_partial'@'%'") })
			exec(t, admin, "GRANT "+grant.keep+" TO 'doctor_partial'@'%'")
			c := target.Config("")
			c.User, c.Passwd = "doctor_partial", "pw"
			rs := doctor.Check(ctx, open(t, c), doctor.KindMySQL)
			expectOnly(t, rs, grant.id)
			if grant.id == "mysql.grant.performance_schema" {
				// What cannot be read is unknown, never called missing.
				for _, r := range rs {
					if strings.HasPrefix(r.ID, "mysql.consumer.") && r.Status != doctor.StatusUnknown {
						t.Errorf("%s is %s without SELECT on performance_schema, want unknown", r.ID, r.Status)
					}
				}
			}
		})
	}
	t.Run("performance_schema off and a small history", func(t *testing.T) {
		if target.Server() == nil {
			t.Skip("needs a server testenv starts (HOLDTIME_MYSQL_DSN is set)")
		}
		for _, tc := range []struct{ arg, id string }{
			{"--performance-schema=OFF", "mysql.performance_schema"},
			{"--performance-schema-events-statements-history-long-size=100", "mysql.history_long_size"},
			// MariaDB's default: what a server started without the list's
			// line has.
			{"--performance-schema-instrument=transaction=OFF", "mysql.instruments.transaction"},
		} {
			s, err := testenv.StartMySQL(ctx, testenv.MySQLOptions{ExtraArgs: []string{tc.arg}})
			if err != nil {
				t.Fatal(err)
			}
			rs := doctor.Check(ctx, open(t, s.Config("")), doctor.KindMySQL)
			s.Close()
			r := statuses(rs)[tc.id]
			if r.Status != doctor.StatusMissing || r.Config == "" {
				t.Errorf("%s: %s is %+v, want missing with its my.cnf line", tc.arg, tc.id, r)
			}
			for _, r := range rs {
				if r.ID != tc.id && r.Status == doctor.StatusMissing {
					t.Errorf("%s: %s reported missing too", tc.arg, r.ID)
				}
			}
		}
	})

	p := startProxySQL(t)
	padmin := open(t, cfgFor(t, p.AdminUser, p.AdminPass, p.AdminAddr))
	for _, it := range doctor.Items() {
		if it.ProxySQLVar == "" {
			continue
		}
		t.Run(it.ID, func(t *testing.T) {
			off := "0"
			if it.ProxySQLValue == "true" {
				off = "false"
			}
			exec(t, padmin, "SET mysql-"+it.ProxySQLVar+" = '"+off+"'")
			exec(t, padmin, "LOAD MYSQL VARIABLES TO RUNTIME")
			expectOnly(t, doctor.Check(ctx, padmin, doctor.KindProxySQLAdmin), it.ID)
			// The printed fix, run statement by statement, restores it.
			for _, q := range strings.Split(it.Fix, "; ") {
				exec(t, padmin, q)
			}
			for _, r := range doctor.Check(ctx, padmin, doctor.KindProxySQLAdmin) {
				if r.Status != doctor.StatusOK {
					t.Errorf("after the fix %s is %s", r.ID, r.Status)
				}
			}
		})
	}
}
