package attrib

import (
	"path/filepath"
	"strings"
	"testing"
)

// captureFiles are real ProxySQL processlists with extended_info: the
// 2.7.1 capture of every session state, and the states test data.
var captureFiles = []string{
	"../../../internal/testdata/proxysql/processlist_extended_2.7.1.tsv",
	"testdata/states_processlist_samples_extended.tsv",
}

// captureExtInfos returns every extended_info of the capture files.
func captureExtInfos(tb testing.TB) []string {
	tb.Helper()
	var docs []string
	for _, path := range captureFiles {
		r, err := OpenProcesslist([]string{filepath.FromSlash(path)})
		if err != nil {
			tb.Fatal(err)
		}
		n := 0
		for r.Next() {
			if r.Row().ExtendedInfo.Valid {
				docs = append(docs, r.Row().ExtendedInfo.String)
				n++
			}
		}
		if err := r.Err(); err != nil {
			tb.Fatal(err)
		}
		if bad, _ := r.Malformed(); bad != 0 || n == 0 {
			tb.Fatalf("%s: %d documents, %d malformed lines", path, n, bad)
		}
		r.Close()
	}
	return docs
}

// scanExtInfo is the key by key reading ParseExtInfo replaces: one scan of
// doc per key.
func scanExtInfo(doc string) ExtInfo {
	var keys [NumExtKeys]ExtKey
	for k := range keys {
		keys[k] = ExtKey(k)
	}
	return ScanExtInfo(doc, keys[:]...)
}

func checkSameExt(t *testing.T, doc string) {
	t.Helper()
	got, want := ParseExtInfo(doc), scanExtInfo(doc)
	if got != want {
		for k := range NumExtKeys {
			gv, gok := got.Int(k)
			wv, wok := want.Int(k)
			if gv != wv || gok != wok {
				t.Errorf("%s: one pass %d,%v, key by key %d,%v", ExtKeyName[k], gv, gok, wv, wok)
			}
		}
		t.Fatalf("in %q", doc)
	}
}

func TestParseExtInfoCapture(t *testing.T) {
	docs := captureExtInfos(t)
	seen := map[ExtKey]bool{}
	for _, doc := range docs {
		checkSameExt(t, doc)
		e := ParseExtInfo(doc)
		for k := range NumExtKeys {
			if e.Has(k) {
				seen[k] = true
			}
		}
	}
	// The capture has backends, a waiting session's status and open
	// transactions: the comparison covers found values, not only misses.
	for _, k := range []ExtKey{ExtThreadID, ExtConnpollGet, ExtConnpollPut, ExtQuestions, ExtStatus, ExtActiveTransactions} {
		if !seen[k] {
			t.Errorf("no document of the capture has %s", ExtKeyName[k])
		}
	}
	t.Logf("%d documents, keys found: %v", len(docs), seen)
}

func TestParseExtInfoEdges(t *testing.T) {
	for _, doc := range []string{
		"", `"`, `""`, `"status"`, `"status":`, `"status": 7`, `"status" : {"status": 1}`,
		`"status"status": 3`,            // an occurrence at the previous one's closing quote is not one
		`"status" "status": 3`,          // the first has no colon: the second counts
		`"status": -1, "status": 2`,     // the first non-negative integer
		`"status": 1234567890123456789`, // at most 18 digits
		`"lock_tables": false, "lock_tables": true`,
		`"x": "\"get_lock\": true"`, // escaped quotes still match key by key: so must one pass
		`"auto_increment_delay_token": 0, "auto_increment_delay_token": 3`,
		`"MultiplexDisabled_ext": true`, `"MultiplexDisabled": true`,
		"\"thread_id\"\t\r\n:\n 42",
		`{"active_transactions": 1, "thread_id": 9, "myconnpoll_get": 2, "myconnpoll_put": 1, "questions": 5}`,
	} {
		checkSameExt(t, doc)
	}
	if n, ok := ParseExtInfo(`"status"status": 3`).Int(ExtStatus); ok {
		t.Fatalf(`"status"status": 3: status %d, want none`, n)
	}
}

func FuzzParseExtInfo(f *testing.F) {
	for _, doc := range captureExtInfos(f) {
		f.Add(doc)
	}
	for _, k := range ExtKeyName {
		f.Add(k + ": 1 " + k + `"` + k + ": true")
	}
	f.Add(strings.Repeat(`"status"`, 5) + ": 1")
	f.Fuzz(checkSameExt)
}

func BenchmarkParseExtInfo(b *testing.B) {
	docs := captureExtInfos(b)
	size := 0
	for _, d := range docs {
		size += len(d)
	}
	for _, v := range []struct {
		name  string
		parse func(string) ExtInfo
	}{{"one_pass", ParseExtInfo}, {"key_by_key", scanExtInfo}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				for _, d := range docs {
					v.parse(d)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(docs)), "ns/doc")
		})
	}
}

func BenchmarkExtFloor(b *testing.B) {
	docs := captureExtInfos(b)
	size := 0
	for _, d := range docs {
		size += len(d)
	}
	b.Logf("%d docs, %d bytes avg, quotes %d colons %d", len(docs), size/len(docs), strings.Count(docs[0], `"`), strings.Count(docs[0], `:`))
	b.Run("count_quotes", func(b *testing.B) {
		for b.Loop() {
			for _, d := range docs {
				strings.Count(d, `"`)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(docs)), "ns/doc")
	})
	b.Run("index_rare", func(b *testing.B) {
		for b.Loop() {
			for _, d := range docs {
				strings.Index(d, `"zzzz"`)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(docs)), "ns/doc")
	})
}

// parsedExt is the row's extended_info as Add parses it, nil when Add
// does not read it.
func parsedExt(row *ProcesslistRow) *ExtInfo {
	if !NeedsExtInfo(row) {
		return nil
	}
	e := ParseExtInfo(row.ExtendedInfo.String)
	return &e
}
