package conntag

import (
	"context"
	"database/sql"
	"flag"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) {
	// The examples run against the test server too; an Example cannot skip,
	// so without a server (and outside CI) only the tests run, and they skip.
	if !testenv.Available() && os.Getenv("CI") != "true" {
		if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
			_ = flag.Set("test.run", "^(Test|Fuzz)")
		}
	}
	testenv.Main(m)
}

// fixture is a conntag pool on a fresh database of the test server, with a
// manual metric reader to look at what it recorded.
type fixture struct {
	db     *sql.DB
	reader *sdkmetric.ManualReader
	dbName string
	target *testenv.Target
}

func newFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	d := testenv.NewDatabase(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	connector, err := mysql.NewConnector(d.Config())
	if err != nil {
		t.Fatal(err)
	}
	db := OpenDB(connector, append([]Option{WithMeterProvider(mp)}, opts...)...)
	t.Cleanup(func() { db.Close() })
	return &fixture{db: db, reader: reader, dbName: d.Name, target: d.Target}
}

// metrics collects once and returns, per metric name and conn_tag, the
// value: a histogram's sum and count, or a sum's value.
type point struct {
	sum   float64
	count uint64
}

func (f *fixture) metrics(t *testing.T) map[string]map[string]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]point{}
	add := func(name string, attrs attribute.Set, p point) {
		tag, _ := attrs.Value(AttrConnTag)
		key := tag.AsString()
		if st, ok := attrs.Value(attrState); ok {
			key += "/" + st.AsString()
		}
		if out[name] == nil {
			out[name] = map[string]point{}
		}
		old := out[name][key]
		out[name][key] = point{sum: old.sum + p.sum, count: old.count + p.count}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					add(m.Name, dp.Attributes, point{sum: dp.Sum, count: dp.Count})
				}
			case metricdata.Sum[float64]:
				for _, dp := range d.DataPoints {
					add(m.Name, dp.Attributes, point{sum: dp.Value})
				}
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					add(m.Name, dp.Attributes, point{sum: float64(dp.Value)})
				}
			}
		}
	}
	return out
}

// logStatements turns the server's general log on (into mysql.general_log)
// until the test ends. The general log is the one place where the server
// shows the text of prepared statements as well as plain queries.
func (f *fixture) logStatements(t *testing.T) {
	t.Helper()
	admin := f.target.Admin()
	for _, q := range []string{"SET GLOBAL log_output = 'TABLE'", "SET GLOBAL general_log = 'ON'"} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec("SET GLOBAL general_log = 'OFF'") })
}

// statementsSeen returns the statement texts (queries, prepares, executes)
// the server logged for the fixture's connections, oldest first.
func (f *fixture) statementsSeen(t *testing.T) []string {
	t.Helper()
	rows, err := f.target.Admin().Query(`SELECT CONVERT(argument USING utf8mb4) FROM mysql.general_log
		WHERE thread_id IN (SELECT thread_id FROM mysql.general_log
		                    WHERE command_type IN ('Connect', 'Init DB') AND CONVERT(argument USING utf8mb4) LIKE CONCAT('%', ?, '%'))
		  AND command_type IN ('Query', 'Prepare', 'Execute')
		ORDER BY event_time`, f.dbName)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
