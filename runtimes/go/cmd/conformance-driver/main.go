// Command conformance-driver runs the runtime conformance kit's controller on the Go
// runtime (see conformance/README.md for the contract): a controller named
// "conformance" watching ConfigMaps in all namespaces through the informer at
// --informer, printing one JSON line per reconcile on stdout.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/steward-dev/steward/runtimes/go/steward"
)

const (
	sleepAnnotation = "conformance.steward.dev/sleep-ms"
	failAnnotation  = "conformance.steward.dev/fail-times"
)

// record is one reconcile as the kit reads it; the field order is the contract's.
type record struct {
	Key             string   `json:"key"`
	Exists          bool     `json:"exists"`
	ResourceVersion string   `json:"resourceVersion"`
	Attempt         int      `json:"attempt"`
	StartNs         int64    `json:"startNs"`
	EndNs           int64    `json:"endNs"`
	Parent          string   `json:"parent"`
	Links           []string `json:"links"`
	Result          string   `json:"result"`
}

type output struct{ mu sync.Mutex }

func (o *output) line(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = os.Stdout.Write(append(b, '\n')) // os.Stdout is unbuffered: flushed at once
}

type reconciler struct {
	mirror *steward.Mirror
	out    *output
}

func (r *reconciler) Reconcile(ctx context.Context, req steward.Request) (steward.Result, error) {
	rec := record{Key: req.Namespace + "/" + req.Name, Links: []string{}, Attempt: steward.AttemptFrom(ctx)}
	for i, tc := range steward.ContextsFrom(ctx) {
		if i == 0 {
			rec.Parent = tc.Traceparent
		} else {
			rec.Links = append(rec.Links, tc.Traceparent)
		}
	}
	rec.StartNs = time.Now().UnixNano()
	var failErr error
	obj := r.mirror.Get(steward.KeyOf(steward.ConfigMaps), req.Namespace, req.Name)
	if obj != nil {
		rec.Exists = true
		rec.ResourceVersion = obj.ResourceVersion()
		var cm struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := obj.Decode(&cm); err != nil {
			failErr = fmt.Errorf("decode %s: %w", rec.Key, err)
		}
		ann := cm.Metadata.Annotations
		if ms, err := strconv.Atoi(ann[sleepAnnotation]); err == nil && ms > 0 {
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-ctx.Done():
			}
		}
		if n, err := strconv.Atoi(ann[failAnnotation]); err == nil && rec.Attempt < n && failErr == nil {
			failErr = fmt.Errorf("failing as asked (%d of %d)", rec.Attempt+1, n)
		}
	}
	rec.EndNs = time.Now().UnixNano()
	rec.Result = "ok"
	if failErr != nil {
		rec.Result = "error"
	}
	r.out.line(rec)
	return steward.Result{}, failErr
}

func main() {
	fs := flag.NewFlagSet("conformance-driver", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: conformance-driver --informer HOST:PORT [--workers N]\n\n"+
			"Runs the conformance kit's controller (see conformance/README.md) on the Go runtime:\n"+
			"it watches ConfigMaps through the informer and prints one JSON line per reconcile.\n\n")
		fs.PrintDefaults()
	}
	informer := fs.String("informer", "", "informer address, host:port (plaintext gRPC); required")
	workers := fs.Int("workers", 2, "concurrent reconciles")
	_ = fs.Parse(os.Args[1:])
	if *informer == "" {
		fs.Usage()
		os.Exit(2)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	os.Exit(run(*informer, *workers))
}

func run(informer string, workers int) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// The conformance kit's fake informer serves plaintext on loopback; say so explicitly
	// rather than take the STEWARD_* environment.
	dial, err := steward.DialOptions(steward.SecurityConfig{InsecurePlaintext: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance-driver:", err)
		return 2
	}
	conn, err := grpc.NewClient(informer, dial...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance-driver:", err)
		return 2
	}
	defer conn.Close()
	out := &output{}
	ctrl, err := steward.NewBuilder("conformance").
		For(steward.ConfigMaps, "ConfigMap").
		WithOptions(steward.ControllerOptions{MaxConcurrentReconciles: workers}).
		Complete(conn, func(m *steward.Mirror) steward.Reconciler { return &reconciler{mirror: m, out: out} })
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance-driver:", err)
		return 2
	}
	go func() {
		select {
		case <-ctrl.Mirror.Synced():
			out.line(map[string]bool{"synced": true})
		case <-ctx.Done():
		}
	}()
	if err := ctrl.Run(ctx); err != nil {
		var merr *steward.MirrorError
		if errors.As(err, &merr) {
			fmt.Fprintf(os.Stderr, "conformance-driver: %s\n", merr)
			return 1
		}
		fmt.Fprintln(os.Stderr, "conformance-driver:", err)
		return 1
	}
	return 0
}
