package doctor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Need says how much a layer depends on an item.
type Need string

const (
	// Required: without it the figures of the layer are wrong or missing.
	Required Need = "required"
	// Recommended: without it some figures are lower bounds, or a
	// cross-check or a view is missing; the layer's headline still holds.
	Recommended Need = "recommended"
)

// Item is one thing holdtime needs from a target. The list of items is the
// one source of the setup: the README's setup section states it, testenv
// starts its servers with exactly it, and `holdtime doctor` checks it.
type Item struct {
	// ID is stable and short: "mysql.consumer.events_statements_current".
	ID string `json:"id"`
	// Target is the kind of endpoint the item is about: KindMySQL or
	// KindProxySQLAdmin.
	Target Kind `json:"target"`
	// What is the setting in the server's own words.
	What string `json:"what"`
	// Need and Why: what breaks without it, in the words of the figure it
	// breaks.
	Need Need   `json:"need"`
	Why  string `json:"why"`
	// Fix is what to run now (SQL, or ProxySQL admin statements), Config the
	// line that keeps it across restarts (my.cnf under [mysqld], or
	// proxysql.cnf). Either may be empty when the other is the only way.
	Fix    string `json:"fix,omitempty"`
	Config string `json:"config,omitempty"`

	// ServerArg is the mysqld/mariadbd command-line option testenv starts
	// its server with for this item ("" when it is not a server option).
	ServerArg string `json:"-"`
	// ProxySQLVar and ProxySQLValue are the mysql_variables entry testenv's
	// proxysql.cnf sets for this item (without the "mysql-" prefix).
	ProxySQLVar   string `json:"-"`
	ProxySQLValue string `json:"-"`

	check func(ctx context.Context, db *sql.DB) (got string, ok bool, err error)
}

// errUnknown marks a check that the account cannot make; the item is then
// neither OK nor missing.
var errUnknown = errors.New("cannot be checked")

// MonitorGrants are the privileges of the collector's MySQL account. PROCESS
// shows every session in the processlist, INNODB_TRX and SHOW ENGINE INNODB
// STATUS; SELECT on performance_schema reads the statement history, threads
// and locks. Nothing else: the collector never writes.
var monitorGrants = []string{"PROCESS ON *.*", "SELECT ON performance_schema.*"}

// MonitorGrants returns the GRANT statements for user@host, as the README
// states them.
func MonitorGrants(user, host string) []string {
	out := make([]string, len(monitorGrants))
	for i, g := range monitorGrants {
		out[i] = fmt.Sprintf("GRANT %s TO '%s'@'%s'", g, user, host)
	}
	return out
}

// Items returns the setup list, MySQL server items first, then ProxySQL's.
// A fresh slice each call: callers may filter it.
func Items() []Item {
	return append(mysqlItems(), proxysqlItems()...)
}

func consumer(name string, need Need, why string) Item {
	return Item{
		ID: "mysql.consumer." + name, Target: KindMySQL, Need: need, Why: why,
		What:      "performance_schema consumer " + name + " enabled",
		Fix:       "UPDATE performance_schema.setup_consumers SET ENABLED = 'YES' WHERE NAME = '" + name + "'",
		Config:    "performance-schema-consumer-" + strings.ReplaceAll(name, "_", "-") + "=ON",
		ServerArg: "--performance-schema-consumer-" + strings.ReplaceAll(name, "_", "-") + "=ON",
		check: func(ctx context.Context, db *sql.DB) (string, bool, error) {
			var enabled string
			err := db.QueryRowContext(ctx, "SELECT ENABLED FROM performance_schema.setup_consumers WHERE NAME = ?", name).Scan(&enabled)
			if err != nil {
				return "", false, err
			}
			return strings.ToLower(enabled), enabled == "YES", nil
		},
	}
}

func mysqlItems() []Item {
	return []Item{
		{
			ID: "mysql.performance_schema", Target: KindMySQL, Need: Required,
			What: "performance_schema=ON",
			Why: "the server layer times statements and names transactions from performance_schema; without it every " +
				"server figure is missing and an idle transaction is unknown",
			Fix:       "(needs a restart: performance_schema cannot be turned on at run time)",
			Config:    "performance_schema=ON",
			ServerArg: "--performance-schema=ON",
			check: func(ctx context.Context, db *sql.DB) (string, bool, error) {
				var on int
				if err := db.QueryRowContext(ctx, "SELECT @@performance_schema").Scan(&on); err != nil {
					return "", false, err
				}
				return map[bool]string{true: "ON", false: "OFF"}[on == 1], on == 1, nil
			},
		},
		{
			ID: "mysql.grant.process", Target: KindMySQL, Need: Required,
			What: "the account has PROCESS",
			Why: "without it the processlist shows the collector's own sessions only and INNODB_TRX is refused: no server hold, " +
				"no transactions, no locks, and ProxySQL sessions idle in a transaction cannot be joined to the server (their hold is unknown)",
			Fix: "GRANT PROCESS ON *.* TO <the collector's account>",
			check: func(ctx context.Context, db *sql.DB) (string, bool, error) {
				var n int
				err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.INNODB_TRX").Scan(&n)
				if denied(err) {
					return "missing", false, nil
				}
				return "granted", err == nil, err
			},
		},
		{
			ID: "mysql.grant.performance_schema", Target: KindMySQL, Need: Required,
			What: "the account has SELECT on performance_schema",
			Why:  "the statement history and threads are unreadable: every server figure is missing",
			Fix:  "GRANT SELECT ON performance_schema.* TO <the collector's account>",
			check: func(ctx context.Context, db *sql.DB) (string, bool, error) {
				var n int
				err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM performance_schema.setup_consumers").Scan(&n)
				if denied(err) {
					return "missing", false, nil
				}
				return "granted", err == nil, err
			},
		},
		consumer("global_instrumentation", Required, "no performance_schema consumer records anything without it"),
		consumer("thread_instrumentation", Required, "no per-session statement is recorded without it"),
		consumer("events_statements_current", Required,
			"running statements are not timed and the history consumers below stay empty on MariaDB: "+
				"server hold is missing and an idle ProxySQL backend's tag is unknown"),
		consumer("events_statements_history_long", Required,
			"finished statements are seen only when a sample catches them: server hold is a lower bound and short "+
				"statements of clients that disconnect are missed"),
		consumer("events_statements_history", Recommended,
			"a transaction's tag is read from the last 10 statements of its session: without it a lock held by an "+
				"idle transaction shows as unknown"),
		consumer("events_transactions_current", Recommended,
			"the proxy↔server join finds an idle ProxySQL session's transaction from BEGIN, COMMIT and ROLLBACK in the "+
				"statement history only: it cannot tell autocommit statements after a COMMIT from a transaction begun "+
				"implicitly (autocommit=0), so more idle hold is inferred (by time) rather than exact (a hog beside short "+
				"autocommit statements on the same backends: 27–30 % of its idle hold inferred with it, 54–61 % without)"),
		{
			ID: "mysql.instruments.transaction", Target: KindMySQL, Need: Recommended,
			What: "the transaction instrument enabled and timed",
			Why:  "transactions are not recorded: the proxy↔server join falls back to BEGIN, COMMIT and ROLLBACK in the statement history, as without events_transactions_current",
			Fix:  "UPDATE performance_schema.setup_instruments SET ENABLED='YES', TIMED='YES' WHERE NAME='transaction'",
			// MariaDB ships it off, MySQL 8.0 on.
			Config:    "performance-schema-instrument='transaction=ON'",
			ServerArg: "--performance-schema-instrument=transaction=ON",
			check: func(ctx context.Context, db *sql.DB) (string, bool, error) {
				var enabled, timed string
				err := db.QueryRowContext(ctx, "SELECT ENABLED, TIMED FROM performance_schema.setup_instruments WHERE NAME = 'transaction'").Scan(&enabled, &timed)
				if errors.Is(err, sql.ErrNoRows) {
					return "no such instrument", false, nil
				}
				if err != nil {
					return "", false, err
				}
				return "enabled " + strings.ToLower(enabled) + ", timed " + strings.ToLower(timed), enabled == "YES" && timed == "YES", nil
			},
		},
		{
			ID: "mysql.instruments.statement", Target: KindMySQL, Need: Required,
			What: "statement instruments enabled and timed",
			Why:  "statements that are not instrumented are not recorded: their hold is missing",
			Fix:  "UPDATE performance_schema.setup_instruments SET ENABLED = 'YES', TIMED = 'YES' WHERE NAME LIKE 'statement/%'",
			// The servers' default: nothing for testenv to set.
			Config: "performance-schema-instrument='statement/%=ON'",
			check: func(ctx context.Context, db *sql.DB) (string, bool, error) {
				var n int
				err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM performance_schema.setup_instruments "+
					"WHERE NAME LIKE 'statement/%' AND (ENABLED <> 'YES' OR TIMED <> 'YES')").Scan(&n)
				if err != nil {
					return "", false, err
				}
				return fmt.Sprintf("%d statement instruments off", n), n == 0, nil
			},
		},
		{
			ID: "mysql.actors", Target: KindMySQL, Need: Required,
			What: "every account's sessions instrumented (setup_actors)",
			Why:  "sessions of an account that setup_actors leaves out record no statement: their hold is missing",
			Fix:  "UPDATE performance_schema.setup_actors SET ENABLED = 'YES', HISTORY = 'YES'",
			check: func(ctx context.Context, db *sql.DB) (string, bool, error) {
				var n int
				err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM performance_schema.threads "+
					"WHERE TYPE = 'FOREGROUND' AND (INSTRUMENTED <> 'YES' OR HISTORY <> 'YES')").Scan(&n)
				if err != nil {
					return "", false, err
				}
				return fmt.Sprintf("%d sessions not instrumented", n), n == 0, nil
			},
		},
		{
			ID: "mysql.history_long_size", Target: KindMySQL, Need: Recommended,
			What: "performance_schema_events_statements_history_long_size >= 10000",
			Why: "the ring must hold every statement of one poll interval (1 s by default); a smaller one wraps under " +
				"load and server hold becomes a lower bound",
			Fix:    "(needs a restart)",
			Config: "performance_schema_events_statements_history_long_size=10000",
			check: func(ctx context.Context, db *sql.DB) (string, bool, error) {
				var n int64
				if err := db.QueryRowContext(ctx, "SELECT @@performance_schema_events_statements_history_long_size").Scan(&n); err != nil {
					return "", false, err
				}
				return strconv.FormatInt(n, 10), n >= 10000, nil
			},
		},
	}
}

// proxysqlVariable checks a mysql- variable through global_variables, which
// an admin-stats_credentials account cannot read (it sees one row): the
// check then says so instead of guessing.
func proxysqlVariable(name, want string) func(ctx context.Context, db *sql.DB) (string, bool, error) {
	return func(ctx context.Context, db *sql.DB) (string, bool, error) {
		var v string
		err := db.QueryRowContext(ctx, "SELECT variable_value FROM global_variables WHERE variable_name = 'mysql-"+name+"'").Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return "", false, fmt.Errorf("%w: this account does not see mysql-%s (an admin-stats_credentials account sees almost no "+
				"variables): run doctor with an admin-admin_credentials account, or check it there: "+
				"SELECT variable_value FROM global_variables WHERE variable_name = 'mysql-%s'", errUnknown, name, name)
		}
		if err != nil {
			return "", false, err
		}
		return v, strings.EqualFold(v, want), nil
	}
}

func proxysqlSet(name, value string) string {
	return fmt.Sprintf("SET mysql-%s = '%s'; LOAD MYSQL VARIABLES TO RUNTIME; SAVE MYSQL VARIABLES TO DISK", name, value)
}

func proxysqlItems() []Item {
	return []Item{
		{
			ID: "proxysql.stats", Target: KindProxySQLAdmin, Need: Required,
			What: "the account reads the stats schema (admin-stats_credentials is enough)",
			Why:  "the processlist, digests and connection pool are read from it: no proxy figure at all",
			Fix:  "SET admin-stats_credentials = 'stats:<password>'; LOAD ADMIN VARIABLES TO RUNTIME; SAVE ADMIN VARIABLES TO DISK",
			check: func(ctx context.Context, db *sql.DB) (string, bool, error) {
				var n int
				if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM stats_mysql_processlist").Scan(&n); err != nil {
					return "", false, err
				}
				return fmt.Sprintf("%d client sessions", n), true, nil
			},
		},
		{
			ID: "proxysql.show_processlist_extended", Target: KindProxySQLAdmin, Need: Required,
			What: "mysql-show_processlist_extended=2",
			Why: "extended_info names each session's backend (server thread id, borrow counters) and why it is pinned: " +
				"without it every pin's reason is unknown, and a tag carried from an earlier sample of a session cannot be " +
				"checked against its backend's borrows (a pooled session's previous tag can be carried into another tag's transaction)",
			Fix: proxysqlSet("show_processlist_extended", "2"), Config: "mysql_variables: show_processlist_extended=2",
			ProxySQLVar: "show_processlist_extended", ProxySQLValue: "2",
			check: proxysqlVariable("show_processlist_extended", "2"),
		},
		{
			ID: "proxysql.query_digests", Target: KindProxySQLAdmin, Need: Recommended,
			What: "mysql-query_digests=true",
			Why:  "the digest cross-check and statement counts per tag are missing (ProxySQL's default is true)",
			Fix:  proxysqlSet("query_digests", "true"), Config: "mysql_variables: query_digests=true",
			ProxySQLVar: "query_digests", ProxySQLValue: "true",
			check: proxysqlVariable("query_digests", "true"),
		},
		{
			ID: "proxysql.query_digests_keep_comment", Target: KindProxySQLAdmin, Need: Recommended,
			What: "mysql-query_digests_keep_comment=true",
			Why:  "digests drop the conn_tag comment: statements per tag at the proxy are all untagged",
			Fix:  proxysqlSet("query_digests_keep_comment", "true"), Config: "mysql_variables: query_digests_keep_comment=true",
			ProxySQLVar: "query_digests_keep_comment", ProxySQLValue: "true",
			check: proxysqlVariable("query_digests_keep_comment", "true"),
		},
	}
}

func denied(err error) bool {
	var me *mysql.MySQLError
	// 1227 needs a privilege (PROCESS), 1142 a table privilege, 1044 a
	// database privilege.
	return errors.As(err, &me) && (me.Number == 1227 || me.Number == 1142 || me.Number == 1044)
}

// ServerArgs returns the options testenv starts a MySQL or MariaDB server
// with so that it has the setup list, and nothing more of holdtime's.
func ServerArgs() []string {
	var out []string
	for _, it := range mysqlItems() {
		if it.ServerArg != "" {
			out = append(out, it.ServerArg)
		}
	}
	return out
}

// ProxySQLVariables returns the mysql_variables testenv's ProxySQL sets for
// the setup list, as name (without "mysql-") and value.
func ProxySQLVariables() [][2]string {
	var out [][2]string
	for _, it := range proxysqlItems() {
		if it.ProxySQLVar != "" {
			out = append(out, [2]string{it.ProxySQLVar, it.ProxySQLValue})
		}
	}
	return out
}

// Markdown renders the setup list as the README's table states it (a test
// keeps the two equal).
func Markdown() string {
	var b strings.Builder
	b.WriteString("| where | setting | need | without it | fix now | keep it |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, it := range Items() {
		where := "MySQL server"
		if it.Target == KindProxySQLAdmin {
			where = "ProxySQL admin"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", where, mdCell(it.What), it.Need, mdCell(it.Why), mdCode(it.Fix), mdCode(it.Config))
	}
	return b.String()
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

func mdCode(s string) string {
	if s == "" || strings.HasPrefix(s, "(") {
		return mdCell(s)
	}
	return "`" + mdCell(s) + "`"
}
