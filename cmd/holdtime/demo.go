package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// demoCmd runs the story on a throwaway server: a checkout step that holds
// its connection while it waits on a slow downstream call, next to fast
// inventory reservations, and the per-tag hold figures that expose it.
type demoCmd struct {
	out      io.Writer
	duration time.Duration
	slowCall time.Duration
}

func newDemoCmd() *cobra.Command {
	d := &demoCmd{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the connection-hog story on a throwaway MySQL-compatible server",
		Long: `demo starts a throwaway MariaDB/MySQL (or uses HOLDTIME_MYSQL_DSN), runs fast
inventory reservations next to a checkout step that keeps its connection while it
waits on a slow downstream call, and prints per tag how many connections each keeps
busy (occupancy) and how much of that time the connection sat idle.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d.out = cmd.OutOrStdout()
			if d.duration <= 0 || d.slowCall <= 0 {
				return errors.New("--duration and --slow-call must be positive")
			}
			return d.run(cmd.Context())
		},
	}
	cmd.Flags().DurationVar(&d.duration, "duration", 3*time.Second, "how long the workload runs")
	cmd.Flags().DurationVar(&d.slowCall, "slow-call", 100*time.Millisecond, "the slow downstream call the checkout step makes while holding its connection")
	return cmd
}

func (d *demoCmd) run(ctx context.Context) error {
	start := time.Now()
	target, err := testenv.OpenTarget(ctx)
	if err != nil {
		return err
	}
	defer target.Close()
	fmt.Fprintf(d.out, "server: %s %s at %s (ready in %v)\n", target.Flavor, target.Version, target.Redacted(),
		time.Since(start).Round(time.Millisecond))
	database, err := target.CreateDatabase(ctx, "demo")
	if err != nil {
		return err
	}
	defer database.Drop(context.WithoutCancel(ctx))

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.WithoutCancel(ctx))
	connector, err := mysql.NewConnector(database.Config())
	if err != nil {
		return err
	}
	db := conntag.OpenDB(connector, conntag.WithMeterProvider(mp), conntag.WithDBSystem(string(target.Flavor)))
	defer db.Close()
	db.SetMaxOpenConns(8)

	setup := conntag.WithTag(ctx, "demo_setup")
	for _, q := range []string{
		"CREATE TABLE stock (item INT PRIMARY KEY, available INT NOT NULL)",
		"INSERT INTO stock VALUES (1, 1000000), (2, 1000000)",
	} {
		if _, err := db.ExecContext(setup, q); err != nil {
			return err
		}
	}
	fmt.Fprintf(d.out, "workload: 6 inventory_reserve workers, 2 checkout_tax_quote workers holding a connection across a %v call, for %v\n\n",
		d.slowCall, d.duration)

	runCtx, cancel := context.WithTimeout(ctx, d.duration)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	worker := func(tag string, step func(context.Context) error) {
		defer wg.Done()
		tctx := conntag.WithTag(runCtx, tag)
		for runCtx.Err() == nil {
			if err := step(tctx); err != nil && runCtx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", tag, err)
				return
			}
		}
	}
	reserve := func(ctx context.Context) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "UPDATE stock SET available = available - 1 WHERE item = 1"); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		// The buyer's think time, spent without a connection.
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}
	taxQuote := func(ctx context.Context) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT available FROM stock WHERE item = 2").Scan(&n); err != nil {
			return err
		}
		select { // the slow downstream call, made while the connection is held
		case <-time.After(d.slowCall):
		case <-ctx.Done():
			return ctx.Err()
		}
		if _, err := tx.ExecContext(ctx, "UPDATE stock SET available = available - 1 WHERE item = 2"); err != nil {
			return err
		}
		return tx.Commit()
	}
	began := time.Now()
	for range 6 {
		wg.Add(1)
		go worker("inventory_reserve", reserve)
	}
	for range 2 {
		wg.Add(1)
		go worker("checkout_tax_quote", taxQuote)
	}
	wg.Wait()
	elapsed := time.Since(began)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return d.report(ctx, reader, elapsed)
}

// report prints per tag: occupancy (hold-seconds per second), holds, idle
// share of the hold, statements.
func (d *demoCmd) report(ctx context.Context, reader *sdkmetric.ManualReader, elapsed time.Duration) error {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	type row struct {
		hold, idle float64
		holds, ops int64
	}
	rows := map[string]*row{}
	get := func(attrs attribute.Set) *row {
		v, _ := attrs.Value(conntag.AttrConnTag)
		r := rows[v.AsString()]
		if r == nil {
			r = &row{}
			rows[v.AsString()] = r
		}
		return r
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[float64]:
				for _, dp := range data.DataPoints {
					switch m.Name {
					case "holdtime.connection.hold_time":
						get(dp.Attributes).hold = dp.Value
					case "holdtime.connection.idle_time":
						get(dp.Attributes).idle = dp.Value
					}
				}
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					switch m.Name {
					case "holdtime.connection.holds":
						get(dp.Attributes).holds = dp.Value
					case "holdtime.client.operations":
						get(dp.Attributes).ops += dp.Value
					}
				}
			}
		}
	}
	tags := make([]string, 0, len(rows))
	for tag := range rows {
		if tag != "demo_setup" && tag != "" {
			tags = append(tags, tag)
		}
	}
	sort.Slice(tags, func(i, j int) bool { return rows[tags[i]].hold > rows[tags[j]].hold })
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TAG\tOCCUPANCY\tHOLDS\tAVG HOLD\tIDLE SHARE\tSTATEMENTS\t")
	for _, tag := range tags {
		r := rows[tag]
		avg, idle := 0.0, 0.0
		if r.holds > 0 {
			avg = r.hold / float64(r.holds)
		}
		if r.hold > 0 {
			idle = r.idle / r.hold
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%d\t%s\t%.0f%%\t%d\t\n", tag, r.hold/elapsed.Seconds(), r.holds,
			time.Duration(avg*float64(time.Second)).Round(10*time.Microsecond), 100*idle, r.ops)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(d.out, "\nOccupancy is the number of connections a tag keeps busy on average. The checkout step")
	fmt.Fprintln(d.out, "holds its connections mostly idle while it waits on its downstream call: release the")
	fmt.Fprintln(d.out, "connection before the call and that occupancy goes back to the pool.")
	return nil
}
