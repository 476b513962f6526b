// Package testenv starts real, throwaway database servers for holdtime's tests
// and demos: a MySQL-compatible server (MariaDB >= 10.6 or MySQL >= 8.0), and,
// where their binaries are installed, ProxySQL in front of it and Prometheus.
//
// Nothing here is a mock. StartMySQL finds mariadbd or mysqld, initialises a
// data directory (once per binary version, then copied from a cached
// template, which is what makes a start cost well under a second), starts it
// bound to 127.0.0.1 on a free port and on a unix socket with
// performance_schema on, and removes everything on Close.
//
// Tests use NewDatabase, which gives each test its own database on one server
// per test binary and drops it in t.Cleanup:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		db := testenv.NewDatabase(t).Open(t)
//		...
//	}
//
// StartProxySQL puts a real ProxySQL in front of a started server;
// StartProxySQLFleet (NewProxySQLFleet in tests) starts N of them in front
// of one server, each on its own app and admin ports, in parallel. A
// ProxySQL start costs about 0.1 s of CPU and 25 MB of resident memory per
// instance with the fleet's one MySQL thread: ProxySQL's TLS files, whose
// RSA keys cost seconds to make, are made once and kept next to the MySQL
// templates.
//
// Environment:
//   - HOLDTIME_MYSQL_DSN points every test at an existing server instead
//     (for example a MySQL 8.4): user:pass@tcp(host:port)/ in
//     go-sql-driver/mysql form. Each test still gets its own database.
//   - With no server binary and no DSN, tests skip with the install command,
//     unless CI=true, where they fail.
//   - HOLDTIME_TESTENV_NOCACHE=1 skips the template cache (every start
//     initialises a new data directory) and ProxySQL's TLS cache.
//
// A server outlives a killed test binary only until the next StartMySQL on
// the same machine, which reaps servers whose owner process is gone. On Linux
// the server also receives SIGKILL when its owner dies.
package testenv
