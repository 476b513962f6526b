package attrib

import "bytes"

// StmtClass is what a statement does to a session's transaction state.
type StmtClass uint8

const (
	classOther StmtClass = iota
	ClassBegin
	ClassCommit // COMMIT or ROLLBACK (not ROLLBACK TO SAVEPOINT)
	ClassAutocommitOff
	ClassAutocommitOn
	classUnlockTables
)

// Pin is a set of reasons ProxySQL keeps a backend attached to a client
// session between statements instead of returning it to the pool.
type Pin uint16

// The pins the events log lets holdtime see. ProxySQL's rules: a transaction
// pins until it ends; LOCK TABLES until UNLOCK TABLES; GET_LOCK(), user
// variables ('@' in the statement), CREATE TEMPORARY TABLE, text-protocol
// PREPARE, SQL_CALC_FOUND_ROWS and SET of session variables ProxySQL does
// not track pin for the rest of the session.
const (
	PinTransaction   Pin = 1 << iota // BEGIN .. COMMIT/ROLLBACK
	PinAutocommitOff                 // a transaction opened implicitly under SET autocommit=0
	PinUserVariable                  // '@' in a statement
	PinLock                          // GET_LOCK(), LOCK TABLES, FLUSH TABLES WITH READ LOCK
	PinTempTable                     // CREATE TEMPORARY TABLE
	PinSessionState                  // text PREPARE, SQL_CALC_FOUND_ROWS, untracked SET
)

// stickyPins pin a session until it ends (or, for LOCK TABLES, until UNLOCK
// TABLES), across transactions.
const stickyPins = PinUserVariable | PinLock | PinTempTable | PinSessionState

var pinNames = [...]struct {
	pin  Pin
	name string
}{
	{PinTransaction, "transaction"},
	{PinAutocommitOff, "autocommit_off"},
	{PinUserVariable, "user_variable"},
	{PinLock, "lock"},
	{PinTempTable, "temporary_table"},
	{PinSessionState, "session_state"},
}

// AllPins lists every pin, in the order Names uses.
var AllPins = [...]Pin{PinTransaction, PinAutocommitOff, PinUserVariable, PinLock, PinTempTable, PinSessionState}

// Name is the name of a single pin; "" for none or several.
func (p Pin) Name() string {
	for _, pn := range pinNames {
		if p == pn.pin {
			return pn.name
		}
	}
	return ""
}

// Names lists the names of the pins in p, in a fixed order.
func (p Pin) Names() []string {
	var names []string
	for _, pn := range pinNames {
		if p&pn.pin != 0 {
			names = append(names, pn.name)
		}
	}
	return names
}

// Classify returns what q does to the transaction state and the sticky pins
// it sets. lockTables reports LOCK TABLES / FLUSH TABLES WITH READ LOCK,
// which UNLOCK TABLES releases (unlike GET_LOCK).
func Classify(q []byte) (class StmtClass, pins Pin, lockTables bool) {
	body := SkipLeadingComments(q)
	kw, rest := FirstWord(body)
	switch {
	case EqFold(kw, "BEGIN"):
		class = ClassBegin
	case EqFold(kw, "START"):
		if w, _ := FirstWord(rest); EqFold(w, "TRANSACTION") {
			class = ClassBegin
		}
	case EqFold(kw, "COMMIT"):
		class = ClassCommit
	case EqFold(kw, "ROLLBACK"):
		// ROLLBACK [WORK] TO [SAVEPOINT] x keeps the transaction open.
		w, after := FirstWord(rest)
		if EqFold(w, "WORK") {
			w, _ = FirstWord(after)
		}
		if !EqFold(w, "TO") {
			class = ClassCommit
		}
	case EqFold(kw, "SET"):
		class, pins = classifySet(rest)
	case EqFold(kw, "LOCK"):
		pins |= PinLock
		lockTables = true
	case EqFold(kw, "UNLOCK"):
		class = classUnlockTables
	case EqFold(kw, "FLUSH"):
		if indexFold(rest, "READ LOCK") >= 0 {
			pins |= PinLock
			lockTables = true
		}
	case EqFold(kw, "CREATE"):
		if w, _ := FirstWord(rest); EqFold(w, "TEMPORARY") {
			pins |= PinTempTable
		}
	case EqFold(kw, "PREPARE"):
		pins |= PinSessionState
	}
	if hasUserVariable(body) {
		pins |= PinUserVariable
	}
	if bytes.IndexByte(body, '_') >= 0 {
		if indexFold(body, "GET_LOCK(") >= 0 {
			pins |= PinLock
		}
		if indexFold(body, "SQL_CALC_FOUND_ROWS") >= 0 {
			pins |= PinSessionState
		}
	}
	return class, pins, lockTables
}

// untrackedSessionVars are the SET targets after which ProxySQL disables
// multiplexing for the rest of the session.
var untrackedSessionVars = []string{
	"sql_log_bin", "sql_safe_updates", "sql_select_limit", "max_join_size", "foreign_key_checks",
	"unique_checks", "auto_increment_increment", "auto_increment_offset", "group_concat_max_len",
}

func classifySet(rest []byte) (StmtClass, Pin) {
	var pins Pin
	class := classOther
	if i := indexFold(rest, "autocommit"); i >= 0 {
		v := trimLeftSpace(rest[i+len("autocommit"):])
		if len(v) > 0 && (v[0] == '=' || v[0] == ':') {
			v = trimLeftSpace(bytes.TrimLeft(v, ":="))
			w, _ := FirstWord(v)
			switch {
			case EqFold(w, "0"), EqFold(w, "OFF"), EqFold(w, "FALSE"):
				class = ClassAutocommitOff
			case EqFold(w, "1"), EqFold(w, "ON"), EqFold(w, "TRUE"):
				class = ClassAutocommitOn
			}
		}
	}
	for _, name := range untrackedSessionVars {
		if indexFold(rest, name) >= 0 {
			pins |= PinSessionState
			break
		}
	}
	return class, pins
}

// hasUserVariable reports an '@' outside string literals and comments, as
// ProxySQL sees it in the digest (which replaces literals), except the two
// statements ProxySQL exempts because every connector sends them.
func hasUserVariable(q []byte) bool {
	if bytes.IndexByte(q, '@') < 0 {
		return false
	}
	if hasPrefixFold(q, "SELECT @@tx_isolation") || hasPrefixFold(q, "SELECT @@version") {
		return false
	}
	for i := 0; i < len(q); i++ {
		switch c := q[i]; c {
		case '@':
			return true
		case '\'', '"', '`':
			for i++; i < len(q) && q[i] != c; i++ {
				if q[i] == '\\' {
					i++
				}
			}
		case '/':
			if i+1 < len(q) && q[i+1] == '*' {
				end := bytes.Index(q[i+2:], []byte("*/"))
				if end < 0 {
					return false
				}
				i += 2 + end + 1
			}
		}
	}
	return false
}

// SkipLeadingComments returns q after its leading whitespace and /* */
// comments.
func SkipLeadingComments(q []byte) []byte {
	for {
		q = trimLeftSpace(q)
		if len(q) < 2 || q[0] != '/' || q[1] != '*' {
			return q
		}
		end := bytes.Index(q[2:], []byte("*/"))
		if end < 0 {
			return nil
		}
		q = q[2+end+2:]
	}
}

// FirstWord splits off the first word: letters, digits and '_'.
func FirstWord(b []byte) (word, rest []byte) {
	b = trimLeftSpace(b)
	n := 0
	for n < len(b) && wordByte(b[n]) {
		n++
	}
	return b[:n], b[n:]
}

func wordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func EqFold(b []byte, s string) bool {
	return len(b) == len(s) && hasPrefixFold(b, s)
}

func hasPrefixFold(b []byte, s string) bool {
	if len(b) < len(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lower(b[i]) != lower(s[i]) {
			return false
		}
	}
	return true
}

// indexFold is a case-insensitive bytes.Index for ASCII needles.
func indexFold(b []byte, s string) int {
	for i := 0; i+len(s) <= len(b); i++ {
		if lower(b[i]) == lower(s[0]) && hasPrefixFold(b[i:], s) {
			return i
		}
	}
	return -1
}

// MayBeTruncated reports whether a statement's text may have been cut by
// whoever recorded it, so that a tag at its end may be missing: the server
// cuts performance_schema's SQL_TEXT (1,024 bytes by default) and ends it
// with "...". A statement that really ends in "..." would end inside a
// string literal or a comment, not with it. Such a text without a tag is
// unknown, never untagged.
func MayBeTruncated(q []byte) bool {
	return bytes.HasSuffix(trimRightSpace(q), []byte("..."))
}
