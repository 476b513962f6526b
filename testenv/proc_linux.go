package testenv

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the child when the test binary dies,
// so a killed `go test` leaves no server running.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
