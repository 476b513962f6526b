package flashsale

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// ProgressBar returns a Config.Progress that draws a bar on f when f is a
// terminal, and nil (no progress) otherwise.
func ProgressBar(f *os.File) func(done, total int) {
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	var mu sync.Mutex
	last := -1
	return func(done, total int) {
		const width = 40
		filled := width * done / max(total, 1)
		mu.Lock()
		defer mu.Unlock()
		if filled == last && done != total {
			return
		}
		last = filled
		fmt.Fprintf(f, "\r[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total)
		if done == total {
			fmt.Fprintln(f)
		}
	}
}
