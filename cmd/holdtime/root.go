package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// run executes the CLI with args, writing to stdout and stderr, and returns
// the process exit code. Errors are printed as one line, never a stack.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			return 130
		}
		fmt.Fprintf(stderr, "holdtime: %v\n", err)
		return 1
	}
	return 0
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "holdtime",
		Short: "Who is holding my database connections, and for how long?",
		Long: `holdtime finds the business processes that keep database connections busy.

Tag every statement with conntag (/* conn_tag:checkout_completion */), then see
per tag how long connections are held, actively used and idly held: live from
the app, ProxySQL and the MySQL server, or offline from ProxySQL's events log.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	for _, c := range []*cobra.Command{
		newVersionCmd(),
		newDemoCmd(),
		newTopCmd(),
		newLocksCmd(),
		newAnalyzeCmd(),
		newCollectCmd(),
		newDashboardsCmd(),
		newFlashsaleCmd(),
		newTestenvCmd(),
		newProbeCmd(),
	} {
		root.AddCommand(c)
	}
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print holdtime's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "holdtime %s\n", version)
			return err
		},
	}
}
