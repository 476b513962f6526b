package attrib

import (
	"database/sql"
	"strconv"
	"testing"
)

func TestBackendOfAndCarriedBorrow(t *testing.T) {
	ext := func(get, put, q int) sql.NullString {
		return sql.NullString{Valid: true, String: `{"backends": [{"conn": {"myconnpoll_get": ` + itoa(get) + `, "myconnpoll_put": ` + itoa(put) +
			`, "mysql": {"thread_id": 13}, "questions": ` + itoa(q) + `}, "stream": {"myconnpoll_get": 1, "myconnpoll_put": 0, "questions": 1}}]}`}
	}
	row := ProcesslistRow{SrvHost: sql.NullString{String: "db", Valid: true}, LSrvHost: sql.NullString{String: "127.0.0.1", Valid: true},
		LSrvPort: sql.NullInt64{Int64: 5000, Valid: true}, ExtendedInfo: ext(5, 4, 60)}
	b := backendOf(&row, parsedExt(&row))
	if b.key != (BackendKey{Thread: 13, Local: HostPort{Host: "127.0.0.1", Port: 5000}}) || b.get != 5 || b.put != 4 || b.questions != 60 || !b.extended {
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
		if got := c.sameBorrow(backendOf(&r, parsedExt(&r))); got != x.same {
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
		if got := waitingForBackend(&c.row, parsedExt(&c.row)); got != c.want {
			t.Errorf("%s: %v", c.name, got)
		}
	}
}
