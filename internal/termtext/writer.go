package termtext

import (
	"io"
	"unicode/utf8"
)

// Writer passes what is written through Text: newlines and tabs reach w,
// every other control character arrives escaped. It serves a renderer that
// writes many fields with fmt.Fprintf: a field that must stay on its line
// still needs Line, as a newline in it is kept here.
type Writer struct {
	w       io.Writer
	pending []byte // the start of a character the next Write completes
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it. It reports len(p) written when w took all
// of the escaped text, so fmt and tabwriter see a plain writer.
func (t *Writer) Write(p []byte) (int, error) {
	data := p
	if len(t.pending) > 0 {
		data = append(t.pending, p...)
		t.pending = nil
	}
	// A character cut between two writes waits for its end (at most 3 bytes).
	cut := len(data)
	for i := len(data) - 1; i >= 0 && i >= len(data)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:]) {
				cut = i
			}
			break
		}
	}
	t.pending = append([]byte(nil), data[cut:]...)
	if _, err := io.WriteString(t.w, Text(string(data[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a character left incomplete by the last Write, escaped.
func (t *Writer) Flush() error {
	if len(t.pending) == 0 {
		return nil
	}
	_, err := io.WriteString(t.w, Text(string(t.pending)))
	t.pending = nil
	return err
}
