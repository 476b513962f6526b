package trxjoin_test

import (
	"fmt"
	"time"

	"github.com/holdtime/holdtime/collector/internal/trxjoin"
)

// A backend (processlist id 42) ran the previous borrower's statement,
// then a new borrower's BEGIN and a tagged statement; ProxySQL then showed
// a session idle in a transaction on it. The reads before and after show
// the same transaction open, so its first tagged statement names the hold
// exactly, however close the previous borrower's statement came.
func ExampleDecide() {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	backend := func() *trxjoin.Thread {
		return &trxjoin.Thread{
			ProcesslistID: 42, ThreadID: 7,
			Trx: &trxjoin.Trx{EventID: 11, NestingEventID: 10, State: "ACTIVE"},
			Stmts: []trxjoin.Stmt{
				{EventID: 1, EventName: "statement/sql/select", Text: "SELECT 1 /* conn_tag:previous */", Done: true},
				{EventID: 10, EventName: "statement/sql/begin", Text: "BEGIN", Done: true},
				{EventID: 12, EventName: "statement/sql/select", Text: "SELECT 2 /* conn_tag:checkout */", NestingTrx: 11, Done: true},
			},
		}
	}
	reads := []trxjoin.Read{
		{Start: t0, End: t0.Add(5 * time.Millisecond), Threads: map[int64]*trxjoin.Thread{42: backend()}},
		{Start: t0.Add(100 * time.Millisecond), End: t0.Add(105 * time.Millisecond), Threads: map[int64]*trxjoin.Thread{42: backend()}},
	}
	sample := trxjoin.Sample{Start: t0.Add(50 * time.Millisecond), End: t0.Add(51 * time.Millisecond), Backend: 42, InTrx: true}
	r := trxjoin.Decide(reads, sample)
	fmt.Println(r.Tag, r.Quality)
	// Output: checkout exact
}
