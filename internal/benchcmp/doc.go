// Package benchcmp compares conntag's per-statement cost with
// github.com/XSAM/otelsql doing comparable work (metrics plus a comment
// carrying context into the statement). It is its own module so that
// otelsql never becomes a dependency of holdtime.
//
//	cd internal/benchcmp && go test -run '^$' -bench . -benchmem
package benchcmp
