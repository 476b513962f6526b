package collector

import (
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// snapshot10k is a processlist of 10,000 sessions: a third running a
// tagged statement, a third idle holding a backend (in a transaction), a
// third idle without one; 50 tags.
func snapshot10k() []ProcesslistRow {
	rows := make([]ProcesslistRow, 10000)
	for i := range rows {
		r := &rows[i]
		r.SessionID = int64(i + 1)
		r.User = sql.NullString{String: "app", Valid: true}
		if i%3 != 2 {
			// A backend: ProxySQL's local address, as the server sees it.
			r.LSrvHost = sql.NullString{String: "10.0.0.2", Valid: true}
			r.LSrvPort = sql.NullInt64{Int64: int64(30000 + i), Valid: true}
		}
		switch i % 3 {
		case 0:
			r.SrvHost = sql.NullString{String: "10.0.0.1", Valid: true}
			r.Command = sql.NullString{String: "Query", Valid: true}
			r.Info = sql.NullString{String: fmt.Sprintf("/* conn_tag:tag_%d */ SELECT * FROM t WHERE id = %d", i%50, i), Valid: true}
		case 1:
			r.SrvHost = sql.NullString{String: "10.0.0.1", Valid: true}
			r.Command = sql.NullString{String: "Sleep", Valid: true}
		default:
			r.Command = sql.NullString{String: "Sleep", Valid: true}
		}
	}
	return rows
}

// BenchmarkProcesslistSnapshot measures processing one sample of 10,000
// sessions (issue 5: <= 10 ms, no memory growth with samples). "copy" is a
// baseline: copying the rows, the least any processing does.
func BenchmarkProcesslistSnapshot(b *testing.B) {
	rows := snapshot10k()
	b.Run("copy", func(b *testing.B) {
		b.ReportAllocs()
		dst := make([]ProcesslistRow, len(rows))
		for b.Loop() {
			copy(dst, rows)
		}
	})
	for _, withEvents := range []bool{false, true} {
		b.Run(fmt.Sprintf("sample/events=%v", withEvents), func(b *testing.B) {
			st := newStore(1000, time.Now)
			ps := newProxySQLSessions("px", st, ProcesslistConfig{}, withEvents, false, 10*time.Second, nil)
			at := time.Unix(1_800_000_000, 0)
			ps.sample(at, rows) // warm: sessions and tags known
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				ps.sample(at.Add(time.Duration(i)*250*time.Millisecond), rows)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/snapshot")
		})
	}
}
