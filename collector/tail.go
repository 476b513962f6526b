package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
)

// maxEventLine bounds a partial line kept between reads; longer lines are
// counted as malformed and skipped, as EventsReader does.
const maxEventLine = 16 << 20

// tailer follows ProxySQL's JSON events log as it grows. ProxySQL writes to
// PATH.00000001 and moves to the next number when the file reaches
// mysql-eventslog_filesize (or on PROXYSQL FLUSH LOGS); an operator may also
// rotate by rename or truncate. The tailer starts at the end of the newest
// file (history is `holdtime analyze`'s job), moves to a newer file once it
// has read the current one to its end, and starts over when a file shrinks.
// New lines are found by polling: ProxySQL gives no signal, and inotify
// would not see a log on a network file system.
type tailer struct {
	path     string
	poll     time.Duration
	sink     storeSink // the events log source of the target
	log      *slog.Logger
	target   string
	sessions *proxysqlSessions

	f       *os.File
	name    string
	off     int64
	partial []byte
	skip    bool // dropping the rest of an over-long line
	buf     []byte
	bad     int
	// check parses lines and keeps the log's own clock, started at the
	// collector's: a followed log is being written now.
	check   *attrib.LineChecker
	lastBad time.Time // when a malformed line was last logged
	// removed is the file that disappeared while followed, until the path
	// has a file again: the source is down, saying so.
	removed string
	// started is set once a read succeeded: the first starts at the end.
	started bool
}

// newestEventsLog returns the file ProxySQL is writing: the highest
// numbered PATH.NNNNNNNN, or PATH itself when there is none.
func newestEventsLog(path string) (string, error) {
	matches, _ := filepath.Glob(path + ".*")
	var numbered []string
	for _, m := range matches {
		suffix := m[len(path)+1:]
		if suffix != "" && isDigits(suffix) {
			numbered = append(numbered, m)
		}
	}
	if len(numbered) > 0 {
		sort.Slice(numbered, func(i, j int) bool {
			a, b := numbered[i][len(path)+1:], numbered[j][len(path)+1:]
			if len(a) != len(b) {
				return len(a) < len(b)
			}
			return a < b
		})
		return numbered[len(numbered)-1], nil
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("events log %s: %w: check mysql-eventslog_filename and that this user can read the directory", filepath.Base(path), err)
	}
	return path, nil
}

// numberedBefore reports whether a and b are both numbered files of path
// and a comes before b.
func numberedBefore(path, a, b string) bool {
	sa, oka := strings.CutPrefix(a, path+".")
	sb, okb := strings.CutPrefix(b, path+".")
	if !oka || !okb || !isDigits(sa) || !isDigits(sb) || sa == "" || sb == "" {
		return false
	}
	if len(sa) != len(sb) {
		return len(sa) < len(sb)
	}
	return sa < sb
}

// removedError says that the followed file is gone.
func (t *tailer) removedError() error {
	return fmt.Errorf("events log %s was removed: its figures are stale until a new one appears "+
		"(ProxySQL keeps writing to the removed file until PROXYSQL FLUSH LOGS or a restart); the path is still watched",
		filepath.Base(t.removed))
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// polled is the events log as a polled source: a file error carries no
// credentials and is no network failure (FailureOther), and the file is
// closed when the runner stops.
func (t *tailer) polled() polled {
	return polled{target: t.target, source: SourceProxySQLEvents, interval: t.poll, poll: t.pollOnce,
		failure: func(error) Failure { return FailureOther }, stop: t.closeFile}
}

// pollOnce reads what is new; the first successful read starts at the
// end of the file, later ones (and every new file) at their start.
func (t *tailer) pollOnce(context.Context) error {
	if t.buf == nil {
		t.buf = make([]byte, 256<<10)
	}
	if err := t.step(!t.started); err != nil {
		t.closeFile()
		return err
	}
	t.started = true
	return nil
}

// step reads everything new, following rotation and truncation.
func (t *tailer) step(first bool) error {
	for {
		if t.f == nil {
			name, err := newestEventsLog(t.path)
			if t.removed != "" && (err != nil || numberedBefore(t.path, name, t.removed)) {
				// Still gone; an older rotated file was read already.
				return t.removedError()
			}
			if err != nil {
				return err
			}
			t.removed = ""
			if err := t.open(name, first); err != nil {
				return err
			}
		}
		if err := t.readToEOF(); err != nil {
			return err
		}
		t.sessions.flushEvents()
		switched, err := t.checkRotation()
		if err != nil || !switched {
			return err
		}
		first = false // a new file is read from its start
	}
}

func (t *tailer) open(name string, atEnd bool) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("open events log: %w: check that this user can read it", err)
	}
	t.f, t.name, t.off, t.partial, t.skip = f, name, 0, t.partial[:0], false
	if atEnd {
		off, err := f.Seek(0, io.SeekEnd)
		if err != nil {
			f.Close()
			t.f = nil
			return fmt.Errorf("seek events log: %w", err)
		}
		t.off = off
		if off > 0 {
			// Start at the next whole line unless the file ends with one.
			var last [1]byte
			if _, err := f.ReadAt(last[:], off-1); err == nil && last[0] != '\n' {
				t.skip = true
			}
		}
	}
	return nil
}

func (t *tailer) closeFile() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
}

// checkRotation reports whether the tailer moved to another file: a newer
// numbered file, or a new file under the same name. A file that shrank was
// truncated: it is read again from its start.
func (t *tailer) checkRotation() (bool, error) {
	newest, err := newestEventsLog(t.path)
	if err == nil && newest != t.name && !numberedBefore(t.path, newest, t.name) {
		t.closeFile()
		return true, t.open(newest, false)
	}
	cur, err := t.f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat events log: %w", err)
	}
	byName, err := os.Stat(t.name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Read to its end already; what ProxySQL may still write to the
		// removed file is out of reach.
		t.removed = t.name
		t.closeFile()
		return false, t.removedError()
	case err == nil && !os.SameFile(cur, byName):
		t.closeFile()
		return true, t.open(t.name, false)
	}
	if cur.Size() < t.off {
		if _, err := t.f.Seek(0, io.SeekStart); err != nil {
			return false, fmt.Errorf("seek events log: %w", err)
		}
		t.off, t.partial, t.skip = 0, t.partial[:0], false
		return true, nil
	}
	return false, nil
}

// readToEOF feeds every complete new line to the session state machine.
func (t *tailer) readToEOF() error {
	for {
		n, err := t.f.Read(t.buf)
		if n > 0 {
			t.off += int64(n)
			t.feed(t.buf[:n])
		}
		if errors.Is(err, io.EOF) || n == 0 && err == nil {
			t.sink.Malformed(t.bad)
			t.bad = 0
			return nil
		}
		if err != nil {
			return fmt.Errorf("read events log: %w", err)
		}
	}
}

func (t *tailer) feed(b []byte) {
	t.sessions.addEvents(func(add func(*attrib.Event)) { t.feedLocked(b, add) })
}

func (t *tailer) feedLocked(b []byte, add func(*attrib.Event)) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if t.skip {
				return
			}
			if len(t.partial)+len(b) > maxEventLine {
				t.malformed(fmt.Sprintf("line longer than %d bytes", maxEventLine))
				t.skip, t.partial = true, t.partial[:0]
				return
			}
			t.partial = append(t.partial, b...)
			return
		}
		line := b[:i]
		b = b[i+1:]
		if t.skip {
			t.skip = false
			continue
		}
		if len(t.partial) > 0 {
			t.partial = append(t.partial, line...)
			line = t.partial
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if t.check == nil {
				t.check = attrib.NewLineChecker(time.Now().UnixMicro())
			}
			t.check.Check(line, filepath.Base(t.name), add, t.malformed)
		}
		t.partial = t.partial[:0]
	}
}

// malformed counts a skipped line and logs a sample of why, at most once a
// minute: the count is in holdtime_collector_malformed_rows_total.
func (t *tailer) malformed(reason string) {
	t.bad++
	if now := time.Now(); now.Sub(t.lastBad) >= time.Minute {
		t.lastBad = now
		t.log.Warn("events log line skipped", "target", t.target, "file", filepath.Base(t.name), "reason", reason)
	}
}
