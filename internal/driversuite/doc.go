// Package driversuite runs go-sql-driver/mysql's own test suite twice
// against a throwaway MariaDB: as the driver's authors run it, and with
// every sql.Open and sql.OpenDB in it turned into conntag.Open and
// conntag.OpenDB. Every test that passes as-is must pass through conntag,
// except the few named in exceptions (driver_suite_test.go), and the
// server's general log of both runs must agree on what was prepared: no
// statement prepared through conntag that the driver sends as a plain
// query.
//
// It is its own module so that running another module's tests adds nothing
// to holdtime's go.mod. Run it with make test (the driver-suite step), or:
//
//	cd internal/driversuite && go mod download && go test -count=1 ./...
package driversuite
