package attrib

import (
	"math/bits"
	"strings"
)

// ProxySQL's extended_info (mysql-show_processlist_extended) is JSON,
// pretty-printed with sorted keys, 3–6 KB per session. The sampler reads a
// few keys from it; ParseExtInfo reads them all in one pass over the
// document, so a sample costs one scan per session instead of one per key.

// JSONValue returns the text after `key:` (spaces skipped) for every
// occurrence of key, until fn returns true. It scans doc once per call:
// ParseExtInfo reads every key the sampler needs in one pass.
func JSONValue(doc, key string, fn func(v string) bool) bool {
	for {
		i := strings.Index(doc, key)
		if i < 0 {
			return false
		}
		doc = doc[i+len(key):]
		j := 0
		for j < len(doc) && (doc[j] == ' ' || doc[j] == '\n' || doc[j] == '\t' || doc[j] == '\r') {
			j++
		}
		if j < len(doc) && doc[j] == ':' {
			j++
			for j < len(doc) && (doc[j] == ' ' || doc[j] == '\n' || doc[j] == '\t' || doc[j] == '\r') {
				j++
			}
			if fn(doc[j:]) {
				return true
			}
		}
	}
}

// JSONTrue reports whether key is true somewhere in doc.
func JSONTrue(doc, key string) bool {
	return JSONValue(doc, key, isTrue)
}

func isTrue(v string) bool { return strings.HasPrefix(v, "true") }

// JSONInt returns the first non-negative integer value of key in doc.
func JSONInt(doc, key string) (int64, bool) {
	var n int64
	found := JSONValue(doc, key, func(v string) bool {
		var ok bool
		n, ok = leadingInt(v)
		return ok
	})
	return n, found
}

// leadingInt reads the digits v starts with (at most 18, so no overflow).
func leadingInt(v string) (int64, bool) {
	var n int64
	i := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' && i < 18 {
		n = n*10 + int64(v[i]-'0')
		i++
	}
	return n, i > 0
}

// ExtKey is one key of extended_info the sampler reads.
type ExtKey uint8

// The keys ParseExtInfo reads. The integer keys take their first
// non-negative integer value (JSONInt); the flags are set when the key is
// true anywhere (JSONTrue); ExtAutoIncrementDelay when a token is positive.
const (
	ExtThreadID             ExtKey = iota // backends[].conn.mysql.thread_id: the backend's server thread
	ExtConnpollGet                        // myconnpoll_get: borrows of the backend connection
	ExtConnpollPut                        // myconnpoll_put: returns of it
	ExtQuestions                          // questions: statements it ran
	ExtStatus                             // the session's status (1: CONNECTING_SERVER)
	ExtActiveTransactions                 // active_transactions
	ExtAutoIncrementDelay                 // auto_increment_delay_token > 0
	ExtLockTables                         // lock_tables
	ExtGetLock                            // get_lock
	ExtTemporaryTable                     // temporary_table
	ExtUserVariable                       // user_variable
	ExtPreparedStatement                  // prepared_statement
	ExtHasSavepoint                       // has_savepoint
	ExtFoundRows                          // found_rows
	ExtNoMultiplex                        // no_multiplex
	ExtMultiplexDisabled                  // MultiplexDisabled
	ExtMultiplexDisabledExt               // MultiplexDisabled_ext
	NumExtKeys                            // the number of keys
)

// ExtKeyName is each key as it appears in the JSON, quotes included.
var ExtKeyName = [NumExtKeys]string{
	`"thread_id"`, `"myconnpoll_get"`, `"myconnpoll_put"`, `"questions"`, `"status"`, `"active_transactions"`,
	`"auto_increment_delay_token"`, `"lock_tables"`, `"get_lock"`, `"temporary_table"`, `"user_variable"`,
	`"prepared_statement"`, `"has_savepoint"`, `"found_rows"`, `"no_multiplex"`, `"MultiplexDisabled"`,
	`"MultiplexDisabled_ext"`,
}

// ExtInfo is what the sampler reads from one extended_info document.
type ExtInfo struct {
	ints [extInts]int64
	set  uint32 // bit k: key k has its value (an integer, true, a positive token)
}

// Int returns an integer key's first non-negative integer value.
func (e ExtInfo) Int(k ExtKey) (int64, bool) { return e.ints[k], e.Has(k) }

// Has reports whether key k has its value: an integer for the integer
// keys, true for the flags, a positive token for ExtAutoIncrementDelay.
func (e ExtInfo) Has(k ExtKey) bool { return e.set&(1<<k) != 0 }

// extByLen lists the keys by the length of their name (at most two share
// one), 1+key, 0 for none: a name is compared only with keys of its length.
var extByLen = func() (t [extMaxName + 1][2]uint8) {
	for k, name := range ExtKeyName {
		n := len(name) - 2
		if t[n][0] == 0 {
			t[n][0] = uint8(k) + 1
		} else {
			t[n][1] = uint8(k) + 1
		}
	}
	return t
}()

// extFirst is the first letter of each key by the length of its name:
// most names between two quotes are no key's, and are passed over without
// a call.
var extFirst = func() (t [extMaxName + 1][2]byte) {
	for n, ks := range extByLen {
		for i, c := range ks {
			if c != 0 {
				t[n][i] = ExtKeyName[c-1][1]
			}
		}
	}
	return t
}()

// extKeyOf returns the key named by the text between two quotes.
func extKeyOf(name string) (ExtKey, bool) {
	if len(name) < extMinName || len(name) > extMaxName {
		return 0, false
	}
	for _, c := range extByLen[len(name)] {
		if c == 0 {
			break
		}
		k := ExtKey(c - 1)
		if kn := ExtKeyName[k]; kn[1] == name[0] && kn[1:len(kn)-1] == name {
			return k, true
		}
	}
	return 0, false
}

const (
	extInts    = ExtAutoIncrementDelay // the integer keys come first
	extMinName = len("status")
	extMaxName = len("auto_increment_delay_token")
	extAll     = 1<<NumExtKeys - 1
)

// ParseExtInfo reads every ExtKey from doc in one pass. Its result is the
// one JSONInt, JSONTrue and AutoIncrementDelay give key by key, on any
// input (FuzzParseExtInfo): a key is a quote, its name, a quote, and is
// matched wherever it occurs, string values included.
func ParseExtInfo(doc string) ExtInfo {
	var e ExtInfo
	// next[k]: where the previous occurrence of key k ended, as a key by
	// key scan resumes after it (an occurrence starting at its closing
	// quote is not one).
	var next [NumExtKeys]int
	prev := -1 // the last quote
	// The quotes, eight bytes at a time: a call per quote (IndexByte)
	// costs more than the names it finds are long.
	i := 0
	for ; i+8 <= len(doc) && e.set != extAll; i += 8 {
		w := uint64(doc[i]) | uint64(doc[i+1])<<8 | uint64(doc[i+2])<<16 | uint64(doc[i+3])<<24 |
			uint64(doc[i+4])<<32 | uint64(doc[i+5])<<40 | uint64(doc[i+6])<<48 | uint64(doc[i+7])<<56
		x := w ^ 0x2222222222222222 // a quote is a zero byte
		m := (x - 0x0101010101010101) &^ x & 0x8080808080808080
		for m != 0 {
			q := i + bits.TrailingZeros64(m)/8
			m &= m - 1
			if doc[q] != '"' { // the borrow above a zero byte
				continue
			}
			if n := q - prev - 1; prev >= 0 && n >= extMinName && n <= extMaxName &&
				(doc[prev+1] == extFirst[n][0] || doc[prev+1] == extFirst[n][1]) {
				e.name(doc, prev, q, &next)
			}
			prev = q
		}
	}
	for ; i < len(doc) && e.set != extAll; i++ {
		if doc[i] == '"' {
			if prev >= 0 {
				e.name(doc, prev, i, &next)
			}
			prev = i
		}
	}
	return e
}

// name reads the text between the quotes at p and end: if a key whose
// value is still to find, its value.
func (e *ExtInfo) name(doc string, p, end int, next *[NumExtKeys]int) {
	k, ok := extKeyOf(doc[p+1 : end])
	if !ok || e.set&(1<<k) != 0 || p < next[k] {
		return
	}
	next[k] = end + 1
	if v, ok := afterColon(doc[end+1:]); ok {
		e.value(k, v)
	}
}

// afterColon returns what follows `:` after optional spaces, spaces
// skipped, or false when no colon follows.
func afterColon(s string) (string, bool) {
	j := 0
	for j < len(s) && (s[j] == ' ' || s[j] == '\n' || s[j] == '\t' || s[j] == '\r') {
		j++
	}
	if j >= len(s) || s[j] != ':' {
		return "", false
	}
	j++
	for j < len(s) && (s[j] == ' ' || s[j] == '\n' || s[j] == '\t' || s[j] == '\r') {
		j++
	}
	return s[j:], true
}

// value records v as key k's value if it is one of k's kind.
func (e *ExtInfo) value(k ExtKey, v string) {
	switch {
	case k < extInts:
		if n, ok := leadingInt(v); ok {
			e.ints[k] = n
			e.set |= 1 << k
		}
	case k == ExtAutoIncrementDelay:
		if positiveToken(v) {
			e.set |= 1 << k
		}
	default:
		if isTrue(v) {
			e.set |= 1 << k
		}
	}
}

func positiveToken(v string) bool { return len(v) > 0 && v[0] >= '1' && v[0] <= '9' }

// ScanExtInfo reads keys one scan of doc each (JSONInt, JSONTrue,
// AutoIncrementDelay): what the sampler did before ParseExtInfo, kept as
// the reference of its tests and the baseline of the benchmarks.
func ScanExtInfo(doc string, keys ...ExtKey) ExtInfo {
	var e ExtInfo
	for _, k := range keys {
		switch {
		case k < extInts:
			if n, ok := JSONInt(doc, ExtKeyName[k]); ok {
				e.ints[k], e.set = n, e.set|1<<k
			}
		case k == ExtAutoIncrementDelay:
			if AutoIncrementDelay(doc) {
				e.set |= 1 << k
			}
		default:
			if JSONTrue(doc, ExtKeyName[k]) {
				e.set |= 1 << k
			}
		}
	}
	return e
}
