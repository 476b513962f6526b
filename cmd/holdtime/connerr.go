package main

import (
	"fmt"
	"time"

	"github.com/holdtime/holdtime/collector"
)

// explainFailure turns a failure to reach a source into one line that
// names the kind of source and its address, says what happened, and what
// to check for that failure only: a refused connection is not a password
// problem, and a MySQL server has no admin port. detail is the driver's
// message, already free of credentials.
func explainFailure(t localTarget, f collector.Failure, detail string, timeout time.Duration) string {
	what, defaultPort := "MySQL server", "3306"
	switch t.kind {
	case "proxysql":
		what, defaultPort = "ProxySQL admin interface", "6032"
	case "flashsale":
		what = "server"
	}
	where := what
	if t.addr != "" {
		where = fmt.Sprintf("%s at %s", what, t.addr)
	}
	var msg string
	switch f {
	case collector.FailureRefused:
		msg = fmt.Sprintf("%s refused the connection: nothing listens there; check the host and port", where)
		if t.kind == "proxysql" {
			msg += " (ProxySQL's admin interface listens on " + defaultPort + " by default; 6033 is the app port)"
		} else if t.kind == "mysql" {
			msg += " (MySQL listens on " + defaultPort + " by default)"
		}
	case collector.FailureUnknownHost:
		msg = fmt.Sprintf("%s: the host name does not resolve; check its spelling and DNS", where)
	case collector.FailureNoSocket:
		msg = fmt.Sprintf("%s: no socket at that path; check the path and that the server runs", where)
	case collector.FailureTimeout:
		msg = fmt.Sprintf("%s did not answer within %v; check the address and any firewall, or raise --timeout for a slow link", where, timeout)
	case collector.FailureNotMySQL, collector.FailureClosed:
		msg = fmt.Sprintf("%s did not answer as a MySQL server does; check the port is a MySQL protocol port", where)
		if t.kind == "proxysql" {
			msg += " (ProxySQL's admin interface, " + defaultPort + " by default)"
		}
	case collector.FailureAccessDenied:
		msg = fmt.Sprintf("%s refused the login; check the user and password", where)
		if t.kind == "proxysql" {
			msg += " (admin-admin_credentials or admin-stats_credentials; the admin user logs in from localhost only)"
		}
	case collector.FailureUnknownDB:
		if t.kind == "flashsale" {
			msg = fmt.Sprintf("%s: the database the DSN names does not exist; create it (CREATE DATABASE) or name one that exists", where)
		} else {
			msg = fmt.Sprintf("%s: the database the DSN names does not exist; end the DSN with / (no database is needed) or name one that exists", where)
		}
	case collector.FailurePrivilege:
		msg = fmt.Sprintf("%s: the account lacks a privilege", where)
		switch t.kind {
		case "mysql":
			msg += "; grant it PROCESS and SELECT on performance_schema"
		case "proxysql":
			msg += "; use an admin or stats user of ProxySQL"
		case "flashsale":
			msg += "; it needs CREATE, SELECT, INSERT, UPDATE and DELETE on the database"
		}
	default:
		msg = fmt.Sprintf("%s failed", where)
	}
	if detail != "" {
		msg += " (" + detail + ")"
	}
	return msg
}
