package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// reapLeftovers removes what killed runs left behind: a directory made by
// StartMySQL (or StartProxySQL, StartPrometheus) whose owner process no
// longer exists. A server still running there is killed first, but only when
// its command line names that directory, so a recycled pid is never hit.
// Leftovers never block a new start (ports and folders are always fresh);
// this keeps the machine from filling up.
func reapLeftovers() {
	for _, prefix := range []string{dirPrefix, proxysqlDirPrefix, prometheusDirPrefix, redisDirPrefix} {
		matches, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
		if socketSafeTempDir() != os.TempDir() {
			more, _ := filepath.Glob(filepath.Join(socketSafeTempDir(), prefix+"*"))
			matches = append(matches, more...)
		}
		for _, dir := range matches {
			if ownerAlive(dir) {
				continue
			}
			for _, pidFile := range []string{"mysqld.pid", "server.pid"} {
				killIfNamesDir(filepath.Join(dir, pidFile), dir)
			}
			_ = os.RemoveAll(dir)
		}
	}
}

// newRunDir makes a private directory for one server under parent ("" is
// os.TempDir), marked with this process's pid so that reapLeftovers can tell
// when its owner is gone.
func newRunDir(parent, prefix string) (string, error) {
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	// Written whole, then renamed: a reaper in another goroutine or
	// process must never read a half-written owner.pid (an empty one read
	// as "owner dead" and a fleet's fifth ProxySQL lost its directory
	// while it was being set up: "open …/proxysql.cnf: no such file").
	tmp := filepath.Join(dir, "owner.pid.tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("testenv: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "owner.pid")); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("testenv: %w", err)
	}
	return dir, nil
}

func ownerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
	if err != nil {
		// Being created right now, or not ours: leave young ones alone.
		st, statErr := os.Stat(dir)
		return statErr != nil || time.Since(st.ModTime()) < time.Minute
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		// Unreadable: an owner.pid from an older testenv that wrote it in
		// place may be mid-write; only an old one is garbage.
		st, statErr := os.Stat(dir)
		return statErr != nil || time.Since(st.ModTime()) < time.Minute
	}
	return processExists(pid)
}

func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func killIfNamesDir(pidFile, dir string) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
