package collector

import (
	"database/sql"
	"strconv"
	"testing"
	"time"
)

func TestServerJoinTagOfIdle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	st := func(kind joinStmtKind, tag string, start int) joinStmt {
		return joinStmt{kind: kind, tag: tag, start: ms(start), end: ms(start + 1)}
	}
	key := backendKey{thread: 7, local: hostPort{"127.0.0.1", 40000}}
	// One backend, borrowed in turn: short (autocommit), then a hog
	// transaction, then a pin after a statement, then a borrow whose BEGIN
	// reaches the server just after the sample.
	stmts := []joinStmt{
		st(joinStatement, "short", 0),
		st(joinBegin, "", 100), st(joinStatement, "hog", 101), st(joinStatement, "hog", 900), st(joinEnd, "", 901),
		st(joinStatement, "pin", 1000), st(joinEnd, "", 1001),
		st(joinStatement, "short", 1500),
		st(joinBegin, "", 1610), st(joinStatement, "batch", 1612),
		st(joinBegin, "", 2000),
	}
	j := newServerJoin()
	j.update(ms(0), ms(3000), map[int64]string{7: "127.0.0.1:40000"}, map[int64][]joinStmt{7: stmts})
	for _, c := range []struct {
		name        string
		key         backendKey
		first, last int
		want        string
		res         joinResult
	}{
		{"idle in the hog's transaction", key, 300, 800, "hog", joinTagged},
		{"pinned after COMMIT", key, 1100, 1400, "pin", joinTagged},
		{"BEGIN a few ms after the sample", key, 1600, 1700, "batch", joinTagged},
		{"BEGIN without a statement yet", key, 2100, 2200, "", joinNotYet},
		{"server not read that far", key, 3100, 3200, "", joinNotYet},
		{"thread id of another connection", backendKey{thread: 8, local: key.local}, 300, 800, "", joinNoConn},
		{"address only (no extended_info)", backendKey{local: key.local}, 300, 800, "hog", joinTagged},
		{"thread id only", backendKey{thread: 7}, 300, 800, "hog", joinTagged},
	} {
		tag, res := j.tagOfIdle(c.key, ms(c.first), ms(c.last))
		if tag != c.want || res != c.res {
			t.Errorf("%s: got %q (%d), want %q (%d)", c.name, tag, res, c.want, c.res)
		}
	}
	// A connection id reused by another client (another HOST) forgets
	// the old statements.
	j.update(ms(3000), ms(3000), map[int64]string{7: "127.0.0.1:40001"}, nil)
	if _, res := j.tagOfIdle(backendKey{thread: 7, local: hostPort{"127.0.0.1", 40001}}, ms(300), ms(800)); res == joinTagged {
		t.Error("a reused connection id kept the old connection's statements")
	}
}

func TestBackendOfAndCarriedBorrow(t *testing.T) {
	ext := func(get, put, q int) sql.NullString {
		return sql.NullString{Valid: true, String: `{"backends": [{"conn": {"myconnpoll_get": ` + itoa(get) + `, "myconnpoll_put": ` + itoa(put) +
			`, "mysql": {"thread_id": 13}, "questions": ` + itoa(q) + `}, "stream": {"myconnpoll_get": 1, "myconnpoll_put": 0, "questions": 1}}]}`}
	}
	row := ProcesslistRow{SrvHost: sql.NullString{String: "db", Valid: true}, LSrvHost: sql.NullString{String: "127.0.0.1", Valid: true},
		LSrvPort: sql.NullInt64{Int64: 5000, Valid: true}, ExtendedInfo: ext(5, 4, 60)}
	b := backendOf(&row)
	if b.key != (backendKey{13, hostPort{"127.0.0.1", 5000}}) || b.get != 5 || b.put != 4 || b.questions != 60 || !b.extended {
		t.Fatalf("backendOf = %+v", b)
	}
	c := carriedTag{tag: "x", backend: b}
	for _, x := range []struct {
		name string
		ext  sql.NullString
		same bool
	}{
		{"unchanged", ext(5, 4, 60), true},
		{"released and taken again", ext(6, 5, 60), false},
		{"a statement ran unseen", ext(5, 4, 61), false},
	} {
		r := row
		r.ExtendedInfo = x.ext
		if got := c.sameBorrow(backendOf(&r)); got != x.same {
			t.Errorf("%s: sameBorrow = %v", x.name, got)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestWaitingForBackend(t *testing.T) {
	str := func(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }
	for _, c := range []struct {
		name string
		row  ProcesslistRow
		want bool
	}{
		{"waiting (2.7.1)", ProcesslistRow{Command: str("Connect"), ExtendedInfo: str(`{"conn": {"status": {"compression": false}}, "status": 1}`)}, true},
		{"waiting, no extended_info", ProcesslistRow{Command: str("Connect")}, true},
		{"logging in", ProcesslistRow{Command: str("Connect"), ExtendedInfo: str(`{"status": 0}`)}, false},
		{"idle", ProcesslistRow{Command: str("Sleep")}, false},
		{"holding", ProcesslistRow{Command: str("Connect"), SrvHost: str("db")}, false},
	} {
		if got := waitingForBackend(&c.row); got != c.want {
			t.Errorf("%s: %v", c.name, got)
		}
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
		"known":                          {figures: figures{stmts: 3}},
		"ghost":                          {figures: figures{stmts: 2}},
		malformedDigest("/* conn_tag:x"): {figures: figures{stmts: 1}},
	}
	seen := map[string]bool{"known": true}
	n, sample := d.checkTags(t0, batch, func(tag string) bool { return seen[tag] })
	if n != 1 || sample != "/* conn_tag:x" || batch["known"] == nil || batch["ghost"] != nil || len(batch) != 1 {
		t.Fatalf("first poll: rejected %d %q, batch %v", n, sample, batch)
	}
	// Shown by another source since: its held figures come back.
	seen["ghost"] = true
	batch = map[string]*tagDelta{}
	if n, _ := d.checkTags(t0.Add(time.Second), batch, func(tag string) bool { return seen[tag] }); n != 0 || batch["ghost"] == nil || batch["ghost"].stmts != 2 {
		t.Fatalf("confirmed tag: rejected %d, batch %v", n, batch)
	}
	// Never shown elsewhere: rejected after digestHold.
	batch = map[string]*tagDelta{"junk": {figures: figures{stmts: 5}}}
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
