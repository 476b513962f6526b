package collector

import (
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
)

func TestServerJoinTagOfIdle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	st := func(kind joinStmtKind, tag string, start int) joinStmt {
		return joinStmt{kind: kind, tag: tag, start: ms(start), end: ms(start + 1)}
	}
	key := attrib.BackendKey{Thread: 7, Local: attrib.HostPort{Host: "127.0.0.1", Port: 40000}}
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
		key         attrib.BackendKey
		first, last int
		want        string
		res         joinResult
	}{
		{"idle in the hog's transaction", key, 300, 800, "hog", joinTagged},
		{"pinned after COMMIT", key, 1100, 1400, "pin", joinTagged},
		{"BEGIN a few ms after the sample", key, 1600, 1700, "batch", joinTagged},
		{"BEGIN without a statement yet", key, 2100, 2200, "", joinNotYet},
		{"server not read that far", key, 3100, 3200, "", joinNotYet},
		{"thread id of another connection", attrib.BackendKey{Thread: 8, Local: key.Local}, 300, 800, "", joinNoConn},
		{"address only (no extended_info)", attrib.BackendKey{Local: key.Local}, 300, 800, "hog", joinTagged},
		{"thread id only", attrib.BackendKey{Thread: 7}, 300, 800, "hog", joinTagged},
	} {
		tag, res := j.tagOfIdle(c.key, ms(c.first), ms(c.last))
		if tag != c.want || res != c.res {
			t.Errorf("%s: got %q (%d), want %q (%d)", c.name, tag, res, c.want, c.res)
		}
	}
	// A connection id reused by another client (another HOST) forgets
	// the old statements.
	j.update(ms(3000), ms(3000), map[int64]string{7: "127.0.0.1:40001"}, nil)
	if _, res := j.tagOfIdle(attrib.BackendKey{Thread: 7, Local: attrib.HostPort{Host: "127.0.0.1", Port: 40001}}, ms(300), ms(800)); res == joinTagged {
		t.Error("a reused connection id kept the old connection's statements")
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
