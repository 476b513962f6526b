package testenv

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the child when the test binary dies,
// so a killed `go test` leaves no server running. (Strictly, when the OS
// thread that started it exits; Go only ends threads of goroutines that
// exit locked to them, which testenv's callers do not do. reapLeftovers
// covers whatever slips through.)
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
