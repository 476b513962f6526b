package attrib

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
	"unicode/utf8"
)

// EventType is the kind of a ProxySQL events log entry.
type EventType uint8

// The event types holdtime tells apart. ProxySQL writes the protocol command
// name in the "event" field.
const (
	EventOther       EventType = iota // any other command
	EventQuery                        // COM_QUERY: a text-protocol statement
	EventStmtPrepare                  // COM_STMT_PREPARE
	EventStmtExecute                  // COM_STMT_EXECUTE
)

func (t EventType) String() string {
	switch t {
	case EventQuery:
		return "COM_QUERY"
	case EventStmtPrepare:
		return "COM_STMT_PREPARE"
	case EventStmtExecute:
		return "COM_STMT_EXECUTE"
	}
	return "other"
}

// Event is one line of ProxySQL's JSON events log (mysql-eventslog_format=2).
// Byte-slice fields alias the reader's buffers: they are valid until the next
// call to Next, which is what keeps reading allocation-free. Copy what you
// keep.
type Event struct {
	Type      EventType
	ThreadID  uint64 // ProxySQL's SessionID of the client session
	StartUS   int64  // starttime_timestamp_us: Unix microseconds
	EndUS     int64  // endtime_timestamp_us
	Duration  int64  // duration_us
	Hostgroup int    // hostgroup_id; -1 when ProxySQL answered without a backend
	Query     []byte // the statement text as the client sent it, comments included
	Client    []byte // client address, host:port
	Username  []byte
	Schema    []byte
	Server    []byte // backend host:port; empty when no backend was used
	Digest    []byte
	RowsSent  int64
	// RowsAffected is -1 when the line has no rows_affected field.
	RowsAffected int64
	// ClientStmtID is the prepared statement id, -1 for text-protocol events.
	ClientStmtID int64
}

// LineRef points at one skipped input line.
type LineRef struct {
	File   string
	Line   int64
	Reason string
}

func (l LineRef) String() string { return fmt.Sprintf("%s:%d: %s", l.File, l.Line, l.Reason) }

// ReadStats says what a reader consumed and what it skipped.
type ReadStats struct {
	Files     int   // files opened
	Lines     int64 // lines read, malformed ones included
	Events    int64 // lines that parsed into an Event
	Malformed int64 // lines skipped because they are not a valid event
	// MalformedLines keeps the first EventsLogConfig.MaxMalformedLines of
	// them, so a summary can point at the bad input without holding it all.
	MalformedLines []LineRef
	// Warnings are problems that did not stop reading, such as a gzip file
	// cut short: what was read before it is still used.
	Warnings []string
}

// EventsLogConfig configures an EventsReader. The zero value is the default.
type EventsLogConfig struct {
	// MaxMalformedLines is how many malformed line numbers to keep.
	// Default 20.
	MaxMalformedLines int
	// MaxLineBytes is the longest line accepted; longer lines are counted
	// as malformed and skipped. Default 16 MiB.
	MaxLineBytes int
}

func (c EventsLogConfig) withDefaults() EventsLogConfig {
	if c.MaxMalformedLines == 0 {
		c.MaxMalformedLines = 20
	}
	if c.MaxLineBytes == 0 {
		c.MaxLineBytes = 16 << 20
	}
	return c
}

// ErrTruncated marks a compressed input that ended in the middle of its
// stream. The lines before the cut are still read.
var ErrTruncated = errors.New("compressed file is truncated")

// EventsReader streams events from one or more events log files, plain or
// gzip-compressed (detected by magic bytes, not by name). Memory stays
// bounded by the longest line, whatever the files' length.
type EventsReader struct {
	ctx   context.Context
	cfg   EventsLogConfig
	paths []string
	next  int // index in paths of the next file to open

	name      string
	file      io.Closer
	stopClose func() bool // stops closing file when ctx ends
	gz        *gzip.Reader
	br        *bufio.Reader
	lineNo    int64
	long      []byte // a line longer than br's buffer, assembled
	scratch   []byte // unescaped JSON strings
	parsed    Event  // the line just parsed
	ev        Event  // the event Next returned
	clock     eventClock
	dec       clockDecision // events the clock let through, to return in order
	nextDec   int
	flushed   bool
	stats     ReadStats
	err       error
}

// OpenEventsLog returns a reader over the events log files at paths, read in
// the order given (pass rotated files oldest first). Files are opened as the
// reader reaches them; ctx cancels a long read.
func OpenEventsLog(ctx context.Context, paths []string, cfg EventsLogConfig) *EventsReader {
	return &EventsReader{ctx: ctx, cfg: cfg.withDefaults(), paths: paths}
}

// NewEventsReader returns a reader over one already open stream, plain or
// gzip; name labels its lines in LineRef values.
func NewEventsReader(ctx context.Context, r io.Reader, name string, cfg EventsLogConfig) *EventsReader {
	er := &EventsReader{ctx: ctx, cfg: cfg.withDefaults()}
	if err := er.start(r, name); err != nil {
		er.err = err
	}
	return er
}

// Event returns the event read by the last successful call to Next.
func (r *EventsReader) Event() *Event { return &r.ev }

// Stats returns what has been read and skipped so far.
func (r *EventsReader) Stats() ReadStats { return r.stats }

// Err returns the error that stopped reading, if any. Malformed lines and
// truncated compressed files are not errors: see Stats.
func (r *EventsReader) Err() error { return r.err }

// Close releases the open file, if any.
func (r *EventsReader) Close() error {
	return r.closeCurrent()
}

func (r *EventsReader) closeCurrent() error {
	var err error
	if r.stopClose != nil {
		r.stopClose()
		r.stopClose = nil
	}
	if r.file != nil {
		err = r.file.Close()
		r.file = nil
	}
	r.br = nil
	r.gz = nil
	return err
}

// start begins reading r, unwrapping gzip when its magic bytes say so.
func (r *EventsReader) start(in io.Reader, name string) error {
	br := bufio.NewReaderSize(in, 256<<10)
	magic, _ := br.Peek(2)
	r.name = name
	r.lineNo = 0
	r.stats.Files++
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("read gzip header of %s: %w: check that the file is a complete gzip file", name, err)
		}
		r.gz = gz
		br = bufio.NewReaderSize(gz, 256<<10)
	}
	r.br = br
	return nil
}

func (r *EventsReader) openNext() (bool, error) {
	if r.next >= len(r.paths) {
		return false, nil
	}
	path := r.paths[r.next]
	r.next++
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("open events log: %w: check the path and that this user can read it", err)
	}
	// A read from a pipe or FIFO (holdtime analyze <(ssh host cat log))
	// blocks until the writer sends more, so checking ctx between reads is
	// not enough: closing the file ends a pending read (pipes are pollable).
	r.stopClose = context.AfterFunc(r.ctx, func() { f.Close() })
	r.file = f
	if err := r.start(f, path); err != nil {
		return false, err
	}
	return true, nil
}

// Next advances to the next valid event, skipping (and counting) malformed
// lines. It returns false at the end of all input or on an error.
//
// An event far from the log's own clock (see eventClock) is returned only
// once the event after it vouches for it, and is otherwise counted as
// malformed; every other event is returned as soon as it is read.
func (r *EventsReader) Next() bool {
	for {
		if r.nextDec < r.dec.nemit {
			r.ev = *r.dec.emit[r.nextDec]
			r.nextDec++
			r.stats.Events++
			return true
		}
		if r.err != nil {
			return false
		}
		if r.br == nil {
			ok, err := r.openNext()
			if err != nil {
				r.err = err
				return false
			}
			if !ok {
				if r.flushed {
					return false
				}
				r.flushed = true
				r.clock.flush(&r.dec)
				r.decided()
				continue
			}
		}
		line, err := r.readLine()
		if len(line) > 0 {
			r.lineNo++
			r.stats.Lines++
			if r.stats.Lines&0xFFFF == 0 {
				if cerr := r.ctx.Err(); cerr != nil {
					r.err = cerr
					return false
				}
			}
			if len(bytes.TrimSpace(line)) == 0 {
				// Blank lines are not events and not damage either.
			} else if perr := parseEvent(line, &r.parsed, &r.scratch); perr != nil {
				r.malformed(perr.Error())
			} else {
				r.clock.admit(&r.parsed, LineRef{File: r.name, Line: r.lineNo}, &r.dec)
				r.decided()
			}
		}
		if err != nil {
			// The events decided on stay valid: closing the file does
			// not touch the line buffer or the held copies.
			r.endOfFile(err)
		}
	}
}

// decided counts the events the clock rejected and starts returning the
// ones it let through.
func (r *EventsReader) decided() {
	r.nextDec = 0
	for _, ref := range r.dec.reject[:r.dec.nrej] {
		r.malformedRef(ref)
	}
}

// endOfFile handles the error that ended the current file: EOF moves on,
// a cut gzip stream becomes a warning, anything else stops the reader.
func (r *EventsReader) endOfFile(err error) {
	switch {
	case r.ctx.Err() != nil:
		// Interrupted (the file was closed under a pending read): what was
		// read stays; the reader stops with the context's error.
		r.err = r.ctx.Err()
	case errors.Is(err, io.EOF):
	case errors.Is(err, io.ErrUnexpectedEOF) && r.gz != nil:
		r.stats.Warnings = append(r.stats.Warnings, fmt.Sprintf(
			"%s: %v after %d lines: the lines read were analysed; copy the file again once ProxySQL has finished writing it",
			r.name, ErrTruncated, r.lineNo))
	case errors.Is(err, errLineTooLong):
		return
	default:
		r.err = fmt.Errorf("read %s at line %d: %w", r.name, r.lineNo, err)
	}
	if cerr := r.closeCurrent(); cerr != nil && r.err == nil {
		r.err = fmt.Errorf("close %s: %w", r.name, cerr)
	}
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline. A non-nil error comes
// with the last bytes of the file (possibly empty).
func (r *EventsReader) readLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == nil {
		return line[:len(line)-1], nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	r.long = append(r.long[:0], line...)
	for {
		line, err = r.br.ReadSlice('\n')
		if len(r.long)+len(line) > r.cfg.MaxLineBytes {
			// Drop the rest of the line without keeping it.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.br.ReadSlice('\n')
			}
			r.lineNo++
			r.stats.Lines++
			r.malformed(fmt.Sprintf("line longer than %d bytes", r.cfg.MaxLineBytes))
			r.long = r.long[:0]
			if err != nil {
				return nil, err
			}
			return nil, nil
		}
		r.long = append(r.long, line...)
		if err == nil {
			return r.long[:len(r.long)-1], nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return r.long, err
		}
	}
}

func (r *EventsReader) malformed(reason string) {
	r.malformedRef(LineRef{File: r.name, Line: r.lineNo, Reason: reason})
}

func (r *EventsReader) malformedRef(ref LineRef) {
	r.stats.Malformed++
	if len(r.stats.MalformedLines) < r.cfg.MaxMalformedLines {
		r.stats.MalformedLines = append(r.stats.MalformedLines, ref)
	}
}

// Field presence bits, to reject lines that lack what attribution needs.
const (
	hasThread = 1 << iota
	hasStart
	hasEnd
	hasEvent
	hasDuration
	hasAll = hasThread | hasStart | hasEnd | hasEvent
)

// parseEvent decodes one JSON object into ev. It is a scanner for the flat
// objects ProxySQL writes rather than encoding/json: the reader must keep up
// with a busy proxy on one core, and it needs only a dozen fields.
// Unknown fields, nested values included, are skipped.
//
// It is the one function of the collector over 100 lines, on purpose: one
// pass over the line with the field switch inline, so that a line costs no
// allocation. Measured (BenchmarkParseEvent: the 187 lines of a real log and
// one with escapes; 2026-12-03, load average 9-15 on 2 cores): 0 allocs/op,
// 1.2-2.8 us a line, against 10.2-11.8 us and 11 allocations a line for
// encoding/json into the same fields. Split into a decoder struct with a
// method per kind of field, the decoder moved to the heap (an escaped
// string keeps a pointer into it, stored through the method's receiver:
// go build -gcflags=-m says "moved to heap: d"): one allocation, 256
// bytes, a line. TestParseEventDoesNotAllocate holds it to 0.
func parseEvent(line []byte, ev *Event, scratch *[]byte) error {
	*ev = Event{Hostgroup: -1, RowsAffected: -1, ClientStmtID: -1}
	*scratch = (*scratch)[:0]
	// Offsets of unescaped strings in scratch, resolved once parsing ends
	// because appending to scratch may move it.
	type span struct {
		dst      *[]byte
		from, to int
	}
	var spans [8]span
	nspans := 0
	seen := 0
	var evName []byte

	p := skipWS(line, 0)
	if p >= len(line) || line[p] != '{' {
		return errors.New("not a JSON object")
	}
	p = skipWS(line, p+1)
	if p < len(line) && line[p] == '}' {
		return errors.New("empty JSON object")
	}
	for {
		if p >= len(line) || line[p] != '"' {
			return errors.New("expected a field name")
		}
		kEnd, kEsc := scanString(line, p+1)
		if kEnd < 0 {
			return errors.New("unterminated field name")
		}
		key := line[p+1 : kEnd]
		_ = kEsc // ProxySQL's field names never need escapes; an escaped name just matches nothing.
		p = skipWS(line, kEnd+1)
		if p >= len(line) || line[p] != ':' {
			return errors.New("expected ':' after a field name")
		}
		p = skipWS(line, p+1)
		if p >= len(line) {
			return errors.New("missing value")
		}
		var strDst *[]byte
		var intDst *int64
		var tmp int64
		switch string(key) {
		case "thread_id":
			intDst = &tmp
			seen |= hasThread
		case "starttime_timestamp_us":
			intDst = &ev.StartUS
			seen |= hasStart
		case "endtime_timestamp_us":
			intDst = &ev.EndUS
			seen |= hasEnd
		case "duration_us":
			intDst = &ev.Duration
			seen |= hasDuration
		case "rows_sent":
			intDst = &ev.RowsSent
		case "rows_affected":
			intDst = &ev.RowsAffected
		case "client_stmt_id":
			intDst = &ev.ClientStmtID
		case "hostgroup_id":
			intDst = &tmp
		case "query":
			strDst = &ev.Query
		case "client":
			strDst = &ev.Client
		case "username":
			strDst = &ev.Username
		case "schemaname":
			strDst = &ev.Schema
		case "server":
			strDst = &ev.Server
		case "digest":
			strDst = &ev.Digest
		case "event":
			strDst = &evName
			seen |= hasEvent
		}
		switch {
		case strDst != nil:
			if line[p] != '"' {
				if bytes.HasPrefix(line[p:], []byte("null")) {
					p += 4
					break
				}
				return fmt.Errorf("field %s: expected a string", key)
			}
			end, esc := scanString(line, p+1)
			if end < 0 {
				return fmt.Errorf("field %s: unterminated string", key)
			}
			raw := line[p+1 : end]
			if esc {
				from := len(*scratch)
				var ok bool
				*scratch, ok = appendUnescaped(*scratch, raw)
				if !ok {
					return fmt.Errorf("field %s: invalid escape", key)
				}
				if nspans == len(spans) {
					return errors.New("too many escaped fields")
				}
				spans[nspans] = span{strDst, from, len(*scratch)}
				nspans++
			} else {
				*strDst = raw
			}
			if string(key) == "event" {
				ev.Type = eventType(raw)
			}
			p = end + 1
		case intDst != nil:
			v, n, ok := parseInt(line, p)
			if !ok {
				return fmt.Errorf("field %s: expected an integer", key)
			}
			*intDst = v
			p = n
			switch string(key) {
			case "thread_id":
				if v < 0 {
					return errors.New("field thread_id: negative")
				}
				ev.ThreadID = uint64(v)
			case "hostgroup_id":
				ev.Hostgroup = int(v)
			}
		default:
			n, err := skipValue(line, p)
			if err != nil {
				return fmt.Errorf("field %s: %w", key, err)
			}
			p = n
		}
		p = skipWS(line, p)
		if p >= len(line) {
			return errors.New("unterminated JSON object")
		}
		if line[p] == '}' {
			p = skipWS(line, p+1)
			break
		}
		if line[p] != ',' {
			return errors.New("expected ',' or '}'")
		}
		p = skipWS(line, p+1)
	}
	if p != len(line) {
		return errors.New("text after the JSON object")
	}
	for _, s := range spans[:nspans] {
		*s.dst = (*scratch)[s.from:s.to]
	}
	if seen&hasAll != hasAll {
		return errors.New(missingField(seen))
	}
	return checkTimes(ev, seen&hasDuration != 0)
}

// checkTimes rejects times no ProxySQL wrote: before 1970 or after 2200,
// ending before they start, a statement of more than 7 days, or a
// duration_us that disagrees with them (ProxySQL writes end - start).
// Within these bounds no arithmetic on the times can overflow.
func checkTimes(ev *Event, haveDuration bool) error {
	switch {
	case ev.StartUS < 0 || ev.StartUS > maxEventUS:
		return fmt.Errorf("starttime_timestamp_us %d is not a time between 1970 and 2200", ev.StartUS)
	case ev.EndUS < 0 || ev.EndUS > maxEventUS:
		return fmt.Errorf("endtime_timestamp_us %d is not a time between 1970 and 2200", ev.EndUS)
	case ev.EndUS < ev.StartUS:
		return errors.New("endtime_timestamp_us before starttime_timestamp_us")
	case ev.EndUS-ev.StartUS > maxEventDurationUS:
		return fmt.Errorf("the statement lasted %s: more than 7 days is not a statement", time.Duration(ev.EndUS-ev.StartUS)*time.Microsecond)
	case haveDuration && ev.Duration != ev.EndUS-ev.StartUS:
		return fmt.Errorf("duration_us %d disagrees with the start and end times (%d µs apart)", ev.Duration, ev.EndUS-ev.StartUS)
	}
	return nil
}

func missingField(seen int) string {
	switch {
	case seen&hasThread == 0:
		return "missing thread_id"
	case seen&hasStart == 0:
		return "missing starttime_timestamp_us"
	case seen&hasEnd == 0:
		return "missing endtime_timestamp_us"
	}
	return "missing event"
}

func eventType(name []byte) EventType {
	switch string(name) {
	case "COM_QUERY":
		return EventQuery
	case "COM_STMT_PREPARE":
		return EventStmtPrepare
	case "COM_STMT_EXECUTE":
		return EventStmtExecute
	}
	return EventOther
}

func skipWS(b []byte, p int) int {
	for p < len(b) && (b[p] == ' ' || b[p] == '\t' || b[p] == '\r' || b[p] == '\n') {
		p++
	}
	return p
}

// scanString returns the index of the closing quote of the string whose
// content starts at p, and whether the content has escapes; -1 if the string
// is not terminated or holds a raw control character.
func scanString(b []byte, p int) (int, bool) {
	esc := false
	for p < len(b) {
		i := bytes.IndexAny(b[p:], "\"\\")
		if i < 0 {
			return -1, false
		}
		p += i
		if b[p] == '"' {
			return p, esc
		}
		esc = true
		p += 2
	}
	return -1, false
}

// appendUnescaped appends the JSON string content raw, unescaped, to dst.
func appendUnescaped(dst, raw []byte) ([]byte, bool) {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		if i >= len(raw) {
			return dst, false
		}
		switch raw[i] {
		case '"', '\\', '/':
			dst = append(dst, raw[i])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw, i+1)
			if !ok {
				return dst, false
			}
			i += 4
			if 0xD800 <= r && r < 0xDC00 && i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo, ok := hex4(raw, i+3); ok && 0xDC00 <= lo && lo < 0xE000 {
					r = (r-0xD800)<<10 | (lo - 0xDC00) + 0x10000
					i += 6
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, false
		}
	}
	return dst, true
}

func hex4(b []byte, p int) (rune, bool) {
	if p+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[p : p+4] {
		v, ok := unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// parseInt reads a JSON integer at p. A fraction or exponent is rejected:
// ProxySQL writes integers, and a float here means the line is not its.
func parseInt(b []byte, p int) (int64, int, bool) {
	start := p
	if p < len(b) && b[p] == '-' {
		p++
	}
	digits := p
	for p < len(b) && '0' <= b[p] && b[p] <= '9' {
		p++
	}
	if p == digits || p-digits > 18 {
		if p-digits > 18 {
			v, err := strconv.ParseInt(string(b[start:p]), 10, 64)
			return v, p, err == nil
		}
		return 0, p, false
	}
	var v int64
	for _, c := range b[digits:p] {
		v = v*10 + int64(c-'0')
	}
	if digits != start {
		v = -v
	}
	if p < len(b) && (b[p] == '.' || b[p] == 'e' || b[p] == 'E') {
		return 0, p, false
	}
	return v, p, true
}

// skipValue skips any JSON value at p, nested ones included.
func skipValue(b []byte, p int) (int, error) {
	if p < len(b) && (b[p] == ',' || b[p] == '}') {
		return p, errors.New("missing value")
	}
	depth := 0
	for p < len(b) {
		switch c := b[p]; c {
		case '"':
			end, _ := scanString(b, p+1)
			if end < 0 {
				return p, errors.New("unterminated string")
			}
			p = end + 1
		case '{', '[':
			depth++
			p++
		case '}', ']':
			if depth == 0 {
				return p, nil
			}
			depth--
			p++
		case ',':
			if depth == 0 {
				return p, nil
			}
			p++
		default:
			p++
		}
		if depth == 0 && p < len(b) && (b[p] == ',' || b[p] == '}') {
			return p, nil
		}
	}
	if depth != 0 {
		return p, errors.New("unterminated value")
	}
	return p, nil
}
