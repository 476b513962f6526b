package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"

	"github.com/holdtime/holdtime/internal/doctor"
	"github.com/holdtime/holdtime/internal/termtext"
)

// doctorCmd checks the setup holdtime needs on each target: the same list
// testenv starts its servers with and the README states.
type doctorCmd struct {
	out io.Writer

	proxysql []string
	mysql    []string
	json     bool
	list     bool
	timeout  time.Duration
}

func newDoctorCmd() *cobra.Command {
	d := &doctorCmd{}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that ProxySQL and the MySQL server are set up as the collector needs, and print the fix of what is not",
		Long: `doctor takes the same targets as collect and top and checks, on each, every item of
holdtime's setup list: ProxySQL's variables and account, and the MySQL server's
performance_schema, consumers, instruments, history size and privileges. Each item
is OK, MISSING (with what it breaks, the statement that fixes it now and the line
that keeps it across restarts) or UNKNOWN (the account cannot check it; doctor says
how to check it by hand and never guesses).

It first tells what answers at each address, within two seconds: a MySQL server given
as --proxysql, ProxySQL's client port (6033) given as its admin port, ProxySQL's
admin given as --mysql, or something that is not MySQL at all is named as such.

The exit code is 0 when every required item of the layers asked for is in place, 1
when one is missing or a target is the wrong kind or out of reach. --list prints
the setup list itself. DSNs never appear in output.`,
		Example: `  holdtime doctor --proxysql px1='stats:secret@tcp(127.0.0.1:6032)/' --mysql db1='holdtime:secret@tcp(db1:3306)/'
  HOLDTIME_MYSQL='holdtime:secret@tcp(db1:3306)/' holdtime doctor --json
  holdtime doctor --list`,
		Args: noArgs("give targets as --proxysql [NAME=]DSN or --mysql [NAME=]DSN (quote a DSN: its parentheses are special to the shell)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			d.out = cmd.OutOrStdout()
			if err := flagsFromEnv(cmd); err != nil {
				return err
			}
			if d.list {
				return d.printList()
			}
			if len(d.proxysql)+len(d.mysql) == 0 {
				return errors.New("doctor: give at least one target: --proxysql [NAME=]DSN (ProxySQL's admin interface) or --mysql [NAME=]DSN (the MySQL server); --list prints what is checked")
			}
			if d.timeout < 100*time.Millisecond {
				return errors.New("--timeout must be at least 100ms")
			}
			return d.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&d.proxysql, "proxysql", nil, "ProxySQL admin interface as [NAME=]DSN (repeatable)")
	f.StringArrayVar(&d.mysql, "mysql", nil, "MySQL/MariaDB server as [NAME=]DSN (repeatable)")
	f.BoolVar(&d.json, "json", false, "print the results as JSON")
	f.BoolVar(&d.list, "list", false, "print the setup list (what is checked, why, and the fix) and exit")
	f.DurationVar(&d.timeout, "timeout", 5*time.Second, "bound of each target's checks, connecting included")
	for _, name := range []string{"proxysql", "mysql"} {
		f.SetAnnotation(name, dsnAnnotation, []string{"optional-name"})
	}
	return cmd
}

// doctorTarget is one target's outcome, as --json prints it.
type doctorTarget struct {
	Flag  string `json:"flag"` // proxysql or mysql
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	Found string `json:"found,omitempty"` // what answers there
	// Problem is set when the items could not be checked: the wrong kind of
	// endpoint, nothing reachable, a refused login.
	Problem string          `json:"problem,omitempty"`
	Items   []doctor.Result `json:"items,omitempty"`
}

func (t doctorTarget) failed() bool {
	if t.Problem != "" {
		return true
	}
	for _, r := range t.Items {
		if r.Need == doctor.Required && r.Status == doctor.StatusMissing {
			return true
		}
	}
	return false
}

func (d *doctorCmd) run(ctx context.Context) error {
	var targets []doctorTarget
	for _, group := range []struct {
		flag string
		kind doctor.Kind
		vals []string
	}{{"proxysql", doctor.KindProxySQLAdmin, d.proxysql}, {"mysql", doctor.KindMySQL, d.mysql}} {
		for _, v := range group.vals {
			name, _, cfg, err := targetName(group.flag, v)
			if err != nil {
				return err
			}
			targets = append(targets, d.check(ctx, group.flag, group.kind, name, cfg))
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.json {
		enc := json.NewEncoder(d.out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			OK      bool           `json:"ok"`
			Targets []doctorTarget `json:"targets"`
		}{!anyFailed(targets), targets}); err != nil {
			return err
		}
	} else {
		printDoctor(d.out, targets)
	}
	if n := countFailed(targets); n > 0 {
		return fmt.Errorf("doctor: %d of %d targets need attention (above)", n, len(targets))
	}
	return nil
}

func anyFailed(ts []doctorTarget) bool { return countFailed(ts) > 0 }

func countFailed(ts []doctorTarget) int {
	n := 0
	for _, t := range ts {
		if t.failed() {
			n++
		}
	}
	return n
}

// check identifies one target and, when it is the kind the flag wants and
// the login works, checks its items.
func (d *doctorCmd) check(ctx context.Context, flag string, want doctor.Kind, name string, cfg *mysql.Config) doctorTarget {
	t := doctorTarget{Flag: flag, Name: name, Addr: cfg.Addr}
	idCtx, cancel := context.WithTimeout(ctx, min(d.timeout, doctor.IdentifyTimeout))
	ep, err := doctor.Identify(idCtx, cfg)
	cancel()
	t.Found = ep.Describe()
	switch {
	case err != nil:
		t.Problem = "cannot reach it: " + err.Error()
		return t
	case doctor.WrongEndpoint(want, ep, flag) != "":
		t.Problem = doctor.WrongEndpoint(want, ep, flag)
		return t
	case ep.LoginRefused:
		t.Problem = "the login was refused (" + ep.Detail + "): check the user and password"
		if want == doctor.KindProxySQLAdmin {
			t.Problem += "; ProxySQL's admin interface takes an admin-stats_credentials or admin-admin_credentials account " +
				"(the admin one from localhost only), and its client port (6033 by default) takes none of them"
		}
		return t
	}
	c := cfg.Clone()
	c.Timeout, c.ReadTimeout, c.WriteTimeout = d.timeout, d.timeout, d.timeout
	c.DBName = ""
	connector, err := mysql.NewConnector(c)
	if err != nil {
		t.Problem = "invalid DSN"
		return t
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxOpenConns(1)
	cctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	t.Items = doctor.Check(cctx, db, want)
	return t
}

// printDoctor writes the checks as text; what a server answered (its
// version, a variable's value, an error) reaches the terminal with its
// control characters escaped, on its line.
func printDoctor(out io.Writer, targets []doctorTarget) {
	w := termtext.NewWriter(out)
	defer w.Flush()
	for i, t := range targets {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s %s (%s): %s\n", t.Flag, termtext.Line(t.Name), termtext.Line(t.Addr), termtext.Line(t.Found))
		if t.Problem != "" {
			fmt.Fprintf(w, "  PROBLEM  %s\n", termtext.Line(t.Problem))
			continue
		}
		for _, r := range t.Items {
			fmt.Fprintf(w, "  %-8s %s", strings.ToUpper(string(r.Status)), r.What)
			if r.Got != "" && r.Status != doctor.StatusOK {
				fmt.Fprintf(w, " (now: %s)", termtext.Line(r.Got))
			}
			if r.Status != doctor.StatusOK {
				fmt.Fprintf(w, " [%s]", r.Need)
			}
			fmt.Fprintln(w)
			if r.Reason != "" {
				fmt.Fprintf(w, "           %s\n", r.Reason)
			}
			if r.Status == doctor.StatusOK {
				continue
			}
			fmt.Fprintf(w, "           without it: %s\n", r.Why)
			if r.Fix != "" {
				fmt.Fprintf(w, "           fix now:    %s\n", r.Fix)
			}
			if r.Config != "" {
				fmt.Fprintf(w, "           keep it:    %s\n", r.Config)
			}
		}
	}
}

// printList prints the setup list as the README states it.
func (d *doctorCmd) printList() error {
	if d.json {
		enc := json.NewEncoder(d.out)
		enc.SetIndent("", "  ")
		return enc.Encode(doctor.Items())
	}
	_, err := io.WriteString(d.out, doctor.Markdown())
	return err
}
