//go:build unix

package main

import (
	"os"
	"syscall"
)

// interruptibleStdin returns a reader of f whose Close ends a pending
// Read, and a function that puts f back as it was. os.Stdin is in
// blocking mode, so closing it does not end a read waiting on a pipe that
// never ends (`ssh host cat log | holdtime analyze -`); the same
// descriptor, non-blocking and reopened through os.NewFile, is on Go's
// poller, where Close does. Only pipes and FIFOs are changed: a terminal's
// mode is shared with the shell, and a regular file never blocks.
func interruptibleStdin(f *os.File) (*os.File, func()) {
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		return nil, func() {}
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, func() {}
	}
	var fd uintptr
	var setErr error
	if err := rc.Control(func(d uintptr) { fd, setErr = d, syscall.SetNonblock(int(d), true) }); err != nil || setErr != nil {
		return nil, func() {}
	}
	return os.NewFile(fd, f.Name()), func() { _ = syscall.SetNonblock(int(fd), false) }
}
