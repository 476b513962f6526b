package attrib

import (
	"fmt"
	"time"
)

// Bounds on an events log line's times, checked by parseEvent: beyond them
// a line is not ProxySQL's, and integer arithmetic on its times could
// overflow.
const (
	// maxEventUS is 2200-01-01T00:00:00Z in Unix microseconds.
	maxEventUS = 7258118400 * 1e6
	// maxEventDurationUS bounds one statement: ProxySQL kills queries after
	// mysql-default_query_timeout, 10 hours by default.
	maxEventDurationUS = 7 * 24 * 3600 * 1e6
)

// The log's own clock: how far an event's end may stray from the latest
// accepted end before it needs a neighbour to vouch for it. ProxySQL writes
// an event when it ends, so ends are in order within a few milliseconds
// (672 µs at most in the workload capture); quiet hours leave gaps.
const (
	clockLagUS = 10 * 60 * 1e6   // an end this far before the clock is out of order
	clockGapUS = 24 * 3600 * 1e6 // an end this far after it is a jump
)

// eventClock keeps the events log's own clock: the latest end time among
// the events it accepted. An event whose end is far from that clock (out of
// order by more than clockLagUS, or a jump of more than clockGapUS) is held
// until the next events decide: if the next event agrees with it, the log
// really moved on (a quiet weekend, a clock step, another file) and both
// are accepted; if the next agrees with the clock instead, the held event
// is rejected as malformed. With two held events that disagree with each
// other and the clock, the third decides between them. So one corrupt
// line can neither pass nor poison the clock, and a real event is never
// lost for sitting next to one. It keeps copies of at most two events.
type eventClock struct {
	latest int64 // end of the latest accepted event; 0: none yet
	held   [2]heldEvent
	nheld  int
}

type heldEvent struct {
	ev  Event
	buf []byte // owns ev's byte slices
	ref LineRef
}

// clockDecision is what the caller does with the events admit decided on:
// emit them in order, count the rejected ones as malformed.
type clockDecision struct {
	emit   [3]*Event // held events released, then possibly the current one
	nemit  int
	reject [2]LineRef
	nrej   int
}

func newEventClock(startUS int64) *eventClock { return &eventClock{latest: startUS} }

// follows says whether an event ending at end fits after one that ended at
// prev: not much earlier, not much later.
func follows(prev, end int64) bool {
	return prev != 0 && end >= prev-clockLagUS && end <= prev+clockGapUS
}

// admit decides on ev, which aliases the caller's buffers and is used only
// until the caller's next call (held events are copied). ref names ev's
// line for the malformed sample.
func (c *eventClock) admit(ev *Event, ref LineRef, d *clockDecision) {
	*d = clockDecision{}
	end := ev.EndUS
	switch c.nheld {
	case 0:
		if follows(c.latest, end) {
			c.accept(d, ev)
			return
		}
		c.hold(ev, ref)
	case 1:
		a := &c.held[0]
		switch {
		case follows(a.ev.EndUS, end):
			c.latest = 0 // the log moved: the held event is its new clock
			c.accept(d, &a.ev)
			c.accept(d, ev)
		case follows(c.latest, end):
			c.rejectHeld(d, 0, end)
			c.accept(d, ev)
		default:
			c.hold(ev, ref)
			return
		}
		c.nheld = 0
	case 2:
		a, b := &c.held[0], &c.held[1]
		switch {
		case follows(a.ev.EndUS, end):
			c.latest = 0
			c.rejectHeld(d, 1, end)
			c.accept(d, &a.ev)
			c.accept(d, ev)
		case follows(b.ev.EndUS, end):
			c.latest = 0
			c.rejectHeld(d, 0, end)
			c.accept(d, &b.ev)
			c.accept(d, ev)
		case follows(c.latest, end):
			c.rejectHeld(d, 0, end)
			c.rejectHeld(d, 1, end)
			c.accept(d, ev)
		default:
			// Three events, no two agreeing: the oldest has least support.
			c.rejectHeld(d, 0, end)
			c.held[0], c.held[1] = c.held[1], c.held[0]
			c.nheld = 1
			c.hold(ev, ref)
			return
		}
		c.nheld = 0
	}
}

// flush decides on the events still held at the end of the input: with
// nothing accepted to judge them by, they are all there is and are
// accepted; otherwise nothing after them vouched for them.
func (c *eventClock) flush(d *clockDecision) {
	*d = clockDecision{}
	for i := range c.nheld {
		if c.latest == 0 {
			c.accept(d, &c.held[i].ev)
		} else {
			c.rejectHeld(d, i, 0)
		}
	}
	c.nheld = 0
}

func (c *eventClock) accept(d *clockDecision, ev *Event) {
	c.latest = max(c.latest, ev.EndUS)
	d.emit[d.nemit] = ev
	d.nemit++
}

func (c *eventClock) rejectHeld(d *clockDecision, i int, next int64) {
	h := &c.held[i]
	r := h.ref
	at := time.UnixMicro(h.ev.EndUS).UTC().Format(time.RFC3339)
	switch {
	case c.latest != 0:
		r.Reason = fmt.Sprintf("ends %s, far from the log's clock (%s) and not vouched for by the events after it: a corrupt or foreign line",
			at, time.UnixMicro(c.latest).UTC().Format(time.RFC3339))
	case next != 0:
		r.Reason = fmt.Sprintf("ends %s, far from the events around it (next: %s): a corrupt or foreign line",
			at, time.UnixMicro(next).UTC().Format(time.RFC3339))
	default:
		r.Reason = fmt.Sprintf("ends %s, far from the events around it: a corrupt or foreign line", at)
	}
	d.reject[d.nrej] = r
	d.nrej++
}

// hold copies ev into the next free slot.
func (c *eventClock) hold(ev *Event, ref LineRef) {
	h := &c.held[c.nheld]
	c.nheld++
	h.ref = ref
	h.buf = h.buf[:0]
	own := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		from := len(h.buf)
		h.buf = append(h.buf, b...)
		return h.buf[from:len(h.buf):len(h.buf)]
	}
	// Size the buffer first so that appending never moves what was owned.
	n := len(ev.Query) + len(ev.Client) + len(ev.Username) + len(ev.Schema) + len(ev.Server) + len(ev.Digest)
	if cap(h.buf) < n {
		h.buf = make([]byte, 0, n)
	}
	h.ev = *ev
	h.ev.Query, h.ev.Client, h.ev.Username = own(ev.Query), own(ev.Client), own(ev.Username)
	h.ev.Schema, h.ev.Server, h.ev.Digest = own(ev.Schema), own(ev.Server), own(ev.Digest)
}

// LineChecker parses and checks events log lines one at a time, as
// EventsReader does, for a reader that gets the bytes itself (the
// collector's tail of a live log): the line's own checks, then the log's
// clock, started at startUS.
type LineChecker struct {
	ev      Event
	scratch []byte
	clock   *eventClock
	dec     clockDecision
}

// NewLineChecker returns a LineChecker whose clock starts at startUS.
func NewLineChecker(startUS int64) *LineChecker {
	return &LineChecker{clock: newEventClock(startUS)}
}

// Check parses one line of file: emit gets each event the clock accepts,
// in order (a line can release events held before it), rejected each
// reason a line was refused for. The events passed to emit are reused
// after Check returns.
func (c *LineChecker) Check(line []byte, file string, emit func(*Event), rejected func(reason string)) {
	if err := parseEvent(line, &c.ev, &c.scratch); err != nil {
		rejected(err.Error())
		return
	}
	c.clock.admit(&c.ev, LineRef{File: file}, &c.dec)
	for _, ref := range c.dec.reject[:c.dec.nrej] {
		rejected(ref.Reason)
	}
	for _, e := range c.dec.emit[:c.dec.nemit] {
		emit(e)
	}
}
