package attrib

import (
	"slices"
	"testing"
)

// ev builds an event of session id from start to end (microseconds).
func ev(id uint64, start, end int64, query string) Event {
	return Event{Type: EventQuery, ThreadID: id, StartUS: start, EndUS: end, Hostgroup: 0,
		Query: []byte(query), Server: []byte("db:3306"), Client: []byte("10.0.0.1:5000"), Username: []byte("app")}
}

func attribute(events []Event) []Hold {
	var holds []Hold
	a := NewAttributor(AttributorConfig{}, func(h *Hold) { holds = append(holds, *h) })
	for i := range events {
		a.Add(&events[i])
	}
	a.Flush()
	return holds
}

func TestAttributor(t *testing.T) {
	type want struct {
		tag    string
		kind   HoldKind
		start  int64
		end    int64
		stmts  int
		pins   Pin
		reason string
	}
	tests := []struct {
		name   string
		events []Event
		want   []want
	}{
		{"transaction takes the tag of its statements", []Event{
			ev(1, 0, 10, "BEGIN"),
			ev(1, 20, 30, "/* conn_tag:checkout */ SELECT 1 FOR UPDATE"),
			ev(1, 5000, 5010, "/* conn_tag:checkout */ UPDATE t SET a=1"),
			ev(1, 5020, 5030, "COMMIT"),
		}, []want{{"checkout", HoldTransaction, 0, 5030, 2, PinTransaction, ""}}},
		{"autocommit statements hold for their own duration", []Event{
			ev(1, 0, 10, "/* conn_tag:browse */ SELECT 1"),
			ev(1, 100, 150, "SELECT 2"),
		}, []want{{"browse", HoldStatement, 0, 10, 1, 0, ""}, {UntaggedTag, HoldStatement, 100, 150, 1, 0, ""}}},
		{"autocommit=0 opens a transaction at the first statement", []Event{
			{Type: EventQuery, ThreadID: 1, StartUS: 0, EndUS: 0, Hostgroup: -1, Query: []byte("SET autocommit=0")},
			ev(1, 10, 20, "/* conn_tag:implicit */ SELECT 1"),
			ev(1, 900, 910, "ROLLBACK"),
			ev(1, 1000, 1010, "/* conn_tag:implicit */ SELECT 2"),
			ev(1, 1100, 1110, "SET autocommit=1"),
		}, []want{
			{"implicit", HoldTransaction, 10, 910, 1, PinTransaction | PinAutocommitOff, ""},
			{"implicit", HoldTransaction, 1000, 1110, 1, PinTransaction | PinAutocommitOff, ""},
		}},
		{"commit without begin", []Event{ev(1, 0, 10, "COMMIT")},
			[]want{{UnknownTag, HoldTransaction, 0, 10, 0, PinTransaction, ReasonBeganBeforeLog}}},
		{"empty transaction", []Event{ev(1, 0, 10, "BEGIN"), ev(1, 20, 30, "COMMIT")},
			[]want{{UnknownTag, HoldTransaction, 0, 30, 0, PinTransaction, ReasonEmptyTxn}}},
		{"open at end without statements", []Event{ev(1, 0, 10, "BEGIN")},
			[]want{{UnknownTag, HoldTransaction, 0, 10, 0, PinTransaction, ReasonOpenNoStmt}}},
		{"open at end keeps its tag", []Event{ev(1, 0, 10, "BEGIN"), ev(1, 20, 30, "/* conn_tag:hog */ SELECT 1")},
			[]want{{"hog", HoldTransaction, 0, 30, 1, PinTransaction, ""}}},
		{"user variable pins until the next statement", []Event{
			ev(1, 0, 10, "/* conn_tag:report */ SET @x = 1"),
			ev(1, 500, 510, "/* conn_tag:report */ SELECT @x"),
		}, []want{
			{"report", HoldStatement, 0, 500, 1, PinUserVariable, ""},
			{"report", HoldStatement, 500, 510, 1, PinUserVariable, ""},
		}},
		{"select @@version does not pin", []Event{
			ev(1, 0, 10, "select @@version, @@port"),
			ev(1, 500, 510, "SELECT 1"),
		}, []want{{UntaggedTag, HoldStatement, 0, 10, 1, 0, ""}, {UntaggedTag, HoldStatement, 500, 510, 1, 0, ""}}},
		{"lock tables pins until unlock", []Event{
			ev(1, 0, 10, "/* conn_tag:batch */ LOCK TABLES t WRITE"),
			ev(1, 100, 110, "/* conn_tag:batch */ UNLOCK TABLES"),
			ev(1, 500, 510, "/* conn_tag:batch */ SELECT 1"),
		}, []want{
			{"batch", HoldStatement, 0, 100, 1, PinLock, ""},
			{"batch", HoldStatement, 100, 110, 1, 0, ""},
			{"batch", HoldStatement, 500, 510, 1, 0, ""},
		}},
		{"begin inside a transaction commits it", []Event{
			ev(1, 0, 10, "BEGIN"), ev(1, 20, 30, "/* conn_tag:a */ SELECT 1"),
			ev(1, 40, 50, "START TRANSACTION READ ONLY"), ev(1, 60, 70, "/* conn_tag:b */ SELECT 1"), ev(1, 80, 90, "COMMIT"),
		}, []want{
			{"a", HoldTransaction, 0, 30, 1, PinTransaction, ""},
			{"b", HoldTransaction, 40, 90, 1, PinTransaction, ""},
		}},
		{"rollback to savepoint keeps the transaction", []Event{
			ev(1, 0, 10, "BEGIN"), ev(1, 20, 30, "/* conn_tag:a */ SELECT 1"),
			ev(1, 40, 50, "ROLLBACK TO SAVEPOINT s1"), ev(1, 60, 70, "ROLLBACK"),
		}, []want{{"a", HoldTransaction, 0, 70, 2, PinTransaction, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			holds := attribute(tt.events)
			if len(holds) != len(tt.want) {
				t.Fatalf("got %d holds %+v; want %d", len(holds), holds, len(tt.want))
			}
			for i, w := range tt.want {
				h := holds[i]
				if h.Tag != w.tag || h.Kind != w.kind || h.StartUS != w.start || h.EndUS != w.end ||
					h.Statements != w.stmts || h.Pins != w.pins || h.UnknownReason != w.reason {
					t.Errorf("hold %d = %+v; want %+v", i, h, w)
				}
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		q     string
		class StmtClass
		pins  Pin
	}{
		{"BEGIN", ClassBegin, 0},
		{"begin work", ClassBegin, 0},
		{"/* conn_tag:x */ START TRANSACTION", ClassBegin, 0},
		{"COMMIT", ClassCommit, 0},
		{"ROLLBACK", ClassCommit, 0},
		{"ROLLBACK WORK TO s", classOther, 0},
		{"SET autocommit=0", ClassAutocommitOff, 0},
		{"set AUTOCOMMIT = OFF", ClassAutocommitOff, 0},
		{"SET autocommit=1", ClassAutocommitOn, 0},
		{"SET NAMES utf8mb4", classOther, 0},
		{"SET FOREIGN_KEY_CHECKS=0", classOther, PinSessionState},
		{"SELECT GET_LOCK('a', 1)", classOther, PinLock},
		{"CREATE TEMPORARY TABLE t (a int)", classOther, PinTempTable},
		{"SELECT * FROM t WHERE a = '@home'", classOther, 0},
		{"SELECT /* @ */ 1", classOther, 0},
		{"SELECT @a := 1", classOther, PinUserVariable},
		{"SELECT SQL_CALC_FOUND_ROWS * FROM t", classOther, PinSessionState},
		{"/* conn_tag:x */ SELECT 1", classOther, 0},
	} {
		class, pins, _ := Classify([]byte(tt.q))
		if class != tt.class || pins != tt.pins {
			t.Errorf("Classify(%q) = %v, %v; want %v, %v", tt.q, class, pins, tt.class, tt.pins)
		}
	}
}

func TestAttributorCapsTags(t *testing.T) {
	var tags []string
	a := NewAttributor(AttributorConfig{MaxTags: 2}, func(h *Hold) { tags = append(tags, h.Tag) })
	for i, q := range []string{"/* conn_tag:a */ SELECT 1", "/* conn_tag:b */ SELECT 1", "/* conn_tag:c */ SELECT 1",
		"/* conn_tag:a */ SELECT 1", "/* conn_tag:d */ SELECT 1"} {
		e := ev(1, int64(i*100), int64(i*100+10), q)
		a.Add(&e)
	}
	if want := []string{"a", "b", OverflowTag, "a", OverflowTag}; !slices.Equal(tags, want) || a.Overflow() != 2 {
		t.Errorf("tags %v, overflow %d; want %v, 2", tags, a.Overflow(), want)
	}
}

// TestAttributorTagSlotsAgeOut: a tag unused for longer than TagIdleUS
// frees its slot, so a new tag after a flood gets its own name instead of
// OverflowTag for the rest of the process's life; a tag in use keeps its.
func TestAttributorTagSlotsAgeOut(t *testing.T) {
	var tags []string
	a := NewAttributor(AttributorConfig{MaxTags: 2}, func(h *Hold) { tags = append(tags, h.Tag) })
	add := func(session uint64, atUS int64, q string) {
		e := ev(session, atUS, atUS+10, q)
		a.Add(&e)
	}
	add(1, 0, "/* conn_tag:junk */ SELECT 1")
	add(2, 0, "/* conn_tag:steady */ SELECT 1")
	add(3, 100, "/* conn_tag:fresh */ SELECT 1") // the cap is full
	// steady stays in use every 2 minutes; junk is never seen again.
	for m := int64(2); m <= 6; m += 2 {
		add(2, m*60e6, "/* conn_tag:steady */ SELECT 1")
	}
	add(3, 6*60e6+100, "/* conn_tag:fresh */ SELECT 1")
	want := []string{"junk", "steady", OverflowTag, "steady", "steady", "steady", "fresh"}
	if !slices.Equal(tags, want) {
		t.Errorf("tags %v, want %v", tags, want)
	}
}
