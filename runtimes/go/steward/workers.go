package steward

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// Reconcile outcomes, as counted by WorkerPool and reported on spans (steward.result).
const (
	ResultSuccess       = "success"
	ResultRequeue       = "requeue"
	ResultRequeueAfter  = "requeue_after"
	ResultError         = "error"
	ResultTerminalError = "terminal_error"
)

// WorkerOptions configure a WorkerPool. The zero value works.
type WorkerOptions struct {
	// MaxConcurrentReconciles is how many reconciles run at once. Defaults to 1, as in
	// controller-runtime; one key is never reconciled by two workers at once whatever it is.
	MaxConcurrentReconciles int
	// ShutdownGrace is how long in-flight reconciles may go on after the pool is told to
	// stop before their context is cancelled. Defaults to 30 s.
	ShutdownGrace time.Duration
	// Logger receives the pool's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics is where the pool reports (controller_runtime_*{controller=name}), and
	// the queue NewWorkerPool makes (workqueue_*{name=name}). Defaults to
	// DefaultMetrics.
	Metrics *Metrics
}

// LastError is the most recent reconcile error.
type LastError struct {
	Request  Request
	Message  string
	Terminal bool
	At       time.Time
}

// WorkerStatus is a snapshot of a pool, for heartbeats and operators. Reconciles counts
// finished reconciles by outcome (ResultSuccess, ...).
type WorkerStatus struct {
	Workers     int
	BusyWorkers int
	QueueDepth  int
	Reconciles  map[string]uint64
	LastError   *LastError
}

// WorkerPool runs a Reconciler over the keys of a work queue with N workers. After each
// reconcile it acts as controller-runtime does:
//
//   - Result{} → forget the key's backoff (success);
//   - Result{RequeueAfter: d} → forget, add again after d (requeue_after);
//   - Result{Requeue: true} → add again rate-limited (requeue);
//   - a TerminalError → forget, do not retry (terminal_error);
//   - any other error (or a panic) → add again rate-limited (error).
//
// When the work is not finished (an error, Requeue) the key's trace contexts go back
// into the queue with it. Errors are logged, counted and kept as LastError; they never
// end a worker. Every reconcile is counted in controller_runtime_reconcile_total by
// result (a terminal error as "error", and in ..._terminal_reconcile_errors_total too)
// and timed in controller_runtime_reconcile_time_seconds (see Metrics).
type WorkerPool struct {
	Name  string
	Queue *WorkQueue[Request]

	reconciler Reconciler
	opts       WorkerOptions
	log        *slog.Logger
	metrics    *controllerMetrics

	mu        sync.Mutex
	busy      int
	counts    map[string]uint64
	lastError *LastError
	abort     context.CancelFunc
}

// NewWorkerPool returns a pool reconciling the keys of queue (nil for a new queue named
// name, with the default rate limiter, reporting to opts.Metrics).
func NewWorkerPool(name string, r Reconciler, queue *WorkQueue[Request], opts WorkerOptions) *WorkerPool {
	if opts.MaxConcurrentReconciles < 1 {
		opts.MaxConcurrentReconciles = 1
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 30 * time.Second
	}
	if queue == nil {
		queue = NewWorkQueue(QueueOptions[Request]{Name: name, Metrics: opts.Metrics})
	}
	p := &WorkerPool{
		Name: name, Queue: queue, reconciler: r, opts: opts, log: opts.Logger, counts: map[string]uint64{},
		metrics: opts.Metrics.orDefault().controller(name),
	}
	p.metrics.setMaxConcurrentReconciles(opts.MaxConcurrentReconciles)
	if p.log == nil {
		p.log = slog.Default()
	}
	return p
}

// Status returns the pool's numbers now.
func (p *WorkerPool) Status() WorkerStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	counts := make(map[string]uint64, len(p.counts))
	for k, v := range p.counts {
		counts[k] = v
	}
	return WorkerStatus{
		Workers: p.opts.MaxConcurrentReconciles, BusyWorkers: p.busy,
		QueueDepth: p.Queue.Len(), Reconciles: counts, LastError: p.lastError,
	}
}

// Run runs the workers until ctx is cancelled or the queue is shut down, then returns
// once they have finished. On cancellation it stops taking keys (the queue is shut
// down) and lets in-flight reconciles finish for up to ShutdownGrace, after which their
// context is cancelled. Abort cancels them at once.
func (p *WorkerPool) Run(ctx context.Context) {
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	p.mu.Lock()
	p.abort = cancelWork
	p.mu.Unlock()
	var wg sync.WaitGroup
	for range p.opts.MaxConcurrentReconciles {
		wg.Go(func() { p.work(ctx, workCtx) })
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
		p.Queue.ShutDown()
		return
	case <-ctx.Done():
	}
	p.Queue.ShutDown()
	p.mu.Lock()
	busy := p.busy
	p.mu.Unlock()
	p.log.Info("worker pool stopping", "pool", p.Name, "in_flight", busy)
	select {
	case <-finished:
	case <-time.After(p.opts.ShutdownGrace):
		p.log.Warn("cancelling reconciles still running after the grace period", "pool", p.Name, "grace", p.opts.ShutdownGrace)
		cancelWork()
		<-finished
	}
}

// Abort cancels the context of every reconcile in flight (used when the instance loses
// its lease: no grace).
func (p *WorkerPool) Abort() {
	p.mu.Lock()
	abort := p.abort
	p.mu.Unlock()
	if abort != nil {
		abort()
	}
}

func (p *WorkerPool) work(ctx, workCtx context.Context) {
	for {
		item, ok := p.Queue.Get(ctx)
		if !ok {
			return
		}
		if ctx.Err() != nil {
			p.Queue.Done(item.Key)
			return
		}
		p.mu.Lock()
		p.busy++
		p.mu.Unlock()
		p.metrics.activeWorkersAdd(1)
		p.reconcile(workCtx, item)
		p.metrics.activeWorkersAdd(-1)
		p.mu.Lock()
		p.busy--
		p.mu.Unlock()
		p.Queue.Done(item.Key)
	}
}

func (p *WorkerPool) reconcile(ctx context.Context, item Item[Request]) {
	key := item.Key
	attempt := p.Queue.NumRequeues(key)
	ctx, span := StartReconcileSpan(ctx, p.Name, key.String(), item.Contexts, attempt)
	defer span.End()
	ctx = context.WithValue(ctx, contextsKey{}, item.Contexts)
	ctx = context.WithValue(ctx, attemptKey{}, attempt)

	started := time.Now()
	result, err := p.call(ctx, key)
	took := time.Since(started)
	var outcome string
	switch {
	case err != nil && IsTerminal(err):
		outcome = ResultTerminalError
		p.Queue.Forget(key)
	case err != nil:
		outcome = ResultError
		p.Queue.AddRateLimited(key, item.Contexts...)
	case result.RequeueAfter > 0:
		outcome = ResultRequeueAfter
		p.Queue.Forget(key)
		p.Queue.AddAfter(key, result.RequeueAfter)
		span.SetAttributes(attribute.Float64("steward.requeue_after_seconds", result.RequeueAfter.Seconds()))
	case result.Requeue:
		outcome = ResultRequeue
		p.Queue.AddRateLimited(key, item.Contexts...)
	default:
		outcome = ResultSuccess
		p.Queue.Forget(key)
	}
	span.SetAttributes(attribute.String("steward.result", outcome))
	p.metrics.reconciled(outcome, took)
	p.mu.Lock()
	p.counts[outcome]++
	if err != nil {
		p.lastError = &LastError{Request: key, Message: err.Error(), Terminal: outcome == ResultTerminalError, At: time.Now()}
	}
	p.mu.Unlock()
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		if outcome == ResultTerminalError {
			p.log.Error("reconcile failed (terminal, not retried)", "controller", p.Name, "key", key.String(), "error", err)
		} else {
			p.log.Error("reconcile failed", "controller", p.Name, "key", key.String(), "retry", p.Queue.NumRequeues(key), "error", err)
		}
	}
}

func (p *WorkerPool) call(ctx context.Context, key Request) (result Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reconcile panicked: %v", r)
		}
	}()
	return p.reconciler.Reconcile(ctx, key)
}
