package collector

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
	"github.com/holdtime/holdtime/collector/internal/trxjoin"
	"github.com/holdtime/holdtime/testenv"
)

// TestServerJoinBoard: the board matches ProxySQL's backend keys to this
// server's connections (thread id and local address must agree), reads
// only what a sampler showed held recently, keeps a few seconds of reads,
// and decides from them.
func TestServerJoinBoard(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	if trxjoin.Marker != CollectorMarker {
		t.Errorf("the join's reads start with %q, not the collector's marker %q", trxjoin.Marker, CollectorMarker)
	}
	j := newServerJoin()
	j.update(ms(0), map[int64]string{7: "127.0.0.1:40000", 8: "localhost"})
	key := attrib.BackendKey{Thread: 7, Local: attrib.HostPort{Host: "127.0.0.1", Port: 40000}}
	for _, c := range []struct {
		name string
		k    attrib.BackendKey
		id   int64
		ok   bool
	}{
		{"thread and address", key, 7, true},
		{"address only (no extended_info)", attrib.BackendKey{Local: key.Local}, 7, true},
		{"thread id only", attrib.BackendKey{Thread: 8}, 8, true},
		{"thread id of another server", attrib.BackendKey{Thread: 9}, 0, false},
		{"address and thread disagree", attrib.BackendKey{Thread: 7, Local: attrib.HostPort{Host: "127.0.0.1", Port: 40001}}, 0, false},
	} {
		if id, ok := j.idOf(c.k); id != c.id || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", c.name, id, ok, c.id, c.ok)
		}
	}
	j.update(ms(0), map[int64]string{7: "127.0.0.1:40000", 8: "localhost", 10: "127.0.0.1:40002", 11: "10.0.0.9:40000"})
	if got := j.wantedIDs(ms(0)); len(got) != 0 {
		t.Errorf("no ProxySQL target: wanted %v, want none", got)
	}
	j.proxied = true
	if got := j.wantedIDs(ms(0)); len(got) != 4 {
		t.Errorf("before any sample showed a backend: wanted %v, want every listed connection", got)
	}
	j.want(ms(0), []attrib.BackendKey{key, {Thread: 9}})
	j.want(ms(20_000), []attrib.BackendKey{{Thread: 8}})
	// 10 connected from ProxySQL's address: read before it is first held.
	if got := slices.Sorted(slices.Values(j.wantedIDs(ms(20_000)))); !slices.Equal(got, []int64{7, 8, 10}) {
		t.Errorf("wanted %v, want 7, 8 (held) and 10 (from the held backend's host)", got)
	}
	if got := slices.Sorted(slices.Values(j.wantedIDs(ms(40_000)))); !slices.Equal(got, []int64{7, 8, 10}) {
		t.Errorf("30 s later: wanted %v, want 8 (held) and 7 and 10 (from ProxySQL's host)", got)
	}

	// A transaction open in a read before the sample and one after it.
	read := func(start int, state string) trxjoin.Read {
		return trxjoin.Read{Start: ms(start), End: ms(start + 5), Threads: map[int64]*trxjoin.Thread{7: {
			ProcesslistID: 7, ThreadID: 70,
			Trx: &trxjoin.Trx{EventID: 100, NestingEventID: 99, State: state},
			Stmts: []trxjoin.Stmt{
				{EventID: 99, EventName: "statement/sql/begin", Text: "BEGIN", Done: true},
				{EventID: 101, EventName: "statement/sql/select", Text: "SELECT 1 /* conn_tag:hog */", NestingTrx: 100, Done: true},
			}}}}
	}
	for n := range 30 {
		j.addRead(read(n*1000, "ACTIVE"))
	}
	if n := len(j.reads); n > int(joinReadsKept/time.Second)+2 {
		t.Errorf("%d reads kept, want about %v of them", n, joinReadsKept)
	}
	s := trxjoin.Sample{Start: ms(28_100), End: ms(28_110), InTrx: true}
	r, ok := j.decide(attrib.BackendKey{Local: key.Local}, s)
	if !ok || r.Tag != "hog" || r.Quality != trxjoin.Exact {
		t.Errorf("decide: %+v %v, want hog, exact", r, ok)
	}
	if _, ok := j.decide(attrib.BackendKey{Thread: 9}, s); ok {
		t.Error("decided a backend of another server")
	}
	if r, _ := j.decide(key, trxjoin.Sample{Start: ms(29_100), End: ms(29_110), InTrx: true}); !r.Pending {
		t.Errorf("no read after the sample yet: %+v, want pending", r)
	}
	// A backend closed at its session's end is still this server's while
	// its run is decided, then forgotten.
	j.update(ms(40_000), map[int64]string{7: "127.0.0.1:40000", 8: "localhost"})
	j.update(ms(45_000), map[int64]string{8: "localhost"})
	if _, ok := j.idOf(key); !ok {
		t.Error("a connection gone since the last listing is no longer matched")
	}
	j.update(ms(60_000), map[int64]string{8: "localhost"})
	if _, ok := j.idOf(key); ok {
		t.Error("a connection gone for longer than the reads are kept still matches")
	}
	j.reset()
	if len(j.reads) != 0 || len(j.wanted) != 0 || len(j.from) != 0 {
		t.Error("reset kept reads or wanted ids")
	}
}

func TestDigestTagChecks(t *testing.T) {
	for _, c := range []struct {
		text, tag string
		ok        bool
	}{
		{"/* conn_tag:checkout */ SELECT ?", "checkout", true},
		{"SELECT ? /* conn_tag:checkout */", "checkout", true},
		{"/* conn_tag:checkout route:api */ SELECT ?", "checkout", true},
		{"/* conn_tag:short_autoc INSERT INTO batch_rows VALUES (?) */", "short_autoc", false},
		{"/* conn_tag:satch_tx SELECT ?", "satch_tx", false},
		{"/* conn_tag:batch_t /* conn_tag:utocommit */ SELECT ?", "batch_t", false},
	} {
		if got := wellFormedDigestTag(c.text, c.tag); got != c.ok {
			t.Errorf("%q: well formed %v, want %v", c.text, got, c.ok)
		}
	}
	d := newDigestState()
	t0 := time.Now()
	batch := map[string]*tagDelta{
		"known":                          {Figures: figures{Stmts: 3}},
		"ghost":                          {Figures: figures{Stmts: 2}},
		malformedDigest("/* conn_tag:x"): {Figures: figures{Stmts: 1}},
	}
	seen := map[string]bool{"known": true}
	n, sample := d.checkTags(t0, batch, func(tag string) bool { return seen[tag] })
	if n != 1 || sample != "/* conn_tag:x" || batch["known"] == nil || batch["ghost"] != nil || len(batch) != 1 {
		t.Fatalf("first poll: rejected %d %q, batch %v", n, sample, batch)
	}
	// Shown by another source since: its held figures come back.
	seen["ghost"] = true
	batch = map[string]*tagDelta{}
	if n, _ := d.checkTags(t0.Add(time.Second), batch, func(tag string) bool { return seen[tag] }); n != 0 || batch["ghost"] == nil || batch["ghost"].Stmts != 2 {
		t.Fatalf("confirmed tag: rejected %d, batch %v", n, batch)
	}
	// Never shown elsewhere: rejected after digestHold.
	batch = map[string]*tagDelta{"junk": {Figures: figures{Stmts: 5}}}
	d.checkTags(t0, batch, func(string) bool { return false })
	batch = map[string]*tagDelta{}
	if n, sample := d.checkTags(t0.Add(digestHold+time.Second), batch, func(string) bool { return false }); n != 1 || len(batch) != 0 || sample == "" {
		t.Fatalf("junk tag: rejected %d %q, batch %v", n, sample, batch)
	}
}

func TestTruncatedTextIsUnknown(t *testing.T) {
	m := &mysqlTarget{}
	for _, c := range []struct {
		q    string
		want string
	}{
		{"/* conn_tag:a */ SELECT 'xxx...", "a"},
		{"SELECT 1 /* conn_tag:a */", "a"},
		{"SELECT 'xxxxxxxxxxxxxxxx', 1 /* conn_tag:a */", "a"},
		{"SELECT 'xxxxxxxxxxxxxxxx...", UnknownTag},
		{"SELECT 'x...', 1", UntaggedTag},
	} {
		if got, _ := m.tagOfStatement(c.q); got != c.want {
			t.Errorf("%q: %q, want %q", c.q, got, c.want)
		}
	}
	if _, tag := digestTag(string(make([]byte, digestTextCut)), true, nil); tag != UnknownTag {
		t.Errorf("digest text cut at %d bytes: %q", digestTextCut, tag)
	}
}

// TestServerJoinDegraded: a server that does not record transactions
// (MariaDB's default) reads fine for the proxy↔server join, and the MySQL
// source says what the join loses and the fix, only beside a ProxySQL
// target; after the fix it is up again. Another collector's
// reads of the same server are not counted as a client's statements.
func TestServerJoinDegraded(t *testing.T) {
	srv := privateServer(t, "--performance-schema-instrument=transaction=OFF",
		"--performance-schema-consumer-events-transactions-current=OFF")
	c, m := newServerTarget(t, srv.DSN(""), MinServerInterval)
	_, other := newServerTarget(t, srv.DSN(""), MinServerInterval)
	ctx := context.Background()
	admin, err := sql.Open("mysql", srv.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	conn, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	pollOK(t, m)
	pollOK(t, other)
	if st := c.Sources()[0]; st.State != StateUp {
		t.Fatalf("no ProxySQL asked yet: %+v, want up", st)
	}
	// As with a ProxySQL target beside them, whose sample showed id held.
	m.join.proxied, other.join.proxied = true, true
	m.join.want(time.Now(), []attrib.BackendKey{{Thread: id}})
	other.join.want(time.Now(), []attrib.BackendKey{{Thread: id}})
	pollOK(t, m)
	for range 3 {
		pollOK(t, other)
	}
	pollOK(t, m)
	st := c.Sources()[0]
	reasons := map[string]string{}
	for _, d := range st.Degraded {
		reasons[d.Reason] = d.Fix
	}
	if st.State != StateDegraded ||
		!strings.Contains(reasons[ReasonTrxInstrumentOff], "UPDATE performance_schema.setup_instruments SET ENABLED='YES', TIMED='YES' WHERE NAME='transaction'") ||
		!strings.Contains(reasons[ReasonTrxInstrumentOff], "performance-schema-instrument='transaction=ON'") ||
		!strings.Contains(reasons[ReasonTrxConsumerOff], "performance-schema-consumer-events-transactions-current=ON") {
		t.Errorf("transactions not recorded: %+v, want degraded with both fixes", st)
	}
	if len(m.join.reads) == 0 || m.join.reads[len(m.join.reads)-1].Threads[id] == nil {
		t.Errorf("the join's reads do not show connection %d", id)
	}
	c.st.mu.Lock()
	for tag, e := range c.st.series[seriesKey{"db", SourceMySQL}].tags {
		if e.total.Stmts > 0 {
			t.Errorf("the other collector's join reads show as %d statements of %s", int(e.total.Stmts), tag)
		}
	}
	c.st.mu.Unlock()

	for _, q := range []string{
		"UPDATE performance_schema.setup_instruments SET ENABLED='YES', TIMED='YES' WHERE NAME='transaction'",
		"UPDATE performance_schema.setup_consumers SET ENABLED='YES' WHERE NAME='events_transactions_current'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	pollOK(t, m)
	if st := c.Sources()[0]; st.State != StateUp {
		t.Errorf("after the fix: %+v, want up", st)
	}
}

// TestServerJoinReadFails: an account that may read what the server's
// figures need but not events_transactions_current, which only the
// proxy↔server join reads, keeps the MySQL source up: the join is
// degraded with the error (never the password), the poll succeeds on the
// same connection and the server's figures keep coming; once granted,
// the degradation clears.
func TestServerJoinReadFails(t *testing.T) {
	d := testenv.NewDatabase(t)
	admin := d.Target.Admin()
	ctx := context.Background()
	user := "ht_nojoin_" + strings.TrimPrefix(d.Name, "ht_")[:8]
	pass := "pw_" + strings.TrimPrefix(d.Name, "ht_")[:8]
	grants := []string{"CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + pass + "'", "GRANT PROCESS ON *.* TO '" + user + "'@'%'"}
	for _, tbl := range []string{"threads", "setup_consumers", "setup_instruments", "events_statements_current",
		"events_statements_history", "events_statements_history_long", "prepared_statements_instances"} {
		grants = append(grants, "GRANT SELECT ON performance_schema."+tbl+" TO '"+user+"'@'%'")
	}
	for _, q := range grants {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.ExecContext(ctx, "DROP USER '"+user+"'@'%'") })
	cfg := d.Config()
	cfg.User, cfg.Passwd, cfg.DBName = user, pass, ""
	c, m := newServerTarget(t, cfg.FormatDSN(), MinServerInterval)
	db := d.Open(t)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	pollOK(t, m)
	// As with a ProxySQL target beside it, whose sample showed id held.
	m.join.proxied = true
	m.join.want(time.Now(), []attrib.BackendKey{{Thread: id}})
	first := m.conn
	for i := range 3 {
		if _, err := conn.ExecContext(ctx, "/* conn_tag:join_fails */ SELECT 1"); err != nil {
			t.Fatal(err)
		}
		before := m.lastPoll
		pollOK(t, m)
		if m.conn == nil || m.conn != first {
			t.Fatalf("poll %d: the join read's failure dropped the connection", i)
		}
		if !m.lastPoll.After(before) {
			t.Errorf("poll %d: lastPoll not advanced", i)
		}
	}
	st := c.Sources()[0]
	var failed *Degradation
	for i, x := range st.Degraded {
		if x.Reason == ReasonJoinReadFailed {
			failed = &st.Degraded[i]
		}
	}
	if !st.Up || st.State != StateDegraded || failed == nil {
		t.Fatalf("join read denied: %+v, want up, degraded with %s", st, ReasonJoinReadFailed)
	}
	if !strings.Contains(failed.Detail, "events_transactions_current") || !strings.Contains(failed.Fix, "GRANT SELECT ON performance_schema.*") ||
		strings.Contains(failed.Detail+failed.Fix, pass) {
		t.Errorf("join read denied: %+v, want the error's table and the GRANT, no password", failed)
	}
	if f := totals(c, "db", "join_fails"); f.Stmts != 3 {
		t.Errorf("join_fails: %v statements, want 3: the server's figures must keep coming", f.Stmts)
	}
	if len(m.join.reads) != 0 {
		t.Errorf("%d join reads kept from failed reads", len(m.join.reads))
	}

	if _, err := admin.ExecContext(ctx, "GRANT SELECT ON performance_schema.events_transactions_current TO '"+user+"'@'%'"); err != nil {
		t.Fatal(err)
	}
	pollOK(t, m)
	for _, x := range c.Sources()[0].Degraded {
		if x.Reason == ReasonJoinReadFailed {
			t.Errorf("after the GRANT: still %+v", x)
		}
	}
	if len(m.join.reads) == 0 || m.join.reads[len(m.join.reads)-1].Threads[id] == nil {
		t.Errorf("after the GRANT: the join's reads do not show connection %d", id)
	}
}
