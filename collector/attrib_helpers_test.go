package collector

// Copies of internal/attrib's and internal/analyze's test helpers, for the
// tests here that feed the daemon the same inputs.

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

const sampleLine = `{"client":"127.0.0.1:57956","digest":"0x6C2C","duration_us":593,"endtime":"2026-12-02 08:41:14.661127","endtime_timestamp_us":1796200874661127,"event":"COM_QUERY","hostgroup_id":0,"query":"/* conn_tag:inventory_reserve */ SELECT id FROM t WHERE a=\"x\\y\" AND b='\u00e9'","rows_affected":0,"rows_sent":1,"schemaname":"shop","server":"127.0.0.1:3307","starttime":"2026-12-02 08:41:14.660534","starttime_timestamp_us":1796200874660534,"thread_id":125,"username":"app"}`

// eventLine is one events log line of session thread, as ProxySQL writes it.
func eventLine(thread int, startUS, endUS int64, query string) string {
	return fmt.Sprintf(`{"event":"COM_QUERY","thread_id":%d,"starttime_timestamp_us":%d,"endtime_timestamp_us":%d,"duration_us":%d,"query":%q,"hostgroup_id":0,"server":"db:3306"}`,
		thread, startUS, endUS, endUS-startUS, query)
}

// absurdLines are lines with times no ProxySQL wrote, each rejected by
// itself (parse) or by the log's clock.
func absurdLines(nearUS int64) []string {
	year2099 := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	return []string{
		eventLine(3, -9e18, 9e18, "/* conn_tag:evil */ SELECT 1"),                       // the outside test's line
		eventLine(3, 9e18-1, 9e18, "/* conn_tag:evil */ SELECT 1"),                      // a window ending in the year 294247
		eventLine(3, year2099, year2099+10, "/* conn_tag:evil */ BEGIN"),                // plausible, far ahead
		eventLine(3, 1, 2, "/* conn_tag:evil */ SELECT 1"),                              // plausible, far behind
		eventLine(3, nearUS-8*24*3600e6, nearUS, "/* conn_tag:evil */ SELECT SLEEP(1)"), // a statement of 8 days
		strings.Replace(eventLine(3, nearUS, nearUS+5, "/* conn_tag:evil */ SELECT 1"), `"duration_us":5`, `"duration_us":-9000000000000000000`, 1),
	}
}

type expectedTag struct {
	EventsLogHoldingSeconds float64 `json:"events_log_holding_seconds"`
	HoldingSeconds          float64 `json:"holding_seconds"`
	Statements              int64   `json:"statements"`
	Transactions            int64   `json:"transactions"`
}

func loadExpected(t *testing.T) map[string]expectedTag {
	t.Helper()
	b, err := os.ReadFile("testdata/workload_expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Tags map[string]expectedTag `json:"tags"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e.Tags
}

// expectedTagName maps expected.json's name for untagged sessions to ours.
func expectedTagName(name string) string {
	if name == "(untagged)" {
		return UntaggedTag
	}
	return name
}
