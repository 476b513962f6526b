package main

import (
	"io"
	"os"
)

// isTerminal reports whether w is a terminal: colour, progress bars and
// in-place refreshes go only there, never into pipes and files.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
