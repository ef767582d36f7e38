package steward

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type scripted struct {
	mu       sync.Mutex
	attempts map[string][]int
	outcome  func(req Request, attempt int) (Result, error)
}

func (s *scripted) Reconcile(ctx context.Context, req Request) (Result, error) {
	s.mu.Lock()
	if s.attempts == nil {
		s.attempts = map[string][]int{}
	}
	s.attempts[req.Name] = append(s.attempts[req.Name], AttemptFrom(ctx))
	s.mu.Unlock()
	return s.outcome(req, AttemptFrom(ctx))
}

func (s *scripted) seen(name string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.attempts[name]...)
}

func TestWorkerPoolOutcomes(t *testing.T) {
	var r *scripted
	r = &scripted{outcome: func(req Request, attempt int) (Result, error) {
		switch req.Name {
		case "flaky":
			if attempt < 3 {
				return Result{}, errors.New("not yet")
			}
		case "terminal":
			return Result{}, Terminal(errors.New("bad spec"))
		case "later":
			if len(r.seen("later")) == 1 {
				return Result{RequeueAfter: 20 * time.Millisecond}, nil
			}
		case "panics":
			panic("boom")
		}
		return Result{}, nil
	}}
	pool := NewWorkerPool("test", r, nil, WorkerOptions{MaxConcurrentReconciles: 3})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { pool.Run(ctx); close(done) }()
	for _, n := range []string{"flaky", "terminal", "later", "panics"} {
		pool.Queue.Add(Request{Name: n}, tc(1))
	}
	eventually(t, "flaky to succeed", func() bool { return len(r.seen("flaky")) == 4 })
	if got := r.seen("flaky"); got[0] != 0 || got[3] != 3 {
		t.Fatalf("attempts = %v", got)
	}
	eventually(t, "later to be reconciled again", func() bool { return len(r.seen("later")) == 2 })
	eventually(t, "the panic to be retried", func() bool { return len(r.seen("panics")) >= 2 })
	if len(r.seen("terminal")) != 1 || pool.Queue.NumRequeues(Request{Name: "terminal"}) != 0 {
		t.Fatal("a terminal error is not retried")
	}
	st := pool.Status()
	if st.Reconciles[ResultTerminalError] != 1 || st.Reconciles[ResultError] < 4 || st.Reconciles[ResultRequeueAfter] != 1 || st.LastError == nil {
		t.Fatalf("status = %+v", st)
	}
	cancel()
	<-done
	if !pool.Queue.ShuttingDown() {
		t.Fatal("the pool shuts its queue down")
	}
}

func TestWorkerPoolShutdownLetsInFlightFinish(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var finished bool
	r := ReconcilerFunc(func(ctx context.Context, req Request) (Result, error) {
		close(started)
		<-release
		finished = ctx.Err() == nil
		return Result{}, nil
	})
	pool := NewWorkerPool("test", r, nil, WorkerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { pool.Run(ctx); close(done) }()
	pool.Queue.Add(Request{Name: "slow"})
	<-started
	cancel()
	pool.Queue.Add(Request{Name: "ignored"})
	close(release)
	<-done
	if !finished {
		t.Fatal("the in-flight reconcile must finish with a live context")
	}
}
