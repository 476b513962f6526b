// Tests of the docker-compose stack's files, each checked by the tool that
// owns it where one is installed: promtool for the Prometheus config and the
// alert rules (with their unit tests), Debian's docker-compose for the
// compose file. No container engine is needed. Without a tool the test
// skips, except under CI=true, where it fails: .ci/install-deps installs
// them.
package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
	for _, want := range []string{"mysql:8.4", "proxysql/proxysql:", "prom/prometheus:", "grafana/grafana:",
		"--listen=0.0.0.0:9479", "--proxysql-events-log=", "--mysql=", "flashsale"} {
		if !strings.Contains(out, want) {
			t.Errorf("docker-compose config has no %q", want)
		}
	}
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
}
