package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/internal/shard"
)

// defaultCollectListen is loopback: /metrics and /api/v1/top show tag names
// and server addresses, so exposing them is the operator's choice.
const defaultCollectListen = "127.0.0.1:9479"

// collectCmd runs the collector daemon.
type collectCmd struct {
	out, errOut io.Writer

	listen         string
	proxysql       []string // NAME=DSN
	eventsLogs     []string // NAME=PATH
	clientAddrs    []string // NAME=HOST:PORT
	mysql          []string // NAME=DSN
	shard          string   // INDEX/COUNT
	others         []string // --proxysql targets of other shards
	otlp           bool
	otlpMetrics    bool
	otlpListen     string
	otlpTarget     string
	otlpMaxHold    time.Duration
	plInterval     time.Duration
	digestInterval time.Duration
	poolInterval   time.Duration
	mysqlInterval  time.Duration
	maxTags        int
	record         string
	timeout        time.Duration
	token          string
	tlsCert        string
	tlsKey         string
}

func newCollectCmd() *cobra.Command {
	c := &collectCmd{}
	cmd := &cobra.Command{
		Use:   "collect",
		Short: "Run the collector: per-tag connection hold from ProxySQL, the MySQL server and app spans",
		Long: `collect polls ProxySQL admin interfaces and MySQL/MariaDB servers, tails ProxySQL's
events log and receives conntag's spans over OTLP/HTTP, and serves per-tag
connection occupancy on /metrics (Prometheus), /api/v1/top (JSON), /healthz and
/readyz. Each source is optional and fails on its own.

Figures are per layer: app (conntag's spans), proxy (ProxySQL: the events log when
given, else processlist sampling) and server (the MySQL source); /api/v1/top?layer=
app|proxy|server|max ranks by one, or each tag by its largest. The MySQL account needs
PROCESS and SELECT on performance_schema, with the events_statements_history_long
consumer on; without it the source reports itself degraded and says what to change.

Every flag has an environment variable (HOLDTIME_ + the flag in upper case,
dashes as underscores); repeatable flags take several values separated by ';'
in the variable (so a DSN whose password holds a ';' goes on the command line).
DSNs are go-sql-driver/mysql DSNs and never appear in output.
The listen address defaults to ` + defaultCollectListen + ` (loopback only).

--token (or HOLDTIME_TOKEN, which keeps it out of the process list) makes every
path but /healthz and /readyz answer only requests with Authorization: Bearer
TOKEN: /v1/traces, /v1/metrics, /api/v1/top and /metrics. holdtime top sends it with --token;
an OTLP exporter with OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20TOKEN;
Prometheus with authorization: credentials. The token is never logged.
--tls-cert and --tls-key serve https instead of http (give the token over https
only, off loopback).`,
		Example: `  holdtime collect --proxysql px1='admin:admin@tcp(127.0.0.1:6032)/' \
      --proxysql-events-log px1=/var/lib/proxysql/events.log
  HOLDTIME_MYSQL='db1=monitor:secret@tcp(db1:3306)/' holdtime collect --otlp
  holdtime collect --proxysql px1='admin:admin@tcp(127.0.0.1:6032)/' --record ./rec`,
		Args: noArgs("give sources as --proxysql NAME=DSN, --mysql NAME=DSN or --otlp (quote a DSN: its parentheses are special to the shell)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.out, c.errOut = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if err := flagsFromEnv(cmd); err != nil {
				return err
			}
			return c.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.listen, "listen", defaultCollectListen, "address to serve /metrics, /api/v1/top, /healthz, /readyz (and /v1/traces with --otlp, /v1/metrics with --otlp-metrics)")
	f.StringArrayVar(&c.proxysql, "proxysql", nil, "ProxySQL admin interface as NAME=DSN (repeatable); NAME is the target label")
	f.StringArrayVar(&c.eventsLogs, "proxysql-events-log", nil, "JSON events log of a ProxySQL target as NAME=PATH (repeatable)")
	f.StringArrayVar(&c.clientAddrs, "proxysql-client-address", nil, "address apps dial for a ProxySQL target as NAME=HOST:PORT (repeatable): app spans naming it (server.address, server.port) give that instance's session tags")
	f.StringArrayVar(&c.mysql, "mysql", nil, "MySQL/MariaDB server as NAME=DSN (repeatable)")
	f.StringVar(&c.shard, "shard", "", "poll only this collector's part of the --proxysql fleet, as INDEX/COUNT (0/2 and 1/2 for two collectors given the same flags); a stable hash of each target's name picks its collector; a --mysql server another shard owns is read for the proxy↔server join only")
	f.BoolVar(&c.otlp, "otlp", false, "receive conntag's spans over OTLP/HTTP at /v1/traces")
	f.BoolVar(&c.otlpMetrics, "otlp-metrics", false, "also receive conntag's per-tag counters at /v1/metrics (implies --otlp): the app layer's figures come from them, and hold spans only name ProxySQL sessions (no hold counted twice; spans may be sampled)")
	f.StringVar(&c.otlpListen, "otlp-listen", "", "also serve /v1/traces (and /v1/metrics with --otlp-metrics) on this address (the OTLP/HTTP port is 4318); implies --otlp")
	f.StringVar(&c.otlpTarget, "otlp-target", "app", "target label of app-side figures")
	f.DurationVar(&c.otlpMaxHold, "otlp-max-hold", collector.DefaultOTLPMaxHold, "reject (and count as malformed) a hold span longer than this; any hold is credited at most the collector's age plus 10s")
	f.DurationVar(&c.plInterval, "proxysql-processlist-interval", 250*time.Millisecond, "stats_mysql_processlist sample interval")
	f.DurationVar(&c.digestInterval, "proxysql-digest-interval", 10*time.Second, "stats_mysql_query_digest poll interval (negative: off)")
	f.DurationVar(&c.poolInterval, "proxysql-pool-interval", 5*time.Second, "stats_mysql_connection_pool and stats_mysql_global poll interval")
	f.DurationVar(&c.mysqlInterval, "mysql-interval", time.Second, "MySQL server poll interval (at least 200ms)")
	f.IntVar(&c.maxTags, "max-tags", 1000, "distinct tags per target and source; more go to conn_tag=\"overflow\"; a tag unseen for 5m frees its slot")
	f.StringVar(&c.record, "record", "", "write polled processlist samples and stats tables to this directory (see collector/RECORDING.md)")
	f.DurationVar(&c.timeout, "timeout", 5*time.Second, "bound of one poll, connecting included")
	f.StringVar(&c.token, "token", "", "bearer token every request but /healthz and /readyz must carry (better: HOLDTIME_TOKEN)")
	f.StringVar(&c.tlsCert, "tls-cert", "", "serve https with this PEM certificate (chain included); needs --tls-key")
	f.StringVar(&c.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	for _, name := range []string{"proxysql", "mysql", "proxysql-events-log", "proxysql-client-address"} {
		f.SetAnnotation(name, namedAnnotation, []string{"true"})
	}
	f.SetAnnotation("proxysql", dsnAnnotation, []string{"named"})
	f.SetAnnotation("mysql", dsnAnnotation, []string{"named"})
	return cmd
}

// collectReadTimeout bounds reading a whole request, body included: a client
// that sends headers and then trickles (or never sends) its body would
// otherwise hold a connection and a handler forever. An OTLP batch of
// spans arrives in well under a second on any link holdtime is used on.
const collectReadTimeout = 10 * time.Second

func newCollectServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: collectReadTimeout, IdleTimeout: 2 * time.Minute}
}

// listenOn listens on addr, with TLS when tlsConfig is set.
func (c *collectCmd) listenOn(flag, addr string, tlsConfig *tls.Config) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w: pick a free address with --%s", addr, err, flag)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	return ln, nil
}

// Floors of the ProxySQL poll intervals.
const (
	minProcesslistInterval = 10 * time.Millisecond
	minPoolInterval        = 100 * time.Millisecond
	minDigestInterval      = time.Second
)

// Flag annotations: namedAnnotation marks NAME=VALUE flags; dsnAnnotation
// marks flags whose values are DSNs ("named": NAME=DSN, "optional-name":
// [NAME=]DSN).
const (
	namedAnnotation = "holdtime:named"
	dsnAnnotation   = "holdtime:dsn"
)

// dsnValue reports whether v is a DSN flag's value: NAME=DSN, or a bare DSN
// when the name is optional.
func dsnValue(v string, nameOptional bool) bool {
	if name, rest, ok := strings.Cut(v, "="); ok && name != "" && !strings.ContainsAny(name, "@:/(") {
		v = rest
	} else if !nameOptional {
		return false
	}
	_, err := mysql.ParseDSN(v)
	return err == nil
}

// checkListen says whether addr is a host:port to listen on, without
// quoting it (a DSN given by mistake would be echoed).
func checkListen(flag, addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return fmt.Errorf("--%s: the value given is not a host:port address such as 127.0.0.1:9479 (port 0: any free port)", flag)
	}
	return nil
}

// flagsFromEnv fills flags not given on the command line from HOLDTIME_*
// (the flag's name in upper case, dashes as underscores; ';' separates the
// values of repeatable flags).
func flagsFromEnv(cmd *cobra.Command) error {
	var errs []error
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		if fl.Changed {
			return
		}
		name := "HOLDTIME_" + strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_"))
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if fl.Value.Type() == "stringArray" {
			var parts []string
			for _, part := range strings.Split(v, ";") {
				if part = strings.TrimSpace(part); part != "" {
					parts = append(parts, part)
				}
			}
			if kind := fl.Annotations[dsnAnnotation]; kind != nil && strings.Contains(v, ";") {
				optional, form := kind[0] == "optional-name", "NAME=DSN"
				if optional {
					form = "[NAME=]DSN"
				}
				for i, part := range parts {
					if !dsnValue(part, optional) {
						errs = append(errs, fmt.Errorf("%s: value %d of %d is not a %s: ';' separates the values of %s, "+
							"so a password containing ';' cuts its DSN in two: give that DSN with --%s on the command line, "+
							"or choose a password without ';'", name, i+1, len(parts), form, name, fl.Name))
						return
					}
				}
			}
			for _, part := range parts {
				if err := fl.Value.Set(part); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
				}
			}
			return
		}
		if err := fl.Value.Set(v); err != nil {
			// The value may be a DSN: name the variable, not the value.
			errs = append(errs, fmt.Errorf("%s: not a valid %s", name, fl.Value.Type()))
		}
	})
	return errors.Join(errs...)
}

// splitNamed splits NAME=VALUE without echoing VALUE (it may be a DSN).
func splitNamed(flag, v string) (string, string, error) {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" || value == "" || strings.ContainsAny(name, "@:/(") {
		return "", "", fmt.Errorf("--%s wants NAME=VALUE (e.g. px1=admin:pass@tcp(host:6032)/); the value given has no NAME= in front", flag)
	}
	return name, value, nil
}

// config validates the options and builds the collector's config.
func (c *collectCmd) config(reg *prometheus.Registry, logger *slog.Logger) (collector.Config, error) {
	cfg := collector.Config{
		MaxTags: c.maxTags, Registerer: reg, Gatherer: reg, Logger: logger, RecordDir: c.record, Timeout: c.timeout,
		OTLP: collector.OTLPConfig{Enabled: c.otlp || c.otlpMetrics || c.otlpListen != "", Metrics: c.otlpMetrics,
			Target: c.otlpTarget, MaxHold: c.otlpMaxHold},
	}
	if c.maxTags <= 0 {
		return cfg, errors.New("--max-tags must be positive")
	}
	if c.plInterval <= 0 || c.poolInterval <= 0 || c.timeout <= 0 {
		return cfg, errors.New("--proxysql-processlist-interval, --proxysql-pool-interval and --timeout must be positive")
	}
	// Floors: each poll is a query against ProxySQL's admin interface, which
	// serves its stats tables from the same threads as its clients; a
	// nanosecond interval is a busy loop against the proxy.
	for _, f := range []struct {
		flag       string
		v, floor   time.Duration
		offAllowed bool
	}{
		{"proxysql-processlist-interval", c.plInterval, minProcesslistInterval, false},
		{"proxysql-pool-interval", c.poolInterval, minPoolInterval, false},
		{"proxysql-digest-interval", c.digestInterval, minDigestInterval, true},
	} {
		if f.v < f.floor && !(f.offAllowed && f.v < 0) {
			hint := ""
			if f.offAllowed {
				hint = " (a negative value turns it off)"
			}
			return cfg, fmt.Errorf("--%s %v is below its floor of %v: each poll queries ProxySQL's admin interface%s", f.flag, f.v, f.floor, hint)
		}
	}
	if err := checkListen("listen", c.listen); err != nil {
		return cfg, err
	}
	if c.otlpListen != "" {
		if err := checkListen("otlp-listen", c.otlpListen); err != nil {
			return cfg, err
		}
	}
	logs := map[string]string{}
	for _, v := range c.eventsLogs {
		name, path, err := splitNamed("proxysql-events-log", v)
		if err != nil {
			return cfg, err
		}
		// The path may not exist yet (ProxySQL writes PATH.00000001 once it
		// logs); a directory is never an events log.
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			return cfg, fmt.Errorf("--proxysql-events-log %s=%s is a directory: give ProxySQL's mysql-eventslog_filename, "+
				"the file (or the prefix of the numbered files) it writes inside that directory", name, path)
		}
		logs[name] = path
	}
	addrs := map[string]string{}
	for _, v := range c.clientAddrs {
		name, addr, err := splitNamed("proxysql-client-address", v)
		if err != nil {
			return cfg, err
		}
		addrs[name] = addr
	}
	sh, err := shard.Parse(c.shard)
	if err != nil {
		return cfg, err
	}
	var others []string
	for _, v := range c.proxysql {
		name, dsn, err := splitNamed("proxysql", v)
		if err != nil {
			return cfg, err
		}
		if !sh.Owns(name) {
			others = append(others, name)
			delete(logs, name)
			delete(addrs, name)
			continue
		}
		cfg.ProxySQL = append(cfg.ProxySQL, collector.ProxySQLConfig{Name: name, DSN: dsn, EventsLog: logs[name], ClientAddress: addrs[name],
			ProcesslistInterval: c.plInterval, DigestInterval: c.digestInterval, PoolInterval: c.poolInterval})
		delete(logs, name)
		delete(addrs, name)
	}
	for name := range logs {
		return cfg, fmt.Errorf("--proxysql-events-log %s=...: no --proxysql %s=DSN to attach it to", name, name)
	}
	for name := range addrs {
		return cfg, fmt.Errorf("--proxysql-client-address %s=...: no --proxysql %s=DSN to attach it to", name, name)
	}
	for _, v := range c.mysql {
		name, dsn, err := splitNamed("mysql", v)
		if err != nil {
			return cfg, err
		}
		// Sharded, every collector reads a server's join evidence for its
		// own ProxySQLs; only the shard that owns the server exports its
		// figures, so sums over collectors count it once.
		joinOnly := !sh.Owns(name)
		if joinOnly && len(cfg.ProxySQL) == 0 {
			continue // nothing here to join: another shard polls it
		}
		cfg.MySQL = append(cfg.MySQL, collector.MySQLConfig{Name: name, DSN: dsn, Interval: c.mysqlInterval, JoinOnly: joinOnly})
	}
	if len(others) > 0 && len(cfg.ProxySQL) == 0 && len(cfg.MySQL) == 0 && !cfg.OTLP.Enabled {
		return cfg, fmt.Errorf("--shard %d/%d: every --proxysql target given (%s) belongs to another shard and there is no --mysql "+
			"or --otlp: this collector would poll nothing; run fewer collectors than targets, or give it more targets",
			sh.Index, sh.Count, strings.Join(others, ", "))
	}
	c.others = others
	return cfg, nil
}

func (c *collectCmd) run(ctx context.Context) error {
	logger := slog.New(slog.NewTextHandler(c.errOut, nil))
	reg := prometheus.NewRegistry()
	// The daemon's own health beside its figures: the library registers
	// nothing but its own metrics; the binary adds the standard Go and
	// process collectors (go_*, process_*) to its own registry.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg, err := c.config(reg, logger)
	if err != nil {
		return err
	}
	if err := refuseWrongEndpoints(ctx, configEndpoints(cfg), false, logger); err != nil {
		return err
	}
	if c.token != "" {
		if err := checkToken("token", c.token); err != nil {
			return err
		}
	}
	tlsConfig, err := loadTLS(c.tlsCert, c.tlsKey)
	if err != nil {
		return err
	}
	col, err := collector.New(cfg)
	if err != nil {
		return err
	}
	handler := col.Handler()
	if c.token != "" {
		handler = requireToken(c.token, handler)
	}
	ln, err := c.listenOn("listen", c.listen, tlsConfig)
	if err != nil {
		return err
	}
	servers := []*http.Server{newCollectServer(handler)}
	listeners := []net.Listener{ln}
	if c.otlpListen != "" {
		oln, err := c.listenOn("otlp-listen", c.otlpListen, tlsConfig)
		if err != nil {
			ln.Close()
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/v1/traces", handler)
		if c.otlpMetrics {
			mux.Handle("/v1/metrics", handler)
		}
		servers = append(servers, newCollectServer(mux))
		listeners = append(listeners, oln)
	}
	scheme, auth := "http", ""
	if tlsConfig != nil {
		scheme = "https"
	}
	if c.token != "" {
		auth = "; a bearer token is required but on /healthz and /readyz"
	}
	fmt.Fprintf(c.out, "holdtime collect: serving on %s://%s (/metrics, /api/v1/top, /healthz, /readyz%s)\n", scheme, ln.Addr(), auth)
	if c.shard != "" {
		mine := make([]string, len(cfg.ProxySQL))
		for i, p := range cfg.ProxySQL {
			mine[i] = p.Name
		}
		fmt.Fprintf(c.out, "holdtime collect: shard %s polls ProxySQL %s; other shards poll %s\n", c.shard, listOrNone(mine), listOrNone(c.others))
		var full, join []string
		for _, m := range cfg.MySQL {
			if m.JoinOnly {
				join = append(join, m.Name)
			} else {
				full = append(full, m.Name)
			}
		}
		if len(full)+len(join) > 0 {
			fmt.Fprintf(c.out, "holdtime collect: shard %s exports MySQL %s; reads MySQL %s for the proxy↔server join only (another shard exports it)\n",
				c.shard, listOrNone(full), listOrNone(join))
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	serveErr := make(chan error, len(servers))
	for i, s := range servers {
		go func() { serveErr <- s.Serve(listeners[i]) }()
	}
	runErr := make(chan error, 1)
	go func() { runErr <- col.Run(ctx) }()
	var firstErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		firstErr = fmt.Errorf("serve: %w", err)
		cancel()
	}
	shutdownCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	for _, s := range servers {
		s.Shutdown(shutdownCtx)
	}
	if err := <-runErr; err != nil && firstErr == nil {
		firstErr = fmt.Errorf("close sources: %w", err)
	}
	if firstErr != nil {
		return firstErr
	}
	fmt.Fprintln(c.out, "holdtime collect: stopped")
	return nil
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
