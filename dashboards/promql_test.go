package dashboards_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/holdtime/holdtime/dashboards"
)

// The collector's per-source figures: several sources of a layer see the
// same hold, so adding them over source counts it up to four times.
var perSourceMetrics = []string{
	"holdtime_collector_hold_seconds_total",
	"holdtime_collector_idle_hold_seconds_total",
	"holdtime_collector_active_seconds_total",
	"holdtime_collector_statements_total",
	"holdtime_collector_statement_errors_total",
	"holdtime_collector_sessions",
}

var aggregations = map[string]bool{"sum": true, "avg": true, "min": true, "max": true, "count": true, "group": true,
	"stddev": true, "stdvar": true, "topk": true, "bottomk": true, "quantile": true, "count_values": true}

type token struct {
	kind byte // 'i' identifier or number, 's' string (unquoted), 'p' punctuation or operator
	text string
}

// tokenize splits PromQL (with Grafana's $variables) into tokens, enough
// to find aggregations, their grouping and the selectors inside them.
func tokenize(expr string) []token {
	var out []token
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			var b strings.Builder
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' && j+1 < len(expr) {
					j++
				}
				b.WriteByte(expr[j])
				j++
			}
			out = append(out, token{'s', b.String()})
			i = j + 1
		case c == '_' || c == ':' || c == '$' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9':
			j := i
			for j < len(expr) && (expr[j] == '_' || expr[j] == ':' || expr[j] == '$' || expr[j] == '.' ||
				expr[j] >= 'a' && expr[j] <= 'z' || expr[j] >= 'A' && expr[j] <= 'Z' || expr[j] >= '0' && expr[j] <= '9') {
				j++
			}
			out = append(out, token{'i', expr[i:j]})
			i = j
		default:
			if i+1 < len(expr) && slices.Contains([]string{"=~", "!~", "!=", "==", ">=", "<="}, expr[i:i+2]) {
				out = append(out, token{'p', expr[i : i+2]})
				i += 2
				continue
			}
			out = append(out, token{'p', string(c)})
			i++
		}
	}
	return out
}

// closing returns the index of the parenthesis (or brace) closing the one
// at i.
func closing(toks []token, i int) int {
	open, shut := toks[i].text, map[string]string{"(": ")", "{": "}", "[": "]"}[toks[i].text]
	depth := 0
	for j := i; j < len(toks); j++ {
		if toks[j].kind != 'p' {
			continue
		}
		switch toks[j].text {
		case open:
			depth++
		case shut:
			if depth--; depth == 0 {
				return j
			}
		}
	}
	return len(toks) - 1
}

// labelList reads "by (a, b)" or "without (a)" at i: the keyword, the
// labels, and the index after the list.
func labelList(toks []token, i int) (string, []string, int) {
	if i+1 >= len(toks) || toks[i].kind != 'i' || (toks[i].text != "by" && toks[i].text != "without") || toks[i+1].text != "(" {
		return "", nil, i
	}
	end := closing(toks, i+1)
	var labels []string
	for _, tk := range toks[i+2 : end] {
		if tk.kind == 'i' {
			labels = append(labels, tk.text)
		}
	}
	return toks[i].text, labels, end + 1
}

var plainValue = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// unpinnedSelectors lists the selectors of per-source metrics in toks that
// do not pin source to one value.
func unpinnedSelectors(toks []token) []string {
	var out []string
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		name := ""
		braces := -1
		switch {
		case tk.kind == 'i' && slices.Contains(perSourceMetrics, tk.text):
			name = tk.text
			if i+1 < len(toks) && toks[i+1].text == "{" {
				braces = i + 1
			}
		case tk.kind == 'p' && tk.text == "{" && (i == 0 || toks[i-1].kind != 'i'):
			braces = i // {__name__=...}
		default:
			continue
		}
		pinned := false
		if braces >= 0 {
			end := closing(toks, braces)
			for j := braces + 1; j+2 <= end; j++ {
				label, op, value := toks[j], toks[j+1], toks[j+2]
				if label.kind != 'i' || op.kind != 'p' || value.kind != 's' {
					continue
				}
				switch {
				case label.text == "__name__" && op.text == "=" && slices.Contains(perSourceMetrics, value.text):
					name = value.text
				case label.text == "__name__" && op.text == "=~":
					if re, err := regexp.Compile("^(?:" + value.text + ")$"); err == nil {
						for _, m := range perSourceMetrics {
							if re.MatchString(m) {
								name = m
							}
						}
					}
				case label.text == "source" && (op.text == "=" || op.text == "=~") && plainValue.MatchString(value.text):
					pinned = true
				}
				j += 2
			}
			i = end
		}
		if name != "" && !pinned {
			out = append(out, name)
		}
	}
	return out
}

// sumsOverSource returns, for each aggregation of expr that adds
// per-source figures of more than one source together, why.
func sumsOverSource(expr string) []string {
	toks := tokenize(expr)
	var out []string
	for i, tk := range toks {
		if tk.kind != 'i' || !aggregations[tk.text] {
			continue
		}
		kw, labels, j := labelList(toks, i+1)
		if j >= len(toks) || toks[j].text != "(" {
			continue // a label or metric named like an aggregation
		}
		end := closing(toks, j)
		if kw == "" {
			kw, labels, _ = labelList(toks, end+1)
		}
		keepsSource := kw == "by" && slices.Contains(labels, "source") || kw == "without" && !slices.Contains(labels, "source")
		if keepsSource {
			continue
		}
		for _, m := range unpinnedSelectors(toks[j+1 : end]) {
			grouping := "no grouping"
			if kw != "" {
				grouping = kw + " (" + strings.Join(labels, ", ") + ")"
			}
			out = append(out, tk.text+" "+grouping+" adds "+m+" of several sources")
		}
	}
	return out
}

func TestSumsOverSourceFindsThem(t *testing.T) {
	for expr, bad := range map[string]bool{
		`sum by (conn_tag) (rate(holdtime_collector_hold_seconds_total{source=~"proxysql_.*|mysql"}[5m]))`:               true,
		`sum by (conn_tag) (rate(holdtime_collector_hold_seconds_total{target=~"$target", source=~"$source"}[1m]))`:      true,
		`sum(rate(holdtime_collector_hold_seconds_total[5m])) by (conn_tag)`:                                             true,
		`sum without (source) (holdtime_collector_sessions)`:                                                             true,
		`sum by (conn_tag) (sum by (conn_tag, source) (rate(holdtime_collector_idle_hold_seconds_total[5m])))`:           true,
		`sort_desc(sum by (conn_tag) ({__name__=~"holdtime_collector_(hold|idle_hold)_seconds_total"}))`:                 true,
		`avg(holdtime_collector_statements_total)`:                                                                       true,
		`sum by (conn_tag, source) (rate(holdtime_collector_hold_seconds_total[5m]))`:                                    false,
		`sum by (target, source, conn_tag) (rate(holdtime_collector_hold_seconds_total{source=~"$source"}[5m]))`:         false,
		`sum by (conn_tag) (rate(holdtime_collector_hold_seconds_total{source="mysql"}[5m]))`:                            false,
		`sum by (conn_tag) (rate(holdtime_collector_hold_seconds_total{source=~"proxysql_events"}[5m]))`:                 false,
		`sum without (target) (holdtime_collector_sessions)`:                                                             false,
		`sum by (conn_tag) (rate(holdtime_collector_layer_hold_seconds_total{layer="proxy"}[5m]))`:                       false,
		`max by (target, source) (holdtime_source_up{source=~"proxysql_.*"})`:                                            false,
		`rate(holdtime_collector_hold_seconds_total{source=~".*"}[5m])`:                                                  false,
		`sum by (conn_tag) (rate(holdtime_connection_hold_time_seconds_total[5m])) / sum by (conn_tag) (rate(x[5m]))`:    false,
		`sum by (conn_tag, source) (rate(holdtime_collector_hold_seconds_total[5m])) / on (conn_tag) group_left sum(up)`: false,
	} {
		if got := sumsOverSource(expr); (len(got) > 0) != bad {
			t.Errorf("sumsOverSource(%s) = %v; want a finding: %v", expr, got, bad)
		}
	}
}

// ruleExprs returns every expr of a Prometheus rule file: inline, or a
// block scalar (| or >) of the lines indented under it.
func ruleExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	lines := strings.Split(string(b), "\n")
	name := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trimmed := strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(trimmed, "- alert:"); ok {
			name = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(trimmed, "- record:"); ok {
			name = strings.TrimSpace(v)
		}
		v, ok := strings.CutPrefix(trimmed, "expr:")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if v != "|" && v != ">" && v != "|-" && v != ">-" {
			out[name] = v
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " "))
		var body []string
		for i+1 < len(lines) {
			next := lines[i+1]
			if strings.TrimSpace(next) != "" && len(next)-len(strings.TrimLeft(next, " ")) <= indent {
				break
			}
			body = append(body, next)
			i++
		}
		out[name] = strings.Join(body, "\n")
	}
	return out
}

// TestNoSumOverSource: no dashboard panel and no alert rule adds the
// per-source figures of several sources together. Panels and alerts that
// compare tags use the layer figures (holdtime_collector_layer_*), one
// headline source per target and layer.
func TestNoSumOverSource(t *testing.T) {
	qs, err := dashboards.Queries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		for _, why := range sumsOverSource(q.Expr) {
			t.Errorf("dashboard %s, panel %q, query %s: %s: %s", q.Dashboard, q.Panel, q.RefID, why, q.Expr)
		}
	}
	vs, err := dashboards.Variables()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		for _, why := range sumsOverSource(v.Query) {
			t.Errorf("dashboard %s, variable %s: %s", v.Dashboard, v.Name, why)
		}
	}
	rules := ruleExprs(t, "../deploy/prometheus/rules.yml")
	if len(rules) < 5 {
		t.Fatalf("%d rule expressions read from rules.yml", len(rules))
	}
	for name, expr := range rules {
		for _, why := range sumsOverSource(expr) {
			t.Errorf("rule %s: %s: %s", name, why, expr)
		}
	}
}
