package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/internal/doctor"
	"github.com/holdtime/holdtime/testenv"
)

func dsnOf(user, pass, addr string) string { return fmt.Sprintf("%s:%s@tcp(%s)/", user, pass, addr) }

func TestDoctorPassesOnTheDocumentedSetupAndNamesEachWrongEndpointWithinASecond(t *testing.T) {
	testenv.RequireProxySQL(t)
	target := testenv.Shared(t)
	ctx := context.Background()
	mon, err := target.CreateMonitor(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	p, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: target})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	monDSN := mon.FormatDSN()
	adminDSN := dsnOf(p.AdminUser, p.AdminPass, p.AdminAddr)

	code, out, errOut := runCLI(t, "doctor", "--proxysql", "px1="+adminDSN, "--mysql", "db1="+monDSN)
	if code != 0 {
		t.Fatalf("doctor on testenv's servers: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"proxysql px1 (" + p.AdminAddr + "): ProxySQL's admin interface", "mysql db1 (", "OK       performance_schema=ON", "OK       mysql-show_processlist_extended=2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{p.AdminPass, mon.Passwd} {
		if strings.Contains(out+errOut, secret) {
			t.Errorf("a password reached the output")
		}
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()

	for _, tc := range []struct {
		name string
		args []string
		says []string
	}{
		{"a MySQL server given as --proxysql", []string{"--proxysql", "x=" + monDSN},
			[]string{"this is a MariaDB server", "not ProxySQL's admin interface", "give it as --mysql"}},
		{"ProxySQL's client port given as its admin port", []string{"--proxysql", "x=" + dsnOf(p.AppUser, p.AppPass, p.AppAddr)},
			[]string{"ProxySQL's client interface", "admin port (6032"}},
		{"ProxySQL's client port with the admin account", []string{"--proxysql", "x=" + dsnOf(p.StatsUser, p.StatsPass, p.AppAddr)},
			[]string{"ProxySQL interface that refused the login", "client port (6033 by default) takes none of them"}},
		{"ProxySQL's admin given as --mysql", []string{"--mysql", "x=" + adminDSN},
			[]string{"ProxySQL's admin interface (2.", "not a MySQL server", "give it as --proxysql"}},
		{"something that is not MySQL", []string{"--mysql", "x=" + dsnOf("u", "p", silent.Addr().String())},
			[]string{"not a MySQL-protocol server", "sent no MySQL greeting"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, out, errOut := runCLI(t, append([]string{"doctor"}, tc.args...)...)
			took := time.Since(start)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			for _, s := range tc.says {
				if !strings.Contains(out, s) {
					t.Errorf("output does not say %q:\n%s%s", s, out, errOut)
				}
			}
			if took > doctor.IdentifyTimeout+500*time.Millisecond {
				t.Errorf("took %v to name a wrong endpoint, want it within the identification's bound %v", took, doctor.IdentifyTimeout)
			}
		})
	}

	// --json: the same results, machine-readable, with the exit code.
	code, out, _ = runCLI(t, "doctor", "--json", "--mysql", "db1="+monDSN, "--proxysql", "bad="+monDSN)
	var rep struct {
		OK      bool
		Targets []struct {
			Flag, Name, Problem string
			Items               []doctor.Result
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out)
	}
	if code != 1 || rep.OK || len(rep.Targets) != 2 || rep.Targets[0].Problem == "" || len(rep.Targets[1].Items) == 0 {
		t.Errorf("--json: exit %d, %+v", code, rep)
	}
}

func TestDoctorNamesAMissingConsumerWithItsFixAndFailsTheExitCode(t *testing.T) {
	target := testenv.Shared(t)
	ctx := context.Background()
	mon, err := target.CreateMonitor(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := target.Admin().ExecContext(ctx, "UPDATE performance_schema.setup_consumers SET ENABLED = 'NO' WHERE NAME = 'events_statements_current'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = target.Admin().ExecContext(ctx, "UPDATE performance_schema.setup_consumers SET ENABLED = 'YES' WHERE NAME = 'events_statements_current'")
	})
	code, out, _ := runCLI(t, "doctor", "--mysql", mon.FormatDSN())
	if code != 1 {
		t.Errorf("exit %d with a required consumer off, want 1", code)
	}
	for _, want := range []string{
		"MISSING  performance_schema consumer events_statements_current enabled (now: no) [required]",
		"fix now:    UPDATE performance_schema.setup_consumers SET ENABLED = 'YES' WHERE NAME = 'events_statements_current'",
		"keep it:    performance-schema-consumer-events-statements-current=ON",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestReadmeStatesTheSetupList keeps the README's setup table equal to the
// list doctor checks and testenv applies.
func TestReadmeStatesTheSetupList(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), doctor.Markdown()) {
		t.Errorf("README.md does not contain the setup list as `holdtime doctor --list` prints it: paste its output into the setup section")
	}
	code, out, _ := runCLI(t, "doctor", "--list")
	if code != 0 || out != doctor.Markdown() {
		t.Errorf("doctor --list: exit %d, output differs from the list", code)
	}
}

func TestCollectAndTopNameAWrongEndpointAtStartWithinASecond(t *testing.T) {
	testenv.RequireProxySQL(t)
	target := testenv.Shared(t)
	ctx := context.Background()
	p, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: target})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	mysqlDSN := target.Config("").FormatDSN()
	adminDSN := dsnOf(p.AdminUser, p.AdminPass, p.AdminAddr)
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"top, a MySQL server as --proxysql", []string{"top", "--once", "--proxysql", "x=" + mysqlDSN}, "give it as --mysql"},
		{"top, ProxySQL's admin as --mysql", []string{"top", "--once", "--mysql", "x=" + adminDSN}, "give it as --proxysql"},
		{"collect, ProxySQL's client port as --proxysql", []string{"collect", "--listen", "127.0.0.1:0", "--proxysql", "x=" + dsnOf(p.AppUser, p.AppPass, p.AppAddr)}, "client interface"},
		{"collect, ProxySQL's admin as --mysql", []string{"collect", "--listen", "127.0.0.1:0", "--mysql", "x=" + adminDSN}, "give it as --proxysql"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, out, errOut := runCLI(t, tc.args...)
			if took := time.Since(start); took > doctor.IdentifyTimeout+500*time.Millisecond {
				t.Errorf("took %v, want it within the identification's bound %v", took, doctor.IdentifyTimeout)
			}
			if code != 1 || !strings.Contains(errOut, tc.says) || !strings.Contains(errOut, tc.args[len(tc.args)-2]+" x (") {
				t.Errorf("exit %d, stderr %q, want 1 naming the target and saying %q (stdout %q)", code, errOut, tc.says, out)
			}
		})
	}
}
