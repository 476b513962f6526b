package conntag

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestCountersGiveAppFigures is the contract a collector relies on to take
// a tag's app-layer hold, active and idle from conntag's metrics alone
// (received over OTLP or scraped): the three are cumulative monotonic sums
// in seconds, holds a cumulative monotonic count, every series carries
// conn_tag, the pool and the system, and the connections a tag holds now
// are db.client.connection.count with state=used.
func TestCountersGiveAppFigures(t *testing.T) {
	f := newFixture(t)
	ctx := WithTag(context.Background(), "contract")
	if _, err := f.db.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	held, err := f.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := held.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"holdtime.connection.hold_time":   "s",
		"holdtime.connection.active_time": "s",
		"holdtime.connection.idle_time":   "s",
		"holdtime.connection.holds":       "{hold}",
	}
	seen := map[string]bool{}
	usedNow := int64(-1)
	hasTag := func(set attribute.Set) bool {
		tag, ok := set.Value(AttrConnTag)
		_, pool := set.Value(attrPoolName)
		_, system := set.Value(attrSystem)
		return ok && tag.AsString() == "contract" && pool && system
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if unit, ok := want[m.Name]; ok {
				if m.Unit != unit {
					t.Errorf("%s: unit %q, want %q", m.Name, m.Unit, unit)
				}
				switch d := m.Data.(type) {
				case metricdata.Sum[float64]:
					if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
						t.Errorf("%s: monotonic %v, temporality %v: want a cumulative counter", m.Name, d.IsMonotonic, d.Temporality)
					}
					for _, dp := range d.DataPoints {
						seen[m.Name] = seen[m.Name] || hasTag(dp.Attributes) && dp.Value > 0
					}
				case metricdata.Sum[int64]:
					if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
						t.Errorf("%s: monotonic %v, temporality %v: want a cumulative counter", m.Name, d.IsMonotonic, d.Temporality)
					}
					for _, dp := range d.DataPoints {
						seen[m.Name] = seen[m.Name] || hasTag(dp.Attributes) && dp.Value == 1 // the completed hold
					}
				default:
					t.Errorf("%s is a %T, not a sum", m.Name, m.Data)
				}
			}
			if m.Name == "db.client.connection.count" {
				d, ok := m.Data.(metricdata.Sum[int64])
				if !ok || d.IsMonotonic {
					t.Errorf("db.client.connection.count is a %T (monotonic %v), want a non-monotonic sum", m.Data, d.IsMonotonic)
				}
				for _, dp := range d.DataPoints {
					if st, _ := dp.Attributes.Value(attrState); st.AsString() == "used" && hasTag(dp.Attributes) {
						usedNow = dp.Value
					}
				}
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("%s: no series for conn_tag=contract with pool and system", name)
		}
	}
	if usedNow != 1 {
		t.Errorf("connections held now by contract = %d, want 1", usedNow)
	}
}
