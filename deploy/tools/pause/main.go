// Command pause is the sandbox process of the pods on the local control plane's
// real nodes: PID 1 of each pod sandbox, it holds the pod's namespaces open, reaps
// every child re-parented to it (SIGCHLD, then wait until none is left) and exits 0
// on SIGTERM or SIGINT. A static program of the standard library alone.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set when linking (-X main.version=...); see binaries.py.
var version = "dev"

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "-v", "-version", "--version":
			fmt.Printf("pause %s\n", version)
			return
		default:
			fmt.Fprintf(os.Stderr, "usage: %s [-version]\n"+
				"Blocks until SIGTERM or SIGINT (then exits 0), reaping children meanwhile.\n",
				os.Args[0])
			os.Exit(2)
		}
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	// Children that exited before the handler was installed sent no signal we saw.
	reap()
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", sig)
		os.Exit(0)
	}
}

// reap waits for every child that has exited; signals coalesce, so one SIGCHLD may
// stand for several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}
