package conntag

import (
	"net"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
)

// The OpenTelemetry semantic conventions' names of the address a client
// dialled. On hold spans they tell holdtime's collector which ProxySQL a
// session id belongs to: session ids are small per-instance integers, so
// two ProxySQLs reuse them.
const (
	attrServerAddress = attribute.Key("server.address")
	attrServerPort    = attribute.Key("server.port")
)

// defaultMySQLPort is go-sql-driver/mysql's port when a DSN's tcp address
// has none.
const defaultMySQLPort = 3306

// WithServerAddress puts server.address and server.port (host:port, the
// address the pool dials, a ProxySQL's client interface when there is one)
// on every hold span. Open reads it from a go-sql-driver/mysql DSN's
// tcp(host:port); OpenDB cannot see a connector's address, so give it here.
// holdtime's collector reads a span's session id only for the target at
// that address (its ProxySQL target's ClientAddress).
func WithServerAddress(hostport string) Option {
	return func(c *config) {
		if host, port, ok := splitServerAddress(hostport); ok {
			c.serverAddr = []attribute.KeyValue{attrServerAddress.String(host), attrServerPort.Int(port)}
		}
	}
}

func splitServerAddress(hostport string) (string, int, bool) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		if hostport == "" || strings.ContainsAny(hostport, "/[]") {
			return "", 0, false
		}
		return hostport, defaultMySQLPort, true // "host" alone: the driver's default port
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 || host == "" {
		return "", 0, false
	}
	return host, port, true
}

// dsnServerAddress reads tcp(host:port) from a go-sql-driver/mysql DSN,
// [user[:password]@][net[(addr)]]/dbname[?params], as the driver does: the
// address is between the last '@' and the last '/' (a password may hold
// either). "" for a unix socket or a DSN of another form.
func dsnServerAddress(dsn string) string {
	slash := strings.LastIndexByte(dsn, '/')
	if slash < 0 {
		return ""
	}
	netAddr := dsn[:slash]
	if at := strings.LastIndexByte(netAddr, '@'); at >= 0 {
		netAddr = netAddr[at+1:]
	}
	addr, ok := strings.CutPrefix(netAddr, "tcp(")
	if !ok || !strings.HasSuffix(addr, ")") {
		return ""
	}
	return strings.TrimSuffix(addr, ")")
}
