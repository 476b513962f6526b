// Tests of the docker-compose stack's files, each checked by the tool that
// owns it where one is installed: promtool for the Prometheus config and the
// alert rules (with their unit tests), Debian's docker-compose for the
// compose file (and, on its normalized output, what an SRE expects: exact
// images, restart policies, health checks, start order). No container
// engine is needed. Without a tool the test skips, except under CI=true,
// where it fails: .ci/install-deps installs them. live_test.go runs the
// collector and the health checks against a real ProxySQL.
package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/holdtime/holdtime/internal/doctor"
	"github.com/holdtime/holdtime/internal/shard"
)

// tool finds a binary or skips (fails under CI) with the install command.
func tool(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := name + " is not on PATH: install it with `" + install + "` (or .ci/install-deps)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func runTool(t *testing.T, dir, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool", "sudo apt-get install -y prometheus")
	runTool(t, "prometheus", promtool, "check", "rules", "rules.yml")
	runTool(t, "prometheus", promtool, "test", "rules", "rules_test.yml")
}

// TestEveryAlertIsUnitTested keeps rules_test.yml in step with rules.yml.
func TestEveryAlertIsUnitTested(t *testing.T) {
	rules, err := os.ReadFile("prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("prometheus/rules_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) == 0 {
		t.Fatal("no alerts in rules.yml")
	}
	for _, a := range alerts {
		if !strings.Contains(string(tests), "alertname: "+a[1]+"\n") {
			t.Errorf("alert %s has no test in prometheus/rules_test.yml", a[1])
		}
	}
}

func TestPrometheusConfig(t *testing.T) {
	promtool := tool(t, "promtool", "sudo apt-get install -y prometheus")
	out := runTool(t, "prometheus", promtool, "check", "config", "prometheus.yml")
	if !strings.Contains(out, "rules.yml") {
		t.Errorf("promtool did not check the rule file through the config:\n%s", out)
	}
}

func TestComposeFile(t *testing.T) {
	compose := tool(t, "docker-compose", "sudo apt-get install -y docker-compose")
	out := runTool(t, "..", compose, "-f", "docker-compose.yml", "config")
	for _, want := range []string{"mysql:8.4.", "target: proxysql", "prom/prometheus:", "grafana/grafana:",
		"--listen=0.0.0.0:9479", "--proxysql-events-log=", "--mysql=", "flashsale", "--otlp",
		"--otlp-endpoint=http://collector:9479/v1/traces", "--otlp-metrics-endpoint=http://collector:9479/v1/metrics"} {
		if !strings.Contains(out, want) {
			t.Errorf("docker-compose config has no %q", want)
		}
	}
	// The collector's bearer token: the workload's span exporter and
	// Prometheus's scrape send the very token the collector requires.
	token := regexp.MustCompile(`HOLDTIME_TOKEN: (\S+)`).FindStringSubmatch(out)
	if token == nil {
		t.Error("the collector has no HOLDTIME_TOKEN: /v1/traces and the API would be open to anyone who reaches the port")
	} else {
		if !strings.Contains(out, "OTEL_EXPORTER_OTLP_HEADERS: Authorization=Bearer%20"+token[1]) {
			t.Errorf("the workload's span exporter does not send the collector's token %s", token[1])
		}
		prom, err := os.ReadFile("prometheus/prometheus.yml")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(prom), "credentials: "+token[1]) {
			t.Errorf("Prometheus does not scrape the collector with its token %s", token[1])
		}
	}
	services := parseComposeConfig(t, out)
	for _, name := range []string{"mysql", "proxysql", "proxysql2", "collector", "collector-2", "workload", "prometheus", "grafana"} {
		if services[name] == nil {
			t.Errorf("no service %s", name)
		}
	}
	// What an SRE expects of every service: it comes back after a crash or
	// a reboot, says whether it is healthy, and runs an exact image.
	for name, s := range services {
		if s.restart != "unless-stopped" && s.restart != "always" {
			t.Errorf("%s: restart %q, want unless-stopped or always", name, s.restart)
		}
		if len(s.healthTest) < 2 || s.healthTest[0] != "CMD" {
			t.Errorf("%s: health check %q, want an exec-form CMD", name, s.healthTest)
		}
		if s.build {
			if s.image == "" || strings.Contains(s.image, "/") {
				t.Errorf("%s is built here: name its image locally (holdtime:local), not %q", name, s.image)
			}
			if s.healthTest[1] != "/usr/local/bin/holdtime" || s.healthTest[2] != "probe" {
				t.Errorf("%s: a holdtime image checks itself with holdtime probe, not %q", name, s.healthTest)
			}
		} else if !exactImage.MatchString(s.image) {
			t.Errorf("%s: image %q is not pinned to an exact version (x.y.z tag or digest)", name, s.image)
		}
	}
	// Start order where it matters: ProxySQL needs its backend, the
	// collector its sources, the workload ProxySQL and a collector ready
	// for its spans.
	for name, deps := range map[string][]string{
		"proxysql":    {"mysql"},
		"proxysql2":   {"mysql"},
		"collector":   {"mysql", "proxysql", "proxysql2"},
		"collector-2": {"mysql", "proxysql", "proxysql2"},
		"workload":    {"proxysql", "collector"},
	} {
		for _, dep := range deps {
			if got := services[name].dependsOn[dep]; got != "service_healthy" {
				t.Errorf("%s depends on %s with condition %q, want service_healthy", name, dep, got)
			}
		}
	}
	for name, s := range services {
		for dep, cond := range s.dependsOn {
			if cond == "service_healthy" && services[dep] != nil && len(services[dep].healthTest) == 0 {
				t.Errorf("%s waits for %s to be healthy, which has no health check", name, dep)
			}
		}
	}
}

// TestComposeShards checks how the two collectors split the work so that
// Prometheus can add them up per tag without counting anything twice: both
// get the same ProxySQL fleet and distinct shards covering it, and by the
// shard hash collect uses each polls at least one ProxySQL (a shard that
// would poll nothing is refused, or idles); MySQL (the server layer) and
// the app's spans go to one collector only, the one that owns the ProxySQL
// the workload dials (only the owner of a ProxySQL reads the session ids
// spans name); Prometheus scrapes every collector.
func TestComposeShards(t *testing.T) {
	collectors := []string{"collector", "collector-2"}
	shardFlag := regexp.MustCompile(`(?m)^\s+- --shard=(\d+/\d+)$`)
	fleetFlag := regexp.MustCompile(`(?m)^\s+- (--proxysql(?:-events-log|-client-address)?=\S+)$`)
	targetFlag := regexp.MustCompile(`(?m)^\s+- --proxysql=([^=]+)=`)
	clientFlag := regexp.MustCompile(`(?m)^\s+- --proxysql-client-address=([^=]+)=([^:]+):`)
	byIndex := map[int]string{}
	var fleets []string
	var targets []string
	clientHost := map[string]string{} // target -> the host apps dial
	var mysqls, otlps []string
	for _, name := range collectors {
		svc := composeService(t, name)
		m := shardFlag.FindStringSubmatch(svc)
		if m == nil {
			t.Fatalf("%s has no --shard=INDEX/COUNT", name)
		}
		sh, err := shard.Parse(m[1])
		if err != nil {
			t.Fatal(err)
		}
		if sh.Count != len(collectors) || byIndex[sh.Index] != "" {
			t.Errorf("%s: --shard=%s; want each of 0..%d once, out of %d", name, m[1], len(collectors)-1, len(collectors))
		}
		byIndex[sh.Index] = name
		var list []string
		for _, f := range fleetFlag.FindAllStringSubmatch(svc, -1) {
			list = append(list, f[1])
		}
		fleets = append(fleets, strings.Join(list, " "))
		targets = nil
		for _, f := range targetFlag.FindAllStringSubmatch(svc, -1) {
			targets = append(targets, f[1])
		}
		for _, f := range clientFlag.FindAllStringSubmatch(svc, -1) {
			clientHost[f[1]] = f[2]
		}
		for _, f := range regexp.MustCompile(`(?m)^\s+- --mysql=([^=]+)=`).FindAllStringSubmatch(svc, -1) {
			mysqls = append(mysqls, name+":"+f[1])
		}
		if strings.Contains(svc, "- --otlp\n") || strings.Contains(svc, "- --otlp-metrics\n") {
			otlps = append(otlps, name)
		}
	}
	if fleets[0] != fleets[1] {
		t.Errorf("the collectors are given different fleets; each must get all of it and keep its shard:\n%s\n%s", fleets[0], fleets[1])
	}
	if len(targets) < 2 {
		t.Fatalf("the fleet is %v: two collectors need at least two ProxySQLs", targets)
	}
	owner := map[string]string{} // ProxySQL target -> collector service
	polls := map[string][]string{}
	for _, target := range targets {
		owner[target] = byIndex[shard.Owner(target, len(collectors))]
		polls[owner[target]] = append(polls[owner[target]], target)
	}
	for _, name := range collectors {
		if len(polls[name]) == 0 {
			t.Errorf("%s's shard owns no ProxySQL of %v: rename a target so the hash splits the fleet", name, targets)
		}
	}
	// Every collector reads MySQL for the join of its own ProxySQLs; the
	// shard its name hashes to exports it (collect --shard): both must be
	// given it, or a shard's idle transactions go unknown.
	if len(mysqls) != len(collectors) || len(otlps) != 1 {
		t.Errorf("MySQL given to %v, app counters and spans received by %v: want MySQL in every collector, OTLP in one", mysqls, otlps)
	}
	for _, m := range mysqls {
		name, server, _ := strings.Cut(m, ":")
		if exporter := byIndex[shard.Owner(server, len(collectors))]; name == exporter {
			t.Logf("MySQL %s: exported by %s, join-only in the others", server, exporter)
		}
	}
	workload := composeService(t, "workload")
	dial := regexp.MustCompile(`--dsn=[^@]*@tcp\(([^:]+):`).FindStringSubmatch(workload)
	sendTo := regexp.MustCompile(`--otlp-endpoint=https?://([^:/]+)`).FindStringSubmatch(workload)
	if dial == nil || sendTo == nil {
		t.Fatalf("the workload names no --dsn host or no --otlp-endpoint host")
	}
	var dialled string
	for target, host := range clientHost {
		if host == dial[1] {
			dialled = target
		}
	}
	if dialled == "" {
		t.Errorf("no --proxysql-client-address names %s, the host the workload dials: its spans route nowhere", dial[1])
	} else if owner[dialled] != sendTo[1] {
		t.Errorf("the workload dials %s, polled by %s, but sends its spans to %s: their session ids would reach no target",
			dialled, owner[dialled], sendTo[1])
	}
	if counters := regexp.MustCompile(`--otlp-metrics-endpoint=https?://([^:/]+)`).FindStringSubmatch(workload); counters != nil && counters[1] != otlps[0] {
		t.Errorf("the workload sends its counters to %s, but %v receives OTLP: its app figures would be refused", counters[1], otlps)
	}
	prom, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range collectors {
		if !strings.Contains(string(prom), `"`+name+`:9479"`) {
			t.Errorf("Prometheus does not scrape %s", name)
		}
	}
	t.Logf("shards: %v", polls)
}

// exactImage is an image pinned to an x.y.z version, a digest, or both.
var exactImage = regexp.MustCompile(`^[a-z0-9./_-]+(:v?[0-9]+\.[0-9]+\.[0-9]+[A-Za-z0-9._-]*(@sha256:[0-9a-f]{64})?|(:[A-Za-z0-9._-]+)?@sha256:[0-9a-f]{64})$`)

// TestDockerfileBases checks that every base image is pinned exactly.
func TestDockerfileBases(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(string(b), -1)
	if len(froms) < 3 {
		t.Fatalf("found %d FROM lines, want the build, proxysql and runtime stages", len(froms))
	}
	for _, f := range froms {
		if !exactImage.MatchString(f[1]) {
			t.Errorf("FROM %s is not pinned to an exact version (x.y.z tag or digest)", f[1])
		}
	}
	// The ProxySQL the captures and the live tests use.
	if !regexp.MustCompile(`(?m)^FROM proxysql/proxysql:2\.7\.1 AS proxysql$`).Match(b) {
		t.Error("the proxysql stage is not FROM proxysql/proxysql:2.7.1 AS proxysql")
	}
}

// composeSvc is what TestComposeFile checks of one service.
type composeSvc struct {
	image, restart string
	build          bool
	healthTest     []string
	dependsOn      map[string]string // service -> condition
}

// parseComposeConfig reads the normalized YAML `docker-compose config`
// prints (two-space indents, block lists at their key's indent): enough of
// it for the checks above, without a YAML library.
func parseComposeConfig(t *testing.T, out string) map[string]*composeSvc {
	t.Helper()
	services := map[string]*composeSvc{}
	var svc *composeSvc
	var section, sub string // key at indent 4, key at indent 6
	inServices := false
	unquote := func(v string) string {
		if len(v) >= 2 && (v[0] == '\'' && v[len(v)-1] == '\'' || v[0] == '"' && v[len(v)-1] == '"') {
			v = strings.ReplaceAll(v[1:len(v)-1], "''", "'")
		}
		return v
	}
	for _, line := range strings.Split(out, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		indent := len(line) - len(trimmed)
		if trimmed == "" {
			continue
		}
		key, value, isKey := strings.Cut(trimmed, ":")
		if strings.HasPrefix(trimmed, "- ") {
			isKey = false
		}
		value = unquote(strings.TrimSpace(value))
		switch {
		case indent == 0:
			inServices = trimmed == "services:"
			svc = nil
		case !inServices:
		case indent == 2 && isKey:
			svc = &composeSvc{dependsOn: map[string]string{}}
			services[key] = svc
			section, sub = "", ""
		case svc == nil:
		case indent == 4 && isKey:
			section, sub = key, ""
			switch key {
			case "image":
				svc.image = value
			case "restart":
				svc.restart = value
			case "build":
				svc.build = true
			}
		case indent == 6 && isKey:
			sub = key
			if section == "depends_on" {
				svc.dependsOn[key] = ""
			}
		case indent == 6 && section == "healthcheck" && sub == "test" && strings.HasPrefix(trimmed, "- "):
			svc.healthTest = append(svc.healthTest, unquote(strings.TrimPrefix(trimmed, "- ")))
		case indent == 8 && section == "depends_on" && key == "condition":
			svc.dependsOn[sub] = value
		}
	}
	if len(services) == 0 {
		t.Fatalf("no services in docker-compose config:\n%s", out)
	}
	return services
}

// TestComposeMountsExist checks that every file or directory the compose
// file mounts from the repository exists, so `docker compose up` does not
// create empty directories in their place.
func TestComposeMountsExist(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	mounts := regexp.MustCompile(`(?m)^\s*- (\./[^:]+):`).FindAllStringSubmatch(string(b), -1)
	if len(mounts) < 5 {
		t.Fatalf("found %d bind mounts, expected the configs of mysql, proxysql, prometheus, grafana and the dashboards", len(mounts))
	}
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join("..", m[1])); err != nil {
			t.Errorf("docker-compose.yml mounts %s: %v", m[1], err)
		}
	}
}

// TestProxySQLConfig checks the settings holdtime's collector relies on
// (no proxysql binary parses it here; testenv's ProxySQL uses the same).
func TestProxySQLConfig(t *testing.T) {
	b, err := os.ReadFile("proxysql/proxysql.cnf")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"query_digests_keep_comment=true",
		"show_processlist_extended=2",
		"eventslog_format=2",
		`eventslog_filename="/var/lib/proxysql-events/events.json"`,
		`mysql_ifaces="0.0.0.0:6032"`,
		`interfaces="0.0.0.0:6033"`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("proxysql.cnf lacks %s", want)
		}
	}
	compose, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(compose), "--proxysql-events-log=proxysql=/var/lib/proxysql-events/events.json") {
		t.Error("the collector does not read the events log ProxySQL writes")
	}
	// The collector and the ProxySQL health check use the read-only stats
	// account, which must not be an admin account as well.
	user, pass := statsCredentials(t)
	for _, svc := range []string{"collector", "proxysql"} {
		if !strings.Contains(composeService(t, svc), user+":"+pass+"@tcp(") {
			t.Errorf("compose service %s does not log in to ProxySQL with the stats account %s", svc, user)
		}
	}
	admins := regexp.MustCompile(`(?m)^\s*admin_credentials="([^"]*)"`).FindStringSubmatch(string(b))
	if admins == nil {
		t.Fatal("proxysql.cnf has no admin_credentials")
	}
	for _, cred := range strings.Split(admins[1], ";") {
		if strings.HasPrefix(cred, user+":") {
			t.Errorf("%s is an admin account too: the collector must not have admin rights", user)
		}
	}
}

// TestComposeMySQLHasTheSetupList: the compose file's MySQL starts with
// every server option of holdtime's setup list (the list `holdtime doctor`
// checks and testenv starts its servers with), so the stack is set up the
// way the README tells users to set theirs.
func TestComposeMySQLHasTheSetupList(t *testing.T) {
	svc := composeService(t, "mysql")
	for _, arg := range doctor.ServerArgs() {
		if !strings.Contains(svc, "- "+arg+"\n") {
			t.Errorf("the mysql service does not start with %s (holdtime doctor's setup list)", arg)
		}
	}
}
