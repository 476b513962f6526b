// Command holdtime shows who is holding database connections, and for how
// long. Run `holdtime --help` for the commands.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-sql-driver/mysql"
)

func main() {
	// The driver's own log lines go through holdtime's (driverlog.go).
	_ = mysql.SetLogger(&driverLog{w: os.Stderr, secrets: processSecrets(os.Args[1:])})
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	first := make(chan os.Signal, 1)
	go func() {
		s := <-sigs
		first <- s
		// Every command ends on its context: it stops what it reads, prints
		// what it has (marked partial), and returns.
		cancel()
		s = <-sigs
		fmt.Fprintf(os.Stderr, "holdtime: %v again: exiting now, without cleaning up\n", s)
		os.Exit(signalExitCode(s))
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	select {
	case s := <-first:
		// The same for every command, as shells report a program a signal
		// ended: 130 for Ctrl-C (SIGINT), 143 for SIGTERM.
		code = signalExitCode(s)
	default:
	}
	os.Exit(code)
}

// signalExitCode is 128 plus the signal's number.
func signalExitCode(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 130
}
