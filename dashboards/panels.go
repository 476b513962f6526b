package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Variable names. Every dashboard uses a subset; every matcher on them is
// =~ so that "All" (.*) and multi-value selections work.
const (
	varDatasource = "datasource"
	varInstance   = "instance"  // the scrape target of an app (conntag, reservation)
	varTarget     = "target"    // the collector's configured instance name
	varSource     = "source"    // the collector's source
	varTag        = "tag"       // conn_tag
	varHostgroup  = "hostgroup" // ProxySQL hostgroup
	varStrategy   = "strategy"  // reservation strategy
)

// Grafana units.
const (
	unitSeconds  = "s"
	unitPercent  = "percentunit"
	unitCount    = "short"
	unitPerSec   = "ops"
	unitPerMin   = "opm"
	unitConnBusy = "short" // occupancy: connections kept busy, a plain number
)

func datasourceRef() common.DataSourceRef {
	typ, uid := "prometheus", "${"+varDatasource+"}"
	return common.DataSourceRef{Type: &typ, Uid: &uid}
}

// newDashboard starts a dashboard with the variables every one has.
func newDashboard(uid, title, description string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{"holdtime"}).
		Editable().
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Link(dashboard.NewDashboardLinkBuilder("holdtime").
			Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"holdtime"}).
			AsDropdown(true).
			KeepTime(true).
			IncludeVars(true)).
		WithVariable(dashboard.NewDatasourceVariableBuilder(varDatasource).
			Label("Data source").
			Type("prometheus"))
}

// labelVariable is a multi-value variable listing the values of label on
// metric, with All = .*.
func labelVariable(name, label, metric, help string) *dashboard.QueryVariableBuilder {
	q := "label_values(" + metric + ", " + label + ")"
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Description(help).
		Query(dashboard.StringOrMap{String: &q}).
		Definition(q).
		Datasource(datasourceRef()).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*").
		Current(dashboard.VariableOption{
			Selected: cog.ToPtr(true),
			Text:     dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
			Value:    dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
		})
}

// q is one query: a PromQL expression and its legend.
type q struct {
	expr   string
	legend string
}

// queryMode is how a panel's queries run.
type queryMode int

const (
	rangeSeries   queryMode = iota // graphs
	instantSeries                  // one value per series: bar gauges
	instantTable                   // one row per series: tables
)

func targets(qs []q, mode queryMode) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], 0, len(qs))
	for i, x := range qs {
		b := prometheus.NewDataqueryBuilder().
			Expr(x.expr).
			LegendFormat(x.legend).
			RefId(string(rune('A' + i))).
			Datasource(datasourceRef())
		switch mode {
		case rangeSeries:
			b = b.Range().Format(prometheus.PromQueryFormatTimeSeries)
		case instantSeries:
			b = b.Instant().Format(prometheus.PromQueryFormatTimeSeries)
		case instantTable:
			b = b.Instant().Format(prometheus.PromQueryFormatTable)
		}
		out = append(out, b)
	}
	return out
}

// step is a threshold: from value on, the colour.
type step struct {
	value float64
	color string
}

// thresholds builds absolute thresholds starting at base colour.
func thresholds(base string, steps ...step) *dashboard.ThresholdsConfigBuilder {
	s := []dashboard.Threshold{{Value: nil, Color: base}}
	for _, st := range steps {
		s = append(s, dashboard.Threshold{Value: cog.ToPtr(st.value), Color: st.color})
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(s)
}

// noThresholds is green throughout: a figure with no good or bad level.
func noThresholds() *dashboard.ThresholdsConfigBuilder { return thresholds("green") }

// panel describes one panel; the constructors below turn it into a builder.
type panel struct {
	title, description string
	unit               string
	queries            []q
	thresholds         *dashboard.ThresholdsConfigBuilder
	// showThresholds draws the thresholds on a time series (dashed line).
	showThresholds bool
	stack          bool
	max            float64 // axis max; 0 leaves it to the data
	width, height  uint32
}

func (p panel) size() (uint32, uint32) {
	w, h := p.width, p.height
	if w == 0 {
		w = 12
	}
	if h == 0 {
		h = 8
	}
	return w, h
}

func (p panel) th() *dashboard.ThresholdsConfigBuilder {
	if p.thresholds == nil {
		return noThresholds()
	}
	return p.thresholds
}

// timeSeries is a graph with a table legend (mean, max, last) sorted by
// mean, the biggest holder on top.
func timeSeries(p panel) *timeseries.PanelBuilder {
	w, h := p.size()
	b := timeseries.NewPanelBuilder().
		Title(p.title).
		Description(p.description).
		Datasource(datasourceRef()).
		Targets(targets(p.queries, rangeSeries)).
		Unit(p.unit).
		Min(0).
		Span(w).
		Height(h).
		Thresholds(p.th()).
		FillOpacity(10).
		LineWidth(1).
		ShowPoints(common.VisibilityModeNever).
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeTable).
			Placement(common.LegendPlacementBottom).
			ShowLegend(true).
			Calcs([]string{"mean", "max", "lastNotNull"}).
			SortBy("Mean").
			SortDesc(true)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	if p.max > 0 {
		b = b.Max(p.max)
	}
	if p.stack {
		b = b.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).FillOpacity(40)
	}
	if p.showThresholds {
		b = b.ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))
	}
	return b
}

// statPanel is a single number coloured by its thresholds.
func statPanel(p panel) *stat.PanelBuilder {
	w, h := p.size()
	if p.width == 0 {
		w = 6
	}
	if p.height == 0 {
		h = 4
	}
	return stat.NewPanelBuilder().
		Title(p.title).
		Description(p.description).
		Datasource(datasourceRef()).
		Targets(targets(p.queries, rangeSeries)).
		Unit(p.unit).
		Span(w).
		Height(h).
		Thresholds(p.th()).
		ColorMode(common.BigValueColorModeBackground).
		GraphMode(common.BigValueGraphModeArea).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
}

// barGauge ranks the series of instant queries, biggest first: "who is
// holding my connections right now".
func barGauge(p panel) *bargauge.PanelBuilder {
	w, h := p.size()
	return bargauge.NewPanelBuilder().
		Title(p.title).
		Description(p.description).
		Datasource(datasourceRef()).
		Targets(targets(p.queries, instantSeries)).
		Unit(p.unit).
		Min(0).
		Span(w).
		Height(h).
		Thresholds(p.th()).
		Orientation(common.VizOrientationHorizontal).
		DisplayMode(common.BarGaugeDisplayModeGradient).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false))
}

// tablePanel shows instant queries as a table.
func tablePanel(p panel) *table.PanelBuilder {
	w, h := p.size()
	return table.NewPanelBuilder().
		Title(p.title).
		Description(p.description).
		Datasource(datasourceRef()).
		Targets(targets(p.queries, instantTable)).
		Unit(p.unit).
		Span(w).
		Height(h).
		Thresholds(p.th()).
		// An instant query's rows all carry the same time: hide it.
		WithTransformation(dashboard.DataTransformerConfig{
			Id:      "organize",
			Options: map[string]any{"excludeByName": map[string]bool{"Time": true}},
		})
}

func row(title string) *dashboard.RowBuilder { return dashboard.NewRowBuilder(title) }

// Colours of thresholds.
const (
	green  = "green"
	yellow = "yellow"
	orange = "orange"
	red    = "red"
)

// Common selector pieces.
const (
	selInstance = `instance=~"$instance"`
	selTag      = `conn_tag=~"$tag"`
	selTarget   = `target=~"$target"`
	selSource   = `source=~"$source"`
)

// sel joins matchers into a selector body.
func sel(matchers ...string) string {
	s := ""
	for i, m := range matchers {
		if i > 0 {
			s += ", "
		}
		s += m
	}
	return "{" + s + "}"
}

// rate is PromQL rate over Grafana's $__rate_interval.
func rate(metric string, matchers ...string) string {
	return "rate(" + metric + sel(matchers...) + "[$__rate_interval])"
}
