package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"

	"github.com/holdtime/holdtime/testenv"
)

// testenvUpCmd starts throwaway servers and keeps them until interrupted.
type testenvUpCmd struct {
	out      io.Writer
	proxysql bool
}

func newTestenvCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "testenv",
		Short: "Throwaway MySQL-compatible server (and ProxySQL) for trying holdtime",
		Args:  noArgs("run `holdtime testenv up`"),
		// Runnable, so that its arguments are checked (cobra shows the help
		// of a command without RunE whatever follows it).
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTestenvUpCmd())
	return cmd
}

func newTestenvUpCmd() *cobra.Command {
	u := &testenvUpCmd{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a throwaway server, ProxySQL in front when installed, print their DSNs, stop on Ctrl-C",
		Long: `up starts a throwaway MariaDB or MySQL server on a loopback port (performance_schema on),
and ProxySQL in front of it when a proxysql binary is on PATH (query digests keep
comments, extended processlist, JSON events log). It prints DSNs for the app, the
server and ProxySQL's admin interface, waits until interrupted (Ctrl-C), then stops
everything and removes its files. The credentials are throwaway and local.

With HOLDTIME_MYSQL_DSN set, it uses that server instead of starting one.`,
		Example: `  holdtime testenv up
  holdtime testenv up --proxysql=false`,
		Args: noArgs("up starts throwaway servers and takes only --proxysql"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			u.out = cmd.OutOrStdout()
			return u.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&u.proxysql, "proxysql", true, "start ProxySQL in front of the server when a proxysql binary is on PATH")
	return cmd
}

func (u *testenvUpCmd) run(ctx context.Context) error {
	target, err := testenv.OpenTarget(ctx)
	if err != nil {
		return fmt.Errorf("start a throwaway server: %w", err)
	}
	defer target.Close()
	var mysqlDSN, adminDSN, eventsLog string
	if s := target.Server(); s != nil {
		mysqlDSN = s.DSN("")
		fmt.Fprintf(u.out, "mysql:          %s   # %s %s, socket %s\n", mysqlDSN, target.Flavor, target.Version, s.Socket)
	} else {
		// Not ours: never print the credentials of a server we did not start.
		fmt.Fprintf(u.out, "mysql:          %s (from %s)   # %s %s\n", target.Redacted(), testenv.DSNEnv, target.Flavor, target.Version)
	}
	switch {
	case !u.proxysql:
	case !testenv.ProxySQLAvailable():
		fmt.Fprintln(u.out, "proxysql:       not started (no proxysql binary on PATH)")
	case target.Server() == nil:
		fmt.Fprintf(u.out, "proxysql:       not started (only in front of a server testenv starts, not one from %s)\n", testenv.DSNEnv)
	default:
		p, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: target})
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return fmt.Errorf("start ProxySQL (or use --proxysql=false): %w", err)
		}
		defer p.Close()
		adminDSN, eventsLog = p.AdminDSN(), p.EventsLog
		fmt.Fprintf(u.out, "proxysql app:   %s\n", p.AppDSN())
		fmt.Fprintf(u.out, "proxysql admin: %s\n", adminDSN)
		// The prefix, as collect takes it: ProxySQL writes PREFIX.00000001, ...
		fmt.Fprintf(u.out, "events log:     %s   # ProxySQL writes %s.00000001, ...\n", eventsLog, filepath.Base(eventsLog))
	}
	if mysqlDSN != "" {
		if _, err := target.Admin().ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+testenvShopDB); err != nil {
			return fmt.Errorf("create the database flashsale sells in: %w", err)
		}
		printPasteLines(u.out, mysqlDSN, adminDSN, eventsLog)
	}
	fmt.Fprintln(u.out, "ready: press Ctrl-C to stop and remove everything")
	<-ctx.Done()
	fmt.Fprintln(u.out, "stopping")
	return nil
}

// testenvShopDB is the database `testenv up` creates for the flashsale line.
const testenvShopDB = "shop"

// printPasteLines prints commands that work as pasted into another terminal
// (a test runs each): the DSNs single-quoted for the shell, targets named.
func printPasteLines(w io.Writer, mysqlDSN, adminDSN, eventsLog string) {
	cfg, err := mysql.ParseDSN(mysqlDSN)
	if err != nil {
		return
	}
	cfg.DBName = testenvShopDB
	shopDSN := cfg.FormatDSN()
	targets := "--mysql db1='" + mysqlDSN + "'"
	if adminDSN != "" {
		targets = "--proxysql px1='" + adminDSN + "' " + targets
	}
	fmt.Fprintln(w, "paste into another terminal:")
	fmt.Fprintf(w, "  holdtime top %s\n", targets)
	collect := targets
	if eventsLog != "" {
		collect = "--proxysql px1='" + adminDSN + "' --proxysql-events-log px1=" + eventsLog + " --mysql db1='" + mysqlDSN + "'"
	}
	fmt.Fprintf(w, "  holdtime collect %s\n", collect)
	fmt.Fprintf(w, "  holdtime doctor %s\n", targets)
	fmt.Fprintf(w, "  holdtime flashsale --dsn '%s'\n", shopDSN)
}
