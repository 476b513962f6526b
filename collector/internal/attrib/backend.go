package attrib

import (
	"strconv"
	"strings"
)

// BackendKey names a ProxySQL session's backend connection: the server's
// thread id (0 when extended_info is off) and the local address ProxySQL
// connected from ("" when not shown).
type BackendKey struct {
	Thread int64
	Local  HostPort
}

// HostPort is an address as host and port: kept apart so that a row's
// address needs no string built per sample.
type HostPort struct {
	Host string
	Port int64
}

// ParseHostPort reads the processlist's HOST column, "host:port" for a
// TCP client; the zero value otherwise.
func ParseHostPort(s string) HostPort {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return HostPort{}
	}
	port, err := strconv.ParseInt(s[i+1:], 10, 64)
	if err != nil {
		return HostPort{}
	}
	return HostPort{s[:i], port}
}

// Valid reports whether the key names a backend at all.
func (k BackendKey) Valid() bool { return k.Thread != 0 || k.Local != (HostPort{}) }
