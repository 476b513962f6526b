package dashboards

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// Dashboard is one generated dashboard.
type Dashboard struct {
	UID   string
	Title string
	// File is the file name Write gives it: UID + ".json".
	File string
	// JSON is the dashboard model, indented, ending in a newline.
	JSON []byte
}

// builders lists every dashboard, in the order All returns them.
func builders() []func() *dashboard.DashboardBuilder {
	return []func() *dashboard.DashboardBuilder{occupancy, proxysqlPool, mysqlServer, reservationEngine}
}

// All builds every dashboard.
func All() ([]Dashboard, error) {
	var out []Dashboard
	for _, b := range builders() {
		d, err := b().Build()
		if err != nil {
			return nil, fmt.Errorf("dashboards: build: %w", err)
		}
		numberPanels(&d)
		js, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("dashboards: marshal %s: %w", *d.Uid, err)
		}
		out = append(out, Dashboard{UID: *d.Uid, Title: *d.Title, File: *d.Uid + ".json", JSON: append(js, '\n')})
	}
	return out, nil
}

// numberPanels gives every panel and row a unique id, in layout order:
// Grafana keys panel state and links (viewPanel=ID) on it.
func numberPanels(d *dashboard.Dashboard) {
	for i := range d.Panels {
		id := uint32(i + 1)
		if p := d.Panels[i].Panel; p != nil {
			p.Id = &id
		}
		if r := d.Panels[i].RowPanel; r != nil {
			r.Id = id
		}
	}
}

// Write writes every dashboard into dir (created if missing) and returns
// the paths written. Files of other names in dir are left alone.
func Write(dir string) ([]string, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("dashboards: create %s: %w", dir, err)
	}
	var paths []string
	for _, d := range all {
		p := filepath.Join(dir, d.File)
		if err := os.WriteFile(p, d.JSON, 0o644); err != nil {
			return paths, fmt.Errorf("dashboards: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// Query is one PromQL expression of one panel.
type Query struct {
	Dashboard string // dashboard UID
	Panel     string // panel title
	RefID     string
	Expr      string // as in the JSON, variables unsubstituted
	Instant   bool
}

// Variable is a dashboard's query variable, for tests that check it lists
// values.
type Variable struct {
	Dashboard string
	Name      string
	Query     string // label_values(metric, label)
}

// panelModel is the part of Grafana's panel JSON that Queries reads.
type panelModel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		RefID   string `json:"refId"`
		Expr    string `json:"expr"`
		Instant bool   `json:"instant"`
	} `json:"targets"`
	Panels []panelModel `json:"panels"` // a collapsed row's
}

type dashboardModel struct {
	UID        string       `json:"uid"`
	Panels     []panelModel `json:"panels"`
	Templating struct {
		List []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// Queries returns every query of every panel of every dashboard, read
// back from the JSON All produces, so that what is tested is what Grafana
// runs. A panel without a query is an error.
func Queries() ([]Query, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	var out []Query
	var errs []error
	for _, d := range all {
		var m dashboardModel
		if err := json.Unmarshal(d.JSON, &m); err != nil {
			return nil, fmt.Errorf("dashboards: read back %s: %w", d.UID, err)
		}
		var walk func([]panelModel)
		walk = func(ps []panelModel) {
			for _, p := range ps {
				if p.Type == "row" {
					walk(p.Panels)
					continue
				}
				if len(p.Targets) == 0 {
					errs = append(errs, fmt.Errorf("dashboards: %s: panel %q has no query", d.UID, p.Title))
				}
				for _, t := range p.Targets {
					out = append(out, Query{Dashboard: d.UID, Panel: p.Title, RefID: t.RefID, Expr: t.Expr, Instant: t.Instant})
				}
			}
		}
		walk(m.Panels)
	}
	return out, errors.Join(errs...)
}

// Variables returns every query variable of every dashboard.
func Variables() ([]Variable, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	var out []Variable
	for _, d := range all {
		var m dashboardModel
		if err := json.Unmarshal(d.JSON, &m); err != nil {
			return nil, fmt.Errorf("dashboards: read back %s: %w", d.UID, err)
		}
		for _, v := range m.Templating.List {
			if v.Type != "query" {
				continue
			}
			q, _ := v.Query.(string)
			out = append(out, Variable{Dashboard: d.UID, Name: v.Name, Query: q})
		}
	}
	return out, nil
}

// Substitute replaces Grafana's variables in expr as Grafana would with
// every variable at "All" (.*) and the given rate interval (Grafana's
// $__rate_interval, at least four scrape intervals) for $__rate_interval,
// $__interval and $__range.
func Substitute(expr, rateInterval string) string {
	r := strings.NewReplacer(
		"$__rate_interval", rateInterval,
		"$__interval", rateInterval,
		"$__range", rateInterval,
		"${"+varTag+"}", ".*",
		"$"+varTag, ".*",
		"$"+varInstance, ".*",
		"$"+varTarget, ".*",
		"$"+varSource, ".*",
		"$"+varHostgroup, ".*",
		"$"+varStrategy, ".*",
	)
	return r.Replace(expr)
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)

// VariableQuery splits a variable's label_values(selector, label) into its
// series selector and label, so that a test can run the equivalent PromQL
// (count by (label) (selector)).
func VariableQuery(query string) (selector, label string, err error) {
	m := labelValues.FindStringSubmatch(query)
	if m == nil {
		return "", "", fmt.Errorf("dashboards: variable query %q is not label_values(selector, label)", query)
	}
	return m[1], m[2], nil
}
