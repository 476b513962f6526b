package conntag

import (
	"context"
	"database/sql/driver"
	"net/url"
	"strconv"
	"strings"
)

// A statement is one packet's payload: its command byte and its text. The
// driver refuses a packet over its limit (go-sql-driver/mysql's
// maxAllowedPacket: 64 MiB unless the DSN says otherwise; with 0, the
// server's max_allowed_packet less one), and the server one over its
// max_allowed_packet. The tag's comment adds about 30 bytes, so a
// statement just under a limit would fail only because it was tagged: such
// a statement is sent untagged instead, and counted
// (holdtime.client.untagged_oversize).

// minPacketLimit is the smallest max_allowed_packet a MySQL or MariaDB
// server accepts: statements shorter than this fit whatever the limits, and
// cost nothing to check.
const minPacketLimit = 1024

// defaultClientPacketLimit is go-sql-driver/mysql's default maxAllowedPacket.
const defaultClientPacketLimit = 64 << 20

// packetLimitQuery asks the server's limit. SHOW, not SELECT @@…: ProxySQL
// stops multiplexing a session whose statement text contains '@'.
const packetLimitQuery = "SHOW VARIABLES LIKE 'max_allowed_packet'"

// clientPacketLimit reads maxAllowedPacket from a go-sql-driver/mysql DSN
// ("user:pass@tcp(host)/db?maxAllowedPacket=N"): the driver's default when
// absent, 0 when the driver takes the server's.
func clientPacketLimit(dsn string) int64 {
	q := strings.LastIndexByte(dsn, '?')
	if q < 0 || strings.LastIndexByte(dsn, '/') > q {
		return defaultClientPacketLimit
	}
	for _, kv := range strings.Split(dsn[q+1:], "&") {
		k, v, _ := strings.Cut(kv, "=")
		if k != "maxAllowedPacket" {
			continue
		}
		if u, err := url.QueryUnescape(v); err == nil {
			v = u
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return defaultClientPacketLimit // the driver refuses the DSN itself
		}
		return n
	}
	return defaultClientPacketLimit
}

// tooLarge reports, and counts, a statement whose tag would take it over
// a packet limit.
func (in *instr) tooLarge(ctx context.Context, c *conn, query, sent string) bool {
	if !in.checkPackets || len(sent) < minPacketLimit-1 || len(sent) == len(query) || in.fits(ctx, c, sent) {
		return false
	}
	in.oversize.Add(1)
	return true
}

// fits reports whether sent, as one statement packet, is within the
// driver's and the server's limits. The server's is asked once per pool, at
// the first statement long enough for it to matter, on the connection about
// to send it; when it cannot be learnt only the driver's counts.
func (in *instr) fits(ctx context.Context, c *conn, sent string) bool {
	size := int64(len(sent)) + 1
	if lim := in.clientPacket; lim > 0 && size > lim {
		return false
	}
	srv := in.serverPacket.Load()
	if srv == 0 {
		srv = serverPacketLimit(ctx, c.inner)
		if srv > 0 || ctx.Err() == nil { // a cancelled ask is asked again
			in.serverPacket.Store(srv)
		}
	}
	// The driver, taking the server's limit, keeps one byte under it; so
	// does this check.
	return srv < 0 || size < srv
}

// serverPacketLimit asks the server for max_allowed_packet, or returns -1.
func serverPacketLimit(ctx context.Context, ci driver.Conn) int64 {
	qc, ok := ci.(driver.QueryerContext)
	if !ok {
		return -1
	}
	rows, err := qc.QueryContext(ctx, packetLimitQuery, nil)
	if err != nil {
		return -1
	}
	defer rows.Close()
	if len(rows.Columns()) != 2 {
		return -1
	}
	dest := make([]driver.Value, 2)
	if err := rows.Next(dest); err != nil {
		return -1
	}
	var s string
	switch v := dest[1].(type) {
	case []byte:
		s = string(v)
	case string:
		s = v
	case int64:
		return v
	default:
		return -1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return -1
	}
	return n
}
