package conntag

// op is a statement's operation, from its first keyword: a small fixed set,
// so db.operation.name stays low-cardinality and costs no allocation.
type op uint8

const (
	opOther op = iota
	opSelect
	opInsert
	opUpdate
	opDelete
	opReplace
	opWith
	opCall
	opSet
	opShow
	opBegin
	opCommit
	opRollback
	opExecute
	numOps
)

var opNames = [numOps]string{
	opOther: "OTHER", opSelect: "SELECT", opInsert: "INSERT", opUpdate: "UPDATE", opDelete: "DELETE",
	opReplace: "REPLACE", opWith: "WITH", opCall: "CALL", opSet: "SET", opShow: "SHOW",
	opBegin: "BEGIN", opCommit: "COMMIT", opRollback: "ROLLBACK", opExecute: "EXECUTE",
}

// operationOf returns the operation of a statement's text: its first word
// after leading comments, compared without case.
func operationOf(q string) op {
	i, _ := insertPoint(q)
	return operationAt(q, i)
}

// operationAt is operationOf for a statement whose first keyword starts at
// i (its insert point).
func operationAt(q string, i int) op {
	j := i
	for j < len(q) && j-i < 9 && (q[j]|0x20 >= 'a' && q[j]|0x20 <= 'z') {
		j++
	}
	w := q[i:j]
	switch len(w) {
	case 3:
		if eqFold(w, "SET") {
			return opSet
		}
	case 4:
		switch {
		case eqFold(w, "WITH"):
			return opWith
		case eqFold(w, "CALL"):
			return opCall
		case eqFold(w, "SHOW"):
			return opShow
		}
	case 5:
		if eqFold(w, "BEGIN") {
			return opBegin
		}
		if eqFold(w, "START") {
			return opBegin
		}
	case 6:
		switch {
		case eqFold(w, "SELECT"):
			return opSelect
		case eqFold(w, "INSERT"):
			return opInsert
		case eqFold(w, "UPDATE"):
			return opUpdate
		case eqFold(w, "DELETE"):
			return opDelete
		case eqFold(w, "COMMIT"):
			return opCommit
		}
	case 7:
		switch {
		case eqFold(w, "REPLACE"):
			return opReplace
		case eqFold(w, "EXECUTE"):
			return opExecute
		}
	case 8:
		if eqFold(w, "ROLLBACK") {
			return opRollback
		}
	}
	return opOther
}

// eqFold compares an ASCII word with an upper-case keyword.
func eqFold(w, upper string) bool {
	for i := 0; i < len(w); i++ {
		if w[i]&^0x20 != upper[i] {
			return false
		}
	}
	return true
}
