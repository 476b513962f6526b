package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/migration"
	"github.com/holdtime/holdtime/reservation/redisstock"
)

// migrateCmd runs an operator's steps of a migration from the Redis
// reservation design to the engine (package migration) against the app's
// database and Redis.
type migrateCmd struct {
	out     io.Writer
	dsn     string
	redis   string
	prefix  string
	timeout time.Duration
	jsonOut bool

	shops   []uint64
	repair  bool
	shadow  float64
	mysql   float64
	shadowS []uint64
	mysqlS  []uint64
	volume  []uint64
}

func newMigrateCmd() *cobra.Command {
	m := &migrateCmd{}
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Backfill, reconcile and plan a migration from the Redis reservation design to the engine",
		Long: `migrate runs an operator's steps of a migration from the Redis reservation design to the
SKIP LOCKED engine (Go package reservation/migration), against the app's database and Redis:

  status      each shop's stage, kill switch and the saved rollout
  backfill    set MySQL's units of a shop from Redis's ledger net of its live holds, and
              carry those holds over (what a shop's move to shadow does by itself)
  reconcile   per shop and item, what each system says is available, held and sold, and
              the drift between them, and Redis claims stuck between their halves or
              counted twice in its ledger; --repair settles those and makes the shadow a
              copy of the truth
  dryrun      which shops a rollout would move, and their volumes

The app's Router fences a shop while it repairs it (its calls wait a few milliseconds).
These commands run in another process and cannot: run backfill and reconcile --repair on
a shop still on Redis alone (always safe: the app backfills it again, fenced, when it
enters shadow), or while the shop's checkout is paused. reconcile without --repair only
reads (a call in flight shows as drift of its units: read twice).

Every flag also reads HOLDTIME_ + its name in upper case (HOLDTIME_DSN, HOLDTIME_REDIS),
so the DSN need not appear in the process list.`,
		Example: `  HOLDTIME_DSN='app:secret@tcp(db:3306)/shop' HOLDTIME_REDIS=redis:6379 holdtime migrate status
  holdtime migrate backfill --shop 42
  holdtime migrate reconcile
  holdtime migrate reconcile --shop 42 --repair
  holdtime migrate dryrun --shops-by-volume 4,9,1,42 --shadow-percent 100 --mysql-percent 50`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&m.dsn, "dsn", "", "the app's database (go-sql-driver/mysql DSN, user:pass@tcp(host:port)/dbname), where the engine's and the Redis design's tables are")
	pf.StringVar(&m.redis, "redis", "", "the app's Redis, host:port")
	pf.StringVar(&m.prefix, "redis-prefix", "holdtime", "the Redis design's key prefix (redisstock.Config.KeyPrefix)")
	pf.DurationVar(&m.timeout, "timeout", time.Minute, "give up after this long")
	pf.BoolVar(&m.jsonOut, "json", false, "print JSON")
	sub := func(use, short string, run func(context.Context, *migration.Router) error) *cobra.Command {
		c := &cobra.Command{Use: use, Short: short, Args: noArgs("give the database with --dsn and Redis with --redis"),
			RunE: func(c *cobra.Command, _ []string) error {
				if err := flagsFromEnv(c); err != nil {
					return err
				}
				m.out = c.OutOrStdout()
				ctx, cancel := context.WithTimeout(c.Context(), m.timeout)
				defer cancel()
				r, done, err := m.router(ctx)
				if err != nil {
					return err
				}
				defer done()
				return run(ctx, r)
			}}
		return c
	}
	backfill := sub("backfill", "Set MySQL's units of a shop from Redis's ledger net of its live holds", m.backfill)
	backfill.Flags().Var((*shopList)(&m.shops), "shop", "the shop (repeat, or comma-separated, for more)")
	reconcile := sub("reconcile", "Compare both systems' books per shop and item; --repair makes the shadow a copy of the truth", m.reconcile)
	reconcile.Flags().Var((*shopList)(&m.shops), "shop", "the shops (default: every shop that left Redis)")
	reconcile.Flags().BoolVar(&m.repair, "repair", false, "repair every drifted shop (see the command's help for when that is safe)")
	dryrun := sub("dryrun", "Show which shops a rollout would move, and their volumes", m.dryrun)
	dryrun.Flags().Float64Var(&m.shadow, "shadow-percent", 0, "the rollout's shadow percentage of --shops-by-volume")
	dryrun.Flags().Float64Var(&m.mysql, "mysql-percent", 0, "the rollout's mysql percentage of --shops-by-volume")
	dryrun.Flags().Var((*shopList)(&m.shadowS), "shadow-shops", "the rollout's shadow allow-list")
	dryrun.Flags().Var((*shopList)(&m.mysqlS), "mysql-shops", "the rollout's mysql allow-list")
	dryrun.Flags().Var((*shopList)(&m.volume), "shops-by-volume", "the app's shops, lowest volume first (migration.Config.ShopsByVolume)")
	cmd.AddCommand(sub("status", "Print each shop's stage and kill switch, and the saved rollout", m.status), backfill, reconcile, dryrun)
	return cmd
}

// router connects to the app's database and Redis and loads the saved
// migration (moving no shop).
func (m *migrateCmd) router(ctx context.Context) (*migration.Router, func(), error) {
	if m.dsn == "" {
		return nil, nil, errors.New("no database: give --dsn 'user:pass@tcp(host:3306)/dbname' (or HOLDTIME_DSN): the app's, with the engine's tables")
	}
	if m.redis == "" {
		return nil, nil, errors.New("no Redis: give --redis host:port (or HOLDTIME_REDIS): the app's")
	}
	mc, err := mysql.ParseDSN(m.dsn)
	if err != nil {
		return nil, nil, errors.New("--dsn is not a go-sql-driver/mysql DSN: use user:pass@tcp(host:port)/dbname")
	}
	if mc.DBName == "" {
		return nil, nil, fmt.Errorf("--dsn %s names no database: add /dbname (the one with the engine's tables)", flashsaleRedact(mc))
	}
	mc.Timeout = min(cmpDuration(mc.Timeout, 10*time.Second), m.timeout)
	mc.InterpolateParams = true
	db, err := conntag.Open("mysql", mc.FormatDSN())
	if err != nil {
		return nil, nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		// (run redacts the password wherever it appears in the message.)
		return nil, nil, fmt.Errorf("--dsn %s: %v", flashsaleRedact(mc), err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.redis, MaxRetries: -1})
	done := func() { rdb.Close(); db.Close() }
	if err := rdb.Ping(ctx).Err(); err != nil {
		done()
		return nil, nil, fmt.Errorf("--redis %s does not answer PING: %v", m.redis, err)
	}
	store, err := redisstock.New(redisstock.Config{Redis: rdb, DB: db, KeyPrefix: m.prefix})
	if err != nil {
		done()
		return nil, nil, err
	}
	engine, err := reservation.New(db, reservation.Config{})
	if err != nil {
		done()
		return nil, nil, err
	}
	r, err := migration.New(migration.Config{Redis: store, Engine: engine, DB: db, ShopsByVolume: m.volume})
	if err == nil {
		err = r.Load(ctx)
	}
	if err != nil {
		done()
		return nil, nil, err
	}
	return r, done, nil
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func (m *migrateCmd) status(ctx context.Context, r *migration.Router) error {
	shops := r.Shops()
	ro := r.Rollout()
	killed := map[uint64]bool{}
	for _, s := range r.KilledShops() {
		killed[s] = true
	}
	if m.jsonOut {
		type shop struct {
			ID     uint64          `json:"shop_id"`
			Stage  migration.Stage `json:"stage"`
			Killed bool            `json:"kill_switch"`
		}
		doc := struct {
			KillSwitch bool              `json:"kill_switch"`
			Rollout    migration.Rollout `json:"rollout"`
			Shops      []shop            `json:"shops"`
		}{KillSwitch: r.KillSwitch(), Rollout: ro, Shops: []shop{}}
		for _, s := range shops {
			doc.Shops = append(doc.Shops, shop{s, r.Stage(s), killed[s]})
		}
		return writeJSON(m.out, doc)
	}
	fmt.Fprintf(m.out, "kill switch: %v\nrollout: shadow %v%% + shops %v; mysql %v%% + shops %v\n\n", onOff(r.KillSwitch()),
		ro.Shadow.Percent, ro.Shadow.Shops, ro.MySQL.Percent, ro.MySQL.Shops)
	if len(shops) == 0 {
		fmt.Fprintln(m.out, "no shop has left Redis")
		return nil
	}
	tw := tabwriter.NewWriter(m.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "shop\tstage\tkill switch")
	for _, s := range shops {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", s, r.Stage(s), onOff(killed[s]))
	}
	return tw.Flush()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func (m *migrateCmd) backfill(ctx context.Context, r *migration.Router) error {
	if len(m.shops) == 0 {
		return errors.New("backfill which shop? give --shop N")
	}
	var reports []migration.Report
	for _, s := range m.shops {
		rep, err := r.Backfill(ctx, s)
		if err != nil {
			return err
		}
		reports = append(reports, rep)
	}
	return m.writeReports(reports, "backfilled")
}

func (m *migrateCmd) reconcile(ctx context.Context, r *migration.Router) error {
	shops := m.shops
	if len(shops) == 0 {
		if shops = r.Shops(); len(shops) == 0 {
			fmt.Fprintln(m.out, "no shop has left Redis: nothing to reconcile (give --shop N to compare one anyway)")
			return nil
		}
	}
	var reports []migration.Report
	var drifted []string
	for _, s := range shops {
		rep, err := r.Reconcile(ctx, s)
		if err != nil {
			return err
		}
		if rep.Drift() != "" && m.repair {
			if rep, err = r.Repair(ctx, s); err != nil {
				return err
			}
		}
		if rep.Drift() != "" {
			drifted = append(drifted, strconv.FormatUint(s, 10))
		}
		reports = append(reports, rep)
	}
	if err := m.writeReports(reports, ""); err != nil {
		return err
	}
	if len(drifted) > 0 {
		if m.repair {
			return fmt.Errorf("shops %s still drift after repair", strings.Join(drifted, ", "))
		}
		return fmt.Errorf("shops %s drift: repair them with --repair (see --help for when that is safe)", strings.Join(drifted, ", "))
	}
	return nil
}

func (m *migrateCmd) writeReports(reports []migration.Report, done string) error {
	if m.jsonOut {
		return writeJSON(m.out, reports)
	}
	tw := tabwriter.NewWriter(m.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shop\tstage\titem\tgroup\tavailable redis\tmysql\theld redis\tmysql\tsold redis\tmysql\tdrift\t")
	for _, rep := range reports {
		for _, d := range rep.Items {
			drift := "-"
			if d.Drifted() {
				drift = "DRIFT"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", rep.ShopID, rep.Stage, d.Key.ItemID, d.Key.GroupID,
				d.Redis.Available, d.MySQL.Available, d.Redis.Held, d.MySQL.Held, d.Redis.Sold, d.MySQL.Sold, drift)
		}
		if len(rep.Items) == 0 {
			fmt.Fprintf(tw, "%d\t%s\t-\t-\t\t\t\t\t\t\tno items\t\n", rep.ShopID, rep.Stage)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, rep := range reports {
		if len(rep.Claiming) > 0 {
			fmt.Fprintf(m.out, "shop %d DRIFT: redis claims stuck between their halves (claiming): %s\n", rep.ShopID, strings.Join(rep.Claiming, ", "))
		}
		if len(rep.Overcounted) > 0 {
			fmt.Fprintf(m.out, "shop %d DRIFT: redis claims its ledger counted more than once: %s\n", rep.ShopID, strings.Join(rep.Overcounted, ", "))
		}
	}
	if done != "" {
		fmt.Fprintf(m.out, "\n%s %d shop(s)\n", done, len(reports))
	}
	fmt.Fprintln(m.out, "(sold differs by what Redis sold before a shop was shadowed)")
	return nil
}

func (m *migrateCmd) dryrun(ctx context.Context, r *migration.Router) error {
	ro := migration.Rollout{Shadow: migration.Plan{Percent: m.shadow, Shops: m.shadowS},
		MySQL: migration.Plan{Percent: m.mysql, Shops: m.mysqlS}}
	moves, err := r.DryRun(ctx, ro)
	if err != nil {
		return err
	}
	if m.jsonOut {
		if moves == nil {
			moves = []migration.Move{}
		}
		return writeJSON(m.out, moves)
	}
	if len(moves) == 0 {
		fmt.Fprintln(m.out, "no shop would move")
		return nil
	}
	tw := tabwriter.NewWriter(m.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "shop\tfrom\tto\tsold in redis\theld in redis\tgate")
	for _, mv := range moves {
		gate := "-"
		if mv.Gated != "" {
			gate = "waits: " + mv.Gated
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\n", mv.ShopID, mv.From, mv.To, mv.Sold, mv.Held, gate)
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// shopList is a flag of shop ids: comma-separated, or repeated.
type shopList []uint64

func (l *shopList) String() string {
	parts := make([]string, len(*l))
	for i, s := range *l {
		parts[i] = strconv.FormatUint(s, 10)
	}
	return strings.Join(parts, ",")
}

func (l *shopList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(part), 10, 64)
		if err != nil || n == 0 {
			return fmt.Errorf("%q is not a shop id (a positive integer)", part)
		}
		*l = append(*l, n)
	}
	return nil
}

func (l *shopList) Type() string { return "shops" }
