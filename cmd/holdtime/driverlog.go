package main

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"

	"github.com/holdtime/holdtime/internal/termtext"
)

// driverLog is go-sql-driver/mysql's logger in the holdtime binary: what
// the driver logs (a connection that died under a read, a bad idle
// connection closed) is one holdtime line on standard error, its
// credentials redacted and its control characters escaped, instead of the
// driver's raw "[mysql] 2026/12/03 12:00:00 packets.go:58 unexpected EOF".
// main installs it: mysql.SetLogger is process-wide, so no library of
// holdtime calls it.
type driverLog struct {
	mu      sync.Mutex
	w       io.Writer
	secrets []string
}

// driverSource is the position the driver puts before its message.
var driverSource = regexp.MustCompile(`^[A-Za-z0-9_]+\.go:[0-9]+ ?$`)

func (l *driverLog) Print(v ...any) {
	where := ""
	if len(v) > 1 {
		if s, ok := v[0].(string); ok && driverSource.MatchString(s) {
			where, v = " ("+strings.TrimSpace(s)+")", v[1:]
		}
	}
	msg := strings.TrimSpace(fmt.Sprint(v...))
	line := termtext.Line(redact(msg, l.secrets))
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "holdtime: mysql driver: %s%s\n", line, where)
}
