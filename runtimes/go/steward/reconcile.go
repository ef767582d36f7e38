package steward

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Request is the key of one object to reconcile. Namespace is empty for cluster-scoped
// objects.
type Request struct {
	Namespace string
	Name      string
}

// String is "namespace/name", or "name" for a cluster-scoped object.
func (r Request) String() string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// ParseRequest parses "namespace/name" or "name".
func ParseRequest(key string) (Request, error) {
	parts := strings.Split(key, "/")
	switch len(parts) {
	case 1:
		return Request{Name: parts[0]}, nil
	case 2:
		return Request{Namespace: parts[0], Name: parts[1]}, nil
	}
	return Request{}, fmt.Errorf("not a namespace/name key: %q", key)
}

// Result says what to do after a reconcile that returned no error.
//
// The zero Result means done: the key's backoff is forgotten and it is not queued again
// until something adds it. RequeueAfter > 0 forgets the backoff and adds the key again
// after that delay; Requeue adds it again rate-limited (its backoff grows). When both are
// set, RequeueAfter wins, as in controller-runtime.
type Result struct {
	Requeue      bool
	RequeueAfter time.Duration
}

// Reconciler brings the world in line with one object, read fresh by key
// (level-triggered).
//
// Return an error to have the key retried with rate limiting, or one made with Terminal
// to give up on the key. ctx carries the reconcile's span (see TracingTransport) and the
// trace contexts of the coalesced events (ContextsFrom); it is cancelled when the worker
// pool stops and its grace period is over, or at once when the instance loses its lease.
type Reconciler interface {
	Reconcile(ctx context.Context, req Request) (Result, error)
}

// ReconcilerFunc adapts a function to Reconciler.
type ReconcilerFunc func(ctx context.Context, req Request) (Result, error)

// Reconcile calls f.
func (f ReconcilerFunc) Reconcile(ctx context.Context, req Request) (Result, error) {
	return f(ctx, req)
}

// TerminalError marks a reconcile error that retrying will not help: the key is not
// requeued. It is still logged and counted as an error; the key comes back only when
// something adds it again (a new event, a resync).
type TerminalError struct{ Err error }

func (e *TerminalError) Error() string { return "terminal: " + e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

// Terminal wraps err so that the reconcile is not retried (nil stays nil).
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &TerminalError{Err: err}
}

// IsTerminal reports whether err (or an error it wraps) is a TerminalError.
func IsTerminal(err error) bool {
	var t *TerminalError
	return errors.As(err, &t)
}

type contextsKey struct{}

// ContextsFrom returns the trace contexts of the events coalesced into the reconcile
// running with ctx, in arrival order (nil outside a reconcile).
func ContextsFrom(ctx context.Context) []TraceContext {
	c, _ := ctx.Value(contextsKey{}).([]TraceContext)
	return c
}

type attemptKey struct{}

// AttemptFrom returns how many times the reconcile running with ctx has failed since its
// key's last success (0 on a first try).
func AttemptFrom(ctx context.Context) int {
	n, _ := ctx.Value(attemptKey{}).(int)
	return n
}
