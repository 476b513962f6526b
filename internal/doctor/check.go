package doctor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// Status is the outcome of one item's check.
type Status string

const (
	StatusOK      Status = "ok"
	StatusMissing Status = "missing"
	// StatusUnknown: the account cannot check it, or an item it depends on
	// is missing; Reason says which.
	StatusUnknown Status = "unknown"
)

// Result is one item checked on one target.
type Result struct {
	ID     string `json:"id"`
	What   string `json:"what"`
	Need   Need   `json:"need"`
	Status Status `json:"status"`
	// Got is the value found ("OFF", "0"), when there is one.
	Got string `json:"got,omitempty"`
	// Reason says why a status is unknown.
	Reason string `json:"reason,omitempty"`
	// Why, Fix and Config repeat the item's, for a missing one.
	Why    string `json:"why,omitempty"`
	Fix    string `json:"fix,omitempty"`
	Config string `json:"config,omitempty"`
}

// Check runs every item of the setup list that applies to kind (KindMySQL
// or KindProxySQLAdmin) on db, in the list's order. An item whose
// prerequisite is missing (performance_schema, the grant to read it) is
// unknown, naming the prerequisite, rather than a second error.
func Check(ctx context.Context, db *sql.DB, kind Kind) []Result {
	var out []Result
	blocked := map[string]string{} // item ID -> the missing prerequisite
	for _, it := range Items() {
		if it.Target != kind {
			continue
		}
		r := Result{ID: it.ID, What: it.What, Need: it.Need}
		if p := prerequisiteMissing(it.ID, blocked); p != "" {
			r.Status, r.Reason = StatusUnknown, "needs "+p+" first"
			out = append(out, r)
			continue
		}
		got, ok, err := it.check(ctx, db)
		r.Got = got
		switch {
		case err == nil && ok:
			r.Status = StatusOK
		case err == nil:
			r.Status = StatusMissing
		case errors.Is(err, errUnknown):
			r.Status, r.Reason = StatusUnknown, strings.TrimPrefix(err.Error(), errUnknown.Error()+": ")
			if evidence := fallback(ctx, db, it.ID); evidence != "" {
				r.Status, r.Reason = StatusOK, evidence
			}
		case errors.Is(err, sql.ErrNoRows):
			r.Status, r.Reason = StatusUnknown, "the server has no such setting (is this the right kind of server and version?)"
		default:
			r.Status, r.Reason = StatusUnknown, "the check failed: "+oneLine(err)
		}
		if r.Status != StatusOK {
			r.Why, r.Fix, r.Config = it.Why, it.Fix, it.Config
			if r.Status == StatusMissing {
				blocked[it.ID] = it.What
			}
		}
		out = append(out, r)
	}
	return out
}

// prerequisiteMissing names the missing item that makes id uncheckable.
func prerequisiteMissing(id string, blocked map[string]string) string {
	if !strings.HasPrefix(id, "mysql.") || id == "mysql.grant.process" {
		return ""
	}
	for _, p := range []string{"mysql.performance_schema", "mysql.grant.performance_schema"} {
		if what, ok := blocked[p]; ok && id != p {
			return what
		}
	}
	return ""
}

// fallback looks for what an account that cannot read a setting can still
// see: a session's extended_info is only filled with
// mysql-show_processlist_extended on.
func fallback(ctx context.Context, db *sql.DB, id string) string {
	if id != "proxysql.show_processlist_extended" {
		return ""
	}
	var n int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM stats_mysql_processlist WHERE extended_info LIKE '%\"backends\"%'").Scan(&n)
	if err != nil || n == 0 {
		return ""
	}
	return fmt.Sprintf("this account cannot read the variable, but %d session(s) show extended_info with their backends, as it does when on", n)
}

func oneLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// WrongEndpoint says, for a target given as want (KindMySQL for --mysql,
// KindProxySQLAdmin for --proxysql), what is wrong with what answers there
// and what to give instead; "" when it is the right kind, or when a refused
// login leaves the kind open (the login error itself is then the message).
func WrongEndpoint(want Kind, ep Endpoint, flag string) string {
	if ep.Kind == want {
		return ""
	}
	found := "this is " + ep.Describe()
	switch {
	case ep.Kind == KindNotMySQL:
		return found + ": give --" + flag + " the address of " + wantName(want)
	case ep.Kind == KindUnreachable:
		return ""
	case want == KindProxySQLAdmin && ep.Kind == KindProxySQLClient:
		return found + ", not its admin interface: give --proxysql the admin port (6032 by default) with an " +
			"admin-stats_credentials or admin-admin_credentials account"
	case want == KindProxySQLAdmin && ep.Kind == KindProxySQL:
		return "" // refused login: the admin or the client port; the login message says which account to use
	case want == KindProxySQLAdmin && ep.Kind == KindMySQL && !ep.LoginRefused:
		return found + ", not ProxySQL's admin interface: give it as --mysql, and ProxySQL's admin port (6032 by default) as --proxysql"
	case want == KindMySQL && ep.Kind == KindProxySQLAdmin:
		return found + ", not a MySQL server: give it as --proxysql, and the MySQL server behind ProxySQL as --mysql"
	case want == KindMySQL && ep.Kind == KindProxySQLClient:
		return found + ": the collector needs the MySQL server itself (it reads performance_schema, which ProxySQL does not " +
			"forward per session): give --mysql the server's address behind ProxySQL"
	case want == KindMySQL && ep.Kind == KindProxySQL:
		return found + ": --mysql takes the MySQL server itself, not a ProxySQL port"
	}
	return ""
}

func wantName(k Kind) string {
	if k == KindProxySQLAdmin {
		return "ProxySQL's admin interface (6032 by default)"
	}
	return "a MySQL or MariaDB server (3306 by default)"
}
