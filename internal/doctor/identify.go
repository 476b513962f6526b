package doctor

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Kind is what answers at an address.
type Kind string

// The kinds Identify tells apart.
const (
	// KindMySQL is a MySQL or MariaDB server.
	KindMySQL Kind = "mysql"
	// KindProxySQLAdmin is ProxySQL's admin interface (6032 by default).
	KindProxySQLAdmin Kind = "proxysql-admin"
	// KindProxySQLClient is ProxySQL's client interface (6033 by default),
	// where apps connect.
	KindProxySQLClient Kind = "proxysql-client"
	// KindProxySQL is a ProxySQL interface that refused the login, so which
	// of the two it is cannot be told.
	KindProxySQL Kind = "proxysql"
	// KindNotMySQL is something that does not speak the MySQL protocol.
	KindNotMySQL Kind = "not-mysql"
	// KindUnreachable is an address where nothing could be reached.
	KindUnreachable Kind = "unreachable"
)

// Endpoint is what Identify found.
type Endpoint struct {
	Kind Kind
	// Version is what the server said it is: the greeting's version, or
	// ProxySQL's own version from its admin interface.
	Version string
	// Flavor is "mariadb" or "mysql" for KindMySQL.
	Flavor string
	// LoginRefused is set when the server answered but refused the
	// account; Kind then comes from the greeting and the error alone.
	LoginRefused bool
	// Silent is set for KindNotMySQL when the port accepted the connection
	// and sent nothing within IdentifyTimeout: not MySQL, or a MySQL server
	// too loaded to greet in time. A daemon warns rather than refuses.
	Silent bool
	// Detail says in a few words what was seen, for messages: never a
	// credential.
	Detail string
}

// Describe names the endpoint for a person: "ProxySQL's admin interface
// (2.7.1)", "a MariaDB server (10.11.19-MariaDB)".
func (e Endpoint) Describe() string {
	v := ""
	if e.Version != "" {
		v = " (" + e.Version + ")"
	}
	switch e.Kind {
	case KindMySQL:
		if e.Flavor == "mariadb" {
			return "a MariaDB server" + v
		}
		return "a MySQL server" + v
	case KindProxySQLAdmin:
		return "ProxySQL's admin interface" + v
	case KindProxySQLClient:
		return "ProxySQL's client interface (the port apps connect to)"
	case KindProxySQL:
		return "a ProxySQL interface that refused the login (its admin or its client port)"
	case KindNotMySQL:
		return "something that is not a MySQL-protocol server (" + e.Detail + ")"
	default:
		return "nothing reachable (" + e.Detail + ")"
	}
}

// IdentifyTimeout bounds Identify (or the context's earlier deadline):
// a wrong endpoint must be named at once, not after a driver's long timeout.
const IdentifyTimeout = 2 * time.Second

// A MySQL-protocol server greets as soon as it accepts (under a millisecond
// here for MariaDB and both ProxySQL interfaces), while HTTP, Redis and most
// others wait for the client: a port silent for the whole IdentifyTimeout is
// called not MySQL. Not less: twice in some 40 tries under a fully loaded
// CI machine ProxySQL's client interface greeted after more than 700 ms.

// versionCommentQuery is answered by ProxySQL itself on both interfaces,
// with "(ProxySQL Admin Module)" on the admin one and "(ProxySQL)" on the
// client one (measured on 2.7.1): the mysql command-line client sends
// exactly this text at login, which is why ProxySQL intercepts it. A MySQL
// or MariaDB server answers with its build's comment.
const versionCommentQuery = "select @@version_comment limit 1"

// Identify says what answers at cfg's address: a MySQL or MariaDB server,
// ProxySQL's admin or client interface, or something that is not MySQL at
// all. It reads the server's greeting itself, so a port that never greets
// (an HTTP server, Redis) is named within IdentifyTimeout instead of after
// the driver's read timeout, then logs in and asks one question.
//
// The error is non-nil only when nothing could be told (the address does not
// resolve or refuses connections); the Endpoint then has KindUnreachable.
// A refused login is not an error: the Endpoint says what refused it.
func Identify(ctx context.Context, cfg *mysql.Config) (Endpoint, error) {
	// The earlier of the caller's deadline and IdentifyTimeout.
	ctx, cancel := context.WithTimeout(ctx, IdentifyTimeout)
	defer cancel()
	g, err := readGreeting(ctx, cfg.Net, cfg.Addr)
	if err != nil {
		var nm *notMySQLError
		if errors.As(err, &nm) {
			return Endpoint{Kind: KindNotMySQL, Silent: nm.silent, Detail: nm.what}, nil
		}
		return Endpoint{Kind: KindUnreachable, Detail: err.Error()}, err
	}
	ep := Endpoint{Kind: KindMySQL, Version: g.version}
	if strings.Contains(strings.ToLower(g.version), "mariadb") {
		ep.Flavor = "mariadb"
		// MariaDB prefixes "5.5.5-" for clients that parse the major version.
		ep.Version = strings.TrimPrefix(g.version, "5.5.5-")
	}
	if g.errCode != 0 {
		// The server refused before any login: "Host is blocked", "Too
		// many connections". Only MySQL-protocol servers send this.
		ep.LoginRefused = true
		ep.Detail = fmt.Sprintf("the server refused the connection before the login: error %d", g.errCode)
		return ep, nil
	}

	c := cfg.Clone()
	c.Timeout = remaining(ctx)
	c.ReadTimeout, c.WriteTimeout = c.Timeout, c.Timeout
	c.DBName = "" // a database that does not exist is not what is asked here
	connector, err := mysql.NewConnector(c)
	if err != nil {
		return Endpoint{Kind: KindUnreachable, Detail: "invalid DSN"}, err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	var comment string
	err = db.QueryRowContext(ctx, versionCommentQuery).Scan(&comment)
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && strings.HasPrefix(me.Message, "ProxySQL"):
		// ProxySQL prefixes its own errors ("ProxySQL Error: Access denied
		// for user ..."): the greeting looks like a MySQL 8.0.11.
		ep = Endpoint{Kind: KindProxySQL, LoginRefused: true, Detail: fmt.Sprintf("login refused: error %d", me.Number)}
		return ep, nil
	case errors.As(err, &me):
		ep.LoginRefused = true
		ep.Detail = fmt.Sprintf("login refused: error %d", me.Number)
		if ep.Flavor == "" && g.version == proxySQLDefaultGreeting {
			// ProxySQL's default greeting; a MySQL 8.0.11 is rare. Say both.
			ep.Detail += "; the greeting (" + g.version + ") is ProxySQL's default, so this may be a ProxySQL interface"
		}
		return ep, nil
	case err != nil:
		return Endpoint{Kind: KindUnreachable, Detail: "no answer after the greeting"}, err
	}
	switch {
	case comment == "(ProxySQL Admin Module)":
		ep = Endpoint{Kind: KindProxySQLAdmin}
		var v string
		if db.QueryRowContext(ctx, "select version()").Scan(&v) == nil {
			ep.Version = v
		}
	case comment == "(ProxySQL)":
		ep = Endpoint{Kind: KindProxySQLClient}
	default:
		if ep.Flavor == "" {
			ep.Flavor = "mysql"
			if strings.Contains(strings.ToLower(comment), "mariadb") {
				ep.Flavor = "mariadb"
			}
		}
	}
	return ep, nil
}

// proxySQLDefaultGreeting is the server version ProxySQL 2.x greets with
// unless mysql-server_version says otherwise.
const proxySQLDefaultGreeting = "8.0.11"

func remaining(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return IdentifyTimeout
	}
	if r := time.Until(d); r > 10*time.Millisecond {
		return r
	}
	return 10 * time.Millisecond
}

type greeting struct {
	version string
	errCode uint16
}

type notMySQLError struct {
	what   string
	silent bool
}

func (e *notMySQLError) Error() string { return e.what }

// readGreeting dials addr and reads the MySQL protocol's first packet: a
// 3-byte length, a sequence number 0, then protocol version 10 and a
// NUL-terminated server version, or an error packet (0xff).
func readGreeting(ctx context.Context, network, addr string) (greeting, error) {
	if network == "" {
		network = "tcp"
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return greeting{}, fmt.Errorf("no TCP connection to %s within %v", addr, remaining(ctx))
		}
		return greeting{}, err
	}
	defer conn.Close()
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(IdentifyTimeout)
	}
	waited := time.Until(dl).Round(100 * time.Millisecond)
	_ = conn.SetReadDeadline(dl)
	buf := make([]byte, 256)
	n, err := io.ReadAtLeast(conn, buf, 5)
	if err != nil {
		if n == 0 {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return greeting{}, &notMySQLError{silent: true, what: fmt.Sprintf("it accepted the connection but sent no MySQL greeting within %v: a MySQL-protocol server speaks first; an HTTP or Redis port waits for the client", waited)}
			}
			return greeting{}, &notMySQLError{what: "it closed the connection without a MySQL greeting"}
		}
		return greeting{}, &notMySQLError{what: "it sent " + printable(buf[:n]) + " and no MySQL greeting"}
	}
	buf = buf[:n]
	payload := buf[4:]
	switch {
	case buf[3] != 0:
		return greeting{}, &notMySQLError{what: "it sent " + printable(buf) + ", not a MySQL greeting"}
	case payload[0] == 0xff && len(payload) >= 3:
		return greeting{errCode: uint16(payload[1]) | uint16(payload[2])<<8}, nil
	case payload[0] == 10:
		v, _, ok := bytes.Cut(payload[1:], []byte{0})
		if !ok {
			// The version may be longer than what was read; keep what there is.
			v = payload[1:]
		}
		return greeting{version: string(clean(v, 64))}, nil
	}
	return greeting{}, &notMySQLError{what: "it sent " + printable(buf) + ", not a MySQL greeting"}
}

// printable quotes the first bytes of what a server sent, safe to show.
func printable(b []byte) string { return fmt.Sprintf("%q", clean(b, 24)) }

// clean keeps at most n bytes, printable ASCII only: other bytes become '.',
// so nothing a server sends can reach a terminal as a control sequence.
func clean(b []byte, n int) []byte {
	if len(b) > n {
		b = b[:n]
	}
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '.'
		}
		out[i] = c
	}
	return out
}
