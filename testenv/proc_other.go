//go:build !linux

package testenv

import "os/exec"

// setDeathSignal has no portable equivalent; reapLeftovers covers the rest.
func setDeathSignal(*exec.Cmd) {}
