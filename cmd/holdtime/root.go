package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/holdtime/holdtime/internal/termtext"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// run executes the CLI with args, writing to stdout and stderr, and returns
// the process exit code. Errors are printed as one line, never a stack, and
// every error of every command passes here: it is where passwords are
// redacted (those in args and HOLDTIME_* variables, and anything shaped
// like a DSN or a URL with a password), whatever message carried them.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			return 130
		}
		msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
		// A server's or a file's words in the error reach the terminal with
		// their control characters escaped.
		fmt.Fprintf(stderr, "holdtime: %s\n", termtext.Line(redact(msg, processSecrets(args))))
		return 1
	}
	return 0
}

// noArgs rejects positional arguments without quoting them: what lands
// there by mistake is often a DSN. hint says where the value belongs.
func noArgs(hint string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		if h := namedFlagSlip(cmd); h != "" {
			hint = h
		}
		return fmt.Errorf("%s takes no arguments, and %d were given: %s", cmd.CommandPath(), len(args), hint)
	}
}

// namedFlagSlip recognises --mysql db1 DSN (a space where NAME=DSN wants
// '='): a NAME=VALUE flag whose value has no '='.
func namedFlagSlip(cmd *cobra.Command) string {
	var slip string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Annotations[namedAnnotation] == nil || f.Value.Type() != "stringArray" {
			return
		}
		vals, _ := cmd.Flags().GetStringArray(f.Name)
		for _, v := range vals {
			if !strings.Contains(v, "=") && slip == "" {
				slip = fmt.Sprintf("--%s wants NAME=VALUE with '=' between them (--%s db1='user:pass@tcp(host:3306)/'): a space makes the value a separate argument", f.Name, f.Name)
			}
		}
	})
	return slip
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
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, _, err := c.Root().Find(args)
			if cmd == nil || err != nil {
				// cobra's own help command prints the unknown topic.
				return errors.New("help: no such command: run `holdtime --help` for the list")
			}
			return cmd.Help()
		},
	})
	for _, c := range []*cobra.Command{
		newVersionCmd(),
		newDemoCmd(),
		newTopCmd(),
		newLocksCmd(),
		newAnalyzeCmd(),
		newCollectCmd(),
		newDashboardsCmd(),
		newFlashsaleCmd(),
		newKillswitchCmd(),
		newMigrateCmd(),
		newTestenvCmd(),
		newProbeCmd(),
		newDoctorCmd(),
	} {
		root.AddCommand(c)
	}
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print holdtime's version",
		Args:  noArgs("run `holdtime version`"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "holdtime %s\n", version)
			return err
		},
	}
}
