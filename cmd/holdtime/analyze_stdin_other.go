//go:build !unix

package main

import "os"

// interruptibleStdin: no non-blocking stdin here; Ctrl-C ends the process
// at its next read.
func interruptibleStdin(*os.File) (*os.File, func()) { return nil, func() {} }
