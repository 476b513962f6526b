package attrib

import "strings"

// ProxySQL's extended_info (mysql-show_processlist_extended) is JSON,
// pretty-printed with sorted keys; these read a value by its key without
// decoding the document.

// JSONValue returns the text after `key:` (spaces skipped) for every
// occurrence of key, until fn returns true.
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
	return JSONValue(doc, key, func(v string) bool { return strings.HasPrefix(v, "true") })
}

// JSONInt returns the first non-negative integer value of key in doc.
func JSONInt(doc, key string) (int64, bool) {
	var n int64
	found := JSONValue(doc, key, func(v string) bool {
		i := 0
		for i < len(v) && v[i] >= '0' && v[i] <= '9' && i < 18 {
			n = n*10 + int64(v[i]-'0')
			i++
		}
		return i > 0
	})
	return n, found
}
