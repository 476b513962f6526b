// Package libtest checks conntag with the libraries its docs address, sqlx
// and gorm, on a real MariaDB: the hold profile names the user's line, not
// the library's. It is its own module so that those libraries stay out of
// holdtime's go.mod; make test runs it (the libtest step).
package libtest
