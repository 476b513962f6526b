package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/holdtime/holdtime/dashboards"
)

// dashboardsCmd writes holdtime's Grafana dashboards as JSON files.
type dashboardsCmd struct {
	out io.Writer
	dir string
}

func newDashboardsCmd() *cobra.Command {
	d := &dashboardsCmd{}
	cmd := &cobra.Command{
		Use:   "dashboards --out DIR",
		Short: "Write holdtime's Grafana dashboards as JSON files",
		Long: `dashboards writes holdtime's Grafana dashboards (connection occupancy by tag,
ProxySQL backend pool and pins, MySQL transactions and locks by tag, the
reservation engine) as JSON files into DIR, one per dashboard, ready for
Grafana's file provisioning or for import. Files of other names in DIR are
left alone. Each dashboard asks for a Prometheus data source.`,
		Example: `  holdtime dashboards --out /var/lib/grafana/dashboards/holdtime
  go generate ./dashboards   # regenerates the committed dashboards/json`,
		Args: noArgs("give the directory with --out DIR"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			d.out = cmd.OutOrStdout()
			return d.run()
		},
	}
	cmd.Flags().StringVar(&d.dir, "out", "", "directory to write the dashboards into (created if missing)")
	return cmd
}

func (d *dashboardsCmd) run() error {
	if d.dir == "" {
		return errors.New("--out is required: give the directory to write the dashboards into")
	}
	paths, err := dashboards.Write(d.dir)
	for _, p := range paths {
		fmt.Fprintf(d.out, "wrote %s\n", p)
	}
	return err
}
