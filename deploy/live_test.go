package deploy_test

// Live checks of the compose stack's ProxySQL setup against the real
// binary (testenv.StartProxySQL; they skip without one, and fail under
// HOLDTIME_REQUIRE_PROXYSQL=1): the collector reads everything it needs
// through the read-only stats account of deploy/proxysql/proxysql.cnf, and
// the compose file's health-check commands work.

import (
	"context"
	"database/sql"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// statsHidden lists the admin queries the stats account runs without an
// error but sees nothing of, each with what that costs. The stats schema's
// global_variables is not the main schema's: it holds none of the mysql-*
// settings.
var statsHidden = map[string]string{
	"mysql-query_digests_keep_comment": "the collector cannot check the setting and assumes comments are kept " +
		"(proxysql.cnf sets it); were it false, digest figures would go to untagged instead of unknown",
}

// readFile reads a file of the repository relative to deploy/.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// statsCredentials is the stats account proxysql.cnf declares.
func statsCredentials(t *testing.T) (user, pass string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*stats_credentials="([^:";]+):([^";]+)"`).FindStringSubmatch(readFile(t, "proxysql/proxysql.cnf"))
	if m == nil {
		t.Fatal(`proxysql.cnf declares no stats_credentials="user:pass"`)
	}
	return m[1], m[2]
}

// composeService is the text of one service of docker-compose.yml.
func composeService(t *testing.T, name string) string {
	t.Helper()
	compose := readFile(t, "../docker-compose.yml")
	start := strings.Index(compose, "\n  "+name+":\n")
	if start < 0 {
		t.Fatalf("docker-compose.yml has no service %s", name)
	}
	block := compose[start+1:]
	if end := regexp.MustCompile(`\n  \S|\n\S`).FindStringIndex(block[1:]); end != nil {
		block = block[:end[0]+1]
	}
	return block
}

// composeHealthTest is a service's health-check command (written as a
// JSON-compatible flow sequence).
func composeHealthTest(t *testing.T, service string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s+test: (\[.*\])$`).FindStringSubmatch(composeService(t, service))
	if m == nil {
		t.Fatalf("service %s has no one-line health check test: [...]", service)
	}
	var args []string
	if err := json.Unmarshal([]byte(m[1]), &args); err != nil {
		t.Fatalf("service %s: health check %s: %v", service, m[1], err)
	}
	return args
}

// adminQueries finds every query the collector sends to ProxySQL's admin
// interface: the string constants and literals of collector/*.go that read
// a stats_* table or global_variables.
func adminQueries(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../collector/*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	consts := map[string]ast.Expr{}
	var parsed []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, af)
		for _, d := range af.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.CONST {
				for _, s := range gd.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							consts[n.Name] = vs.Values[i]
						}
					}
				}
			}
		}
	}
	var eval func(ast.Expr) (string, bool)
	eval = func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.ParenExpr:
			return eval(e.X)
		case *ast.Ident:
			if v, ok := consts[e.Name]; ok {
				return eval(v)
			}
		case *ast.BinaryExpr:
			if e.Op == token.ADD {
				a, ok1 := eval(e.X)
				b, ok2 := eval(e.Y)
				return a + b, ok1 && ok2
			}
		}
		return "", false
	}
	admin := regexp.MustCompile(`(?is)^\s*SELECT\b.*\bFROM\s+(stats_\w+|global_variables)\b`)
	var out []string
	for _, af := range parsed {
		ast.Inspect(af, func(n ast.Node) bool {
			e, ok := n.(ast.Expr)
			if !ok {
				return true
			}
			if s, ok := eval(e); ok {
				if admin.MatchString(s) && !slices.Contains(out, s) {
					out = append(out, s)
				}
				return false
			}
			return true
		})
	}
	if len(out) < 4 {
		t.Fatalf("found %d admin queries in collector/*.go, expected at least the processlist, digest, pool and global ones: %q", len(out), out)
	}
	return out
}

// countRows runs a query and counts its rows.
func countRows(ctx context.Context, db *sql.DB, q string) (int, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// monitorAccount creates a MySQL account with exactly the grants
// deploy/mysql/init.sql gives the collector's monitoring user.
func monitorAccount(t *testing.T, target *testenv.Target) *mysql.Config {
	t.Helper()
	ctx := t.Context()
	grants := regexp.MustCompile(`(?m)^GRANT (.+) TO 'holdtime'@'%';$`).FindAllStringSubmatch(readFile(t, "mysql/init.sql"), -1)
	if len(grants) == 0 {
		t.Fatal("init.sql grants nothing to 'holdtime'@'%'")
	}
	user, pass := "holdtime_deploy_test", "monitor-"+strconv.FormatInt(time.Now().UnixNano(), 36)
	admin := target.Admin()
	stmts := []string{
		"DROP USER IF EXISTS '" + user + "'@'127.0.0.1'",
		"CREATE USER '" + user + "'@'127.0.0.1' IDENTIFIED BY '" + pass + "'",
	}
	for _, g := range grants {
		stmts = append(stmts, "GRANT "+g[1]+" TO '"+user+"'@'127.0.0.1'")
	}
	for _, q := range stmts {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { admin.ExecContext(context.Background(), "DROP USER IF EXISTS '"+user+"'@'127.0.0.1'") })
	cfg := target.Config("")
	cfg.User, cfg.Passwd = user, pass
	return cfg
}

// buildHoldtime builds the holdtime binary the compose health checks run.
func buildHoldtime(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "holdtime")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/holdtime").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ../cmd/holdtime: %v\n%s", err, out)
	}
	return bin
}

// healthCheck runs a compose health-check command with the holdtime binary
// and addresses of this test; it returns the exit code and output.
func healthCheck(t *testing.T, bin string, test []string, env []string, replace ...string) (int, string) {
	t.Helper()
	if len(test) < 2 || test[0] != "CMD" || test[1] != "/usr/local/bin/holdtime" {
		t.Fatalf("health check %q does not run /usr/local/bin/holdtime", test)
	}
	r := strings.NewReplacer(replace...)
	args := make([]string, 0, len(test)-2)
	for _, a := range test[2:] {
		args = append(args, r.Replace(a))
	}
	for i, e := range env {
		env[i] = r.Replace(e)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, strings.TrimSpace(string(out))
}

// TestComposeCollectorWithStatsCredentials runs, against a real ProxySQL
// configured with proxysql.cnf's stats account:
//   - every admin query of the collector, as admin and as the stats
//     account: the stats account must read the same rows (statsHidden
//     lists what it cannot see, and why that is acceptable);
//   - the collector with only that account (plus the events log, a MySQL
//     account with init.sql's grants and conntag's spans, as in compose)
//     against a tagged workload: every source up, figures from each, and
//     the events log's hold of the hog within 20% of the client's clock;
//   - the compose health checks of ProxySQL and of the collector.
func TestComposeCollectorWithStatsCredentials(t *testing.T) {
	testenv.RequireProxySQL(t)
	ctx := t.Context()
	statsUser, statsPass := statsCredentials(t)

	target := testenv.Shared(t)
	d := testenv.NewDatabase(t)
	px, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: target, Schema: d.Name,
		StatsUser: statsUser, StatsPass: statsPass})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	if _, err := d.Open(t).ExecContext(ctx, "CREATE TABLE q (id INT PRIMARY KEY, n INT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	d.Open(t).ExecContext(ctx, "INSERT INTO q VALUES (1, 0)")
	adminDB, err := sql.Open("mysql", px.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer adminDB.Close()
	statsDB, err := sql.Open("mysql", px.StatsDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer statsDB.Close()
	app, err := sql.Open("mysql", px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()

	t.Run("admin queries", func(t *testing.T) {
		// Something in every table: a digest, and a session idle in a
		// transaction holding its backend (a processlist row with
		// extended_info).
		for range 3 {
			app.ExecContext(ctx, "/* conn_tag:deploy_probe */ SELECT n FROM q WHERE id = 1")
		}
		tx, err := app.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "/* conn_tag:deploy_probe */ SELECT n FROM q WHERE id = 1 FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		for _, q := range adminQueries(t) {
			want, err := countRows(ctx, adminDB, q)
			if err != nil {
				t.Errorf("as admin: %s: %v", q, err)
				continue
			}
			got, err := countRows(ctx, statsDB, q)
			switch {
			case err != nil:
				t.Errorf("the stats account cannot run %s: %v", q, err)
			case got == want && want > 0:
				t.Logf("stats account reads it all (%d rows): %s", got, q)
			case got == want:
				t.Errorf("no rows as admin either, nothing compared: %s", q)
			default:
				why := ""
				for k, v := range statsHidden {
					if strings.Contains(q, k) {
						why = v
					}
				}
				if why == "" || got != 0 {
					t.Errorf("the stats account reads %d rows, admin %d: %s", got, want, q)
				} else {
					t.Logf("stats account sees %d of %d rows (known: %s): %s", got, want, why, q)
				}
			}
		}
		var ext sql.NullString
		if err := statsDB.QueryRowContext(ctx, "SELECT extended_info FROM stats_mysql_processlist WHERE srv_host IS NOT NULL").Scan(&ext); err != nil ||
			!strings.Contains(ext.String, `"backends"`) {
			t.Errorf("the stats account does not see extended_info of a pinned session: %v %.80q", err, ext.String)
		}
		// Read-only: configuration cannot be changed.
		if _, err := statsDB.ExecContext(ctx, "UPDATE global_variables SET variable_value = 'false' WHERE variable_name = 'mysql-query_digests_keep_comment'"); err == nil {
			t.Error("the stats account could change a global variable")
		}
	})

	// The collector as compose runs it, with the stats account only.
	reg := prometheus.NewRegistry()
	col, err := collector.New(collector.Config{
		ProxySQL: []collector.ProxySQLConfig{{Name: "proxysql", DSN: px.StatsDSN(), EventsLog: px.EventsLog,
			ProcesslistInterval: 100 * time.Millisecond, DigestInterval: 500 * time.Millisecond,
			PoolInterval: 300 * time.Millisecond, TagGrace: 2 * time.Second}},
		MySQL:      []collector.MySQLConfig{{Name: "mysql", DSN: monitorAccount(t, target).FormatDSN(), Interval: 250 * time.Millisecond}},
		OTLP:       collector.OTLPConfig{Enabled: true},
		Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(col.Handler())
	defer srv.Close()
	bin := buildHoldtime(t)
	collectorHealth := composeHealthTest(t, "collector")
	collectorAddr := strings.TrimPrefix(srv.URL, "http://")
	code, out := healthCheck(t, bin, collectorHealth, nil, "127.0.0.1:9479", collectorAddr)
	if code != 1 || !strings.Contains(out, "503") || !strings.Contains(out, "sources down") {
		t.Errorf("collector health check before the first polls: exit %d, %q; want 1 and the sources down", code, out)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- col.Run(runCtx) }()
	defer func() { stop(); <-done }()
	// As in compose, the workload starts once the collector is ready: the
	// events log is tailed from its end when first opened, and the first
	// digest poll is the baseline.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ok, _ := col.Ready(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector not ready after 30 s: %+v", col.Sources())
		}
	}

	// The workload: conntag through ProxySQL, spans to the collector.
	exporter, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter, sdktrace.WithBatchTimeout(200*time.Millisecond)))
	defer tp.Shutdown(context.Background())
	connector, err := mysql.NewConnector(px.AppConfig())
	if err != nil {
		t.Fatal(err)
	}
	tagged := conntag.OpenDB(connector, conntag.WithTracerProvider(tp), conntag.WithSessionID())
	defer tagged.Close()
	var (
		mu       sync.Mutex
		hogHold  time.Duration // BEGIN sent to COMMIT returned, as the client saw it
		wg       sync.WaitGroup
		workErrs = make(chan error, 2)
	)
	wg.Go(func() {
		hctx := conntag.WithTag(ctx, "deploy_hog")
		for range 4 {
			start := time.Now()
			tx, err := tagged.BeginTx(hctx, nil)
			if err != nil {
				workErrs <- err
				return
			}
			if _, err := tx.ExecContext(hctx, "SELECT n FROM q WHERE id = 1 FOR UPDATE"); err != nil {
				tx.Rollback()
				workErrs <- err
				return
			}
			time.Sleep(400 * time.Millisecond) // the workload: idle inside the transaction
			if _, err := tx.ExecContext(hctx, "UPDATE q SET n = n + 1 WHERE id = 1"); err != nil {
				tx.Rollback()
				workErrs <- err
				return
			}
			if err := tx.Commit(); err != nil {
				workErrs <- err
				return
			}
			mu.Lock()
			hogHold += time.Since(start)
			mu.Unlock()
		}
	})
	wg.Go(func() {
		sctx := conntag.WithTag(ctx, "deploy_short")
		for range 40 {
			if _, err := tagged.ExecContext(sctx, "SELECT SLEEP(0.02)"); err != nil {
				workErrs <- err
				return
			}
		}
	})
	wg.Wait()
	close(workErrs)
	for err := range workErrs {
		t.Fatalf("workload: %v", err)
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}

	// Every source up, figures from each. Bounded: the slowest is the
	// digest poll (two polls after the workload) and the events log tail.
	figures := func(tag string, src collector.Source) *collector.SourceFigures {
		for _, r := range col.Top(time.Minute) {
			if r.Tag == tag && r.Sources[src] != nil {
				return r.Sources[src]
			}
		}
		return nil
	}
	want := map[collector.Source]string{
		collector.SourceProxySQLProcesslist: "deploy_hog", collector.SourceProxySQLEvents: "deploy_hog",
		collector.SourceProxySQLDigest: "deploy_short", collector.SourceMySQL: "deploy_hog",
		collector.SourceOTLP: "deploy_short",
	}
	missing := func() []string {
		var m []string
		for _, s := range col.Sources() {
			if !s.Up {
				m = append(m, string(s.Source)+" down: "+s.LastError)
			}
		}
		for src, tag := range want {
			if f := figures(tag, src); f == nil || f.Statements == 0 && f.HoldSeconds == 0 {
				m = append(m, "no "+string(src)+" figures for "+tag)
			}
		}
		slices.Sort(m)
		return m
	}
	// Until the tailer has read the hog's last transaction too: 8 tagged
	// statements, 2 per transaction.
	hogEvents := func() float64 {
		if f := figures("deploy_hog", collector.SourceProxySQLEvents); f != nil {
			return f.Statements
		}
		return 0
	}
	deadline := time.Now().Add(30 * time.Second)
	for (len(missing()) > 0 || hogEvents() < 8) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := hogEvents(); n != 8 {
		t.Errorf("the events log shows %.0f tagged statements of deploy_hog, the client ran 8", n)
	}
	if m := missing(); len(m) > 0 {
		t.Fatalf("with the stats account after 30 s: %s", strings.Join(m, "; "))
	}
	if len(col.Sources()) < 6 {
		t.Errorf("sources: %+v; want processlist, digest, pool, events log, mysql and otlp", col.Sources())
	}
	t.Logf("client: deploy_hog held its connection %.3f s (BEGIN to COMMIT, 4 transactions)", hogHold.Seconds())
	for src, tag := range want {
		f := figures(tag, src)
		t.Logf("%-20s %-12s hold %.3f s, statements %.0f", src, tag, f.HoldSeconds, f.Statements)
	}
	client := hogHold.Seconds()
	if ev := figures("deploy_hog", collector.SourceProxySQLEvents).HoldSeconds; ev < 0.8*client || ev > 1.2*client {
		t.Errorf("events log: deploy_hog held a backend %.3f s, the client measured %.3f s", ev, client)
	}
	// The pool and global tables: not per tag, so gauges.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	for _, name := range []string{"holdtime_proxysql_pool_connections", "holdtime_proxysql_client_connections"} {
		if !slices.Contains(names, name) {
			t.Errorf("no %s: stats_mysql_connection_pool/stats_mysql_global not read", name)
		}
	}

	// The compose health checks, as docker would run them.
	code, out = healthCheck(t, bin, collectorHealth, nil, "127.0.0.1:9479", collectorAddr)
	if code != 0 || !strings.HasPrefix(out, "ok ") {
		t.Errorf("collector health check with every source up: exit %d, %q", code, out)
	}
	env := regexp.MustCompile(`(?m)^\s+(HOLDTIME_PROBE_DSN): "([^"]+)"$`).FindStringSubmatch(composeService(t, "proxysql"))
	if env == nil {
		t.Fatal("the proxysql service sets no HOLDTIME_PROBE_DSN for its health check")
	}
	code, out = healthCheck(t, bin, composeHealthTest(t, "proxysql"), []string{env[1] + "=" + env[2]}, "127.0.0.1:6032", px.AdminAddr)
	if code != 0 || !strings.HasPrefix(out, "ok mysql "+statsUser+"@") {
		t.Errorf("proxysql health check: exit %d, %q", code, out)
	}
}
