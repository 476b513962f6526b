package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdtime/holdtime/testenv"
)

// demoCmd runs the end-to-end story on a throwaway server.
type demoCmd struct {
	out io.Writer
}

func newDemoCmd() *cobra.Command {
	d := &demoCmd{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start a throwaway MySQL-compatible server and show tagged statements end to end",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d.out = cmd.OutOrStdout()
			return d.run(cmd.Context())
		},
	}
	return cmd
}

func (d *demoCmd) run(ctx context.Context) error {
	start := time.Now()
	target, err := testenv.OpenTarget(ctx)
	if err != nil {
		return err
	}
	defer target.Close()
	fmt.Fprintf(d.out, "server: %s %s at %s (ready in %v)\n\n", target.Flavor, target.Version, target.Redacted(),
		time.Since(start).Round(time.Millisecond))
	database, err := target.CreateDatabase(ctx, "demo")
	if err != nil {
		return err
	}
	defer database.Drop(context.WithoutCancel(ctx))
	db, err := sql.Open("mysql", database.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "/* conn_tag:checkout_completion */ SELECT SLEEP(0.1)"); err != nil {
		return err
	}
	var text string
	err = target.Admin().QueryRowContext(ctx,
		`SELECT SQL_TEXT FROM performance_schema.events_statements_history_long
		 WHERE SQL_TEXT LIKE '%conn_tag:%' AND SQL_TEXT NOT LIKE '%events_statements%'
		 ORDER BY EVENT_ID DESC LIMIT 1`).Scan(&text)
	if err != nil {
		return fmt.Errorf("read the statement back from performance_schema: %w", err)
	}
	fmt.Fprintf(d.out, "the server saw: %s\n", text)
	return nil
}
