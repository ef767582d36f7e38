package steward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/steward-dev/steward/runtimes/go/gen/steward/v1"
)

// ControllerOptions configure how a controller runs. The zero value works.
type ControllerOptions struct {
	// MaxConcurrentReconciles is how many reconciles run at once. Defaults to 1.
	MaxConcurrentReconciles int
	// Namespace watches only this namespace; empty for all.
	Namespace string
	// LabelSelector watches only matching objects; empty for all.
	LabelSelector string
	// ResyncPeriod, when > 0, enqueues every object of the primary type again that
	// often (level triggering's safety net). Defaults to never.
	ResyncPeriod time.Duration
	// ShutdownGrace is how long in-flight reconciles may finish on shutdown. Defaults
	// to 30 s.
	ShutdownGrace time.Duration
	// Logger receives the controller's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics is where the controller's work queue and workers report
	// (workqueue_*{name=Name}, controller_runtime_*{controller=Name}); the counts go on
	// across the worker pools of successive activations. Defaults to DefaultMetrics.
	Metrics *Metrics
}

type route struct {
	t   TypeKey
	src Source
}

// Controller is one controller, wired: mirror → sources → work queue → workers →
// reconciler. Build it with NewBuilder.
//
// # Start-up and shutdown
//
// Run starts the mirror, waits until every watched type has synced (a reconcile never
// sees a half-filled cache), then runs the workers. Cancelling its context stops taking
// work, lets in-flight reconciles finish within the grace period, and closes the watch.
// If the informer refuses the watch for good, Run returns the *MirrorError.
//
// # With a manager
//
// RunWithManager registers with the manager (ManagerSession) and runs the workers only
// while the manager says this instance is active: START starts them (after enqueueing
// every object of the primary type, so nothing that changed while standing by is
// missed), DRAIN stops them gracefully, STOP or a lost lease stops them at once (their
// reconciles' context is cancelled) — the lease is lost before another instance may
// start, so two instances never reconcile together. Before its first reconcile a
// promoted instance waits until its mirror holds everything the informer holds
// (Mirror.CatchUp). Every worker also checks the lease before each reconcile, and Fence
// makes the controller's API clients check it before each write. The mirror keeps
// syncing while standing by, so a promoted standby starts with a warm cache. Heartbeats
// carry the pool's status. Shutdown deregisters, so a standby takes over without waiting
// for the lease to lapse.
type Controller struct {
	Name   string
	Mirror *Mirror

	opts       ControllerOptions
	log        *slog.Logger
	primary    TypeKey
	routes     []route
	reconciler Reconciler

	mu          sync.Mutex
	session     *ManagerSession
	pool        *WorkerPool
	poolStarted bool              // pool has been started (a stopped pool is replaced on activation)
	retired     map[string]uint64 // reconcile counts of the pools replaced so far
	stopWorkers context.CancelFunc
	workersDone chan struct{}
}

// Pool returns the current worker pool (a new one each time the instance is started).
func (c *Controller) Pool() *WorkerPool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pool
}

// Session returns the manager session (nil without a manager).
func (c *Controller) Session() *ManagerSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// ReconcileCounts returns how many reconciles have finished, by outcome (ResultSuccess,
// ...), over every pool the controller has run (Pool().Status() counts the current one).
func (c *Controller) ReconcileCounts() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.pool.Status().Reconciles
	for k, n := range c.retired {
		out[k] += n
	}
	return out
}

// WorkersRunning reports whether the workers run (the instance is active).
func (c *Controller) WorkersRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopWorkers != nil
}

func (c *Controller) newPool() *WorkerPool {
	return NewWorkerPool(c.Name, fenced{c}, nil, WorkerOptions{
		MaxConcurrentReconciles: c.opts.MaxConcurrentReconciles,
		ShutdownGrace:           c.opts.ShutdownGrace,
		Logger:                  c.log,
		Metrics:                 c.opts.Metrics,
	})
}

func (c *Controller) dispatch(ch Change) {
	for _, r := range c.routes {
		if r.t == ch.Obj.Type {
			r.src.Handle(ch, c.enqueue)
		}
	}
}

func (c *Controller) enqueue(req Request, tc *TraceContext) {
	pool := c.Pool()
	if tc != nil {
		pool.Queue.Add(req, *tc)
	} else {
		pool.Queue.Add(req)
	}
}

func (c *Controller) enqueuePrimary(pool *WorkerPool) {
	for _, o := range c.Mirror.List(c.primary) {
		pool.Queue.Add(Request{o.Namespace(), o.Name()})
	}
}

// MayReconcile is true unless a manager session exists and this instance does not hold
// the lease.
func (c *Controller) MayReconcile() bool {
	s := c.Session()
	return s == nil || s.HoldsLease()
}

// WriteFencer is an API client whose writes can be fenced, such as *kube.Client: it
// asks fence before sending each write and refuses the write when fence returns false.
type WriteFencer interface {
	SetWriteFence(fence func() bool)
}

// Fence makes clients refuse their writes while this instance may not reconcile (no
// session, or the session holds the lease: MayReconcile), checked just before each
// write is sent. After a pause past the renew deadline (SIGSTOP, a stopped VM), a write
// already under way in a reconcile is then refused (kube.ErrFenced) instead of racing
// the standby that took over. Call it once, before Run or RunWithManager.
func (c *Controller) Fence(clients ...WriteFencer) {
	for _, api := range clients {
		api.SetWriteFence(c.MayReconcile)
	}
}

// fenced checks the lease before every reconcile, so none starts after it is lost.
type fenced struct{ c *Controller }

func (f fenced) Reconcile(ctx context.Context, req Request) (Result, error) {
	if !f.c.MayReconcile() {
		// The workers are about to be stopped; whoever is active next reconciles it.
		return Result{RequeueAfter: time.Second}, nil
	}
	return f.c.reconciler.Reconcile(ctx, req)
}

// Run runs the controller on its own (no manager) until ctx is cancelled: it is the
// active instance from the start. See the type's docs.
func (c *Controller) Run(ctx context.Context) error {
	return c.run(ctx, nil)
}

func (c *Controller) resync(ctx context.Context, pool *WorkerPool) {
	t := time.NewTicker(c.opts.ResyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.enqueuePrimary(pool)
		}
	}
}

// RunWithManager runs the controller under the manager behind conn until ctx is
// cancelled, STOP, or a refused registration (*RegistrationRefusedError) or watch
// (*MirrorError); see the type's docs. opts.Controller defaults to the controller's
// name, opts.Watches to the mirror's types; its callbacks are the controller's own.
func (c *Controller) RunWithManager(ctx context.Context, conn grpc.ClientConnInterface, opts SessionOptions) error {
	if opts.Controller == "" {
		opts.Controller = c.Name
	}
	if len(opts.Watches) == 0 {
		opts.Watches = c.Mirror.Types()
	}
	if opts.Logger == nil {
		opts.Logger = c.log
	}
	opts.Status = c.heartbeatStatus
	opts.OnStart = c.onStart
	opts.OnDrain = func() { c.haltWorkers(true) }
	opts.OnStop = func(reason string) {
		c.log.Info("no longer active, stopping workers", "controller", c.Name, "reason", reason)
		c.haltWorkers(false)
	}
	session := NewManagerSession(conn, opts)
	c.mu.Lock()
	c.session = session
	c.mu.Unlock()
	return c.run(ctx, session)
}

// run is the one start path, alone (session nil: active at once) or under a manager
// (active between the session's START and DRAIN/STOP). The mirror runs throughout, so a
// standby stays warm; the workers start on activation once the mirror has synced (and,
// under a manager, caught up with the informer); shutdown drains them gracefully, then
// ends the session (deregistering), then the watch.
func (c *Controller) run(ctx context.Context, session *ManagerSession) error {
	mctx, stopMirror := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMirror()
	mirrorErr := make(chan error, 1)
	go func() { mirrorErr <- c.Mirror.Run(mctx) }()
	var sessionErr chan error // nil alone: never ready
	stopSession := func() {}
	if session != nil {
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stopSession = cancel
		sessionErr = make(chan error, 1)
		go func() { sessionErr <- session.Run(sctx) }()
	} else {
		// No predecessor can have written just before: nothing to catch up with.
		c.activate(0, false)
	}

	var err error
	mirrorEnded, sessionEnded := false, false
	select {
	case <-ctx.Done():
	case err = <-mirrorErr:
		mirrorEnded = true
	case err = <-sessionErr:
		sessionEnded = true
	}
	c.haltWorkers(true) // graceful: in-flight reconciles finish
	stopSession()       // the session deregisters
	if session != nil && !sessionEnded {
		if serr := <-sessionErr; err == nil {
			err = serr
		}
	}
	stopMirror()
	if !mirrorEnded {
		<-mirrorErr
	}
	return err
}

func (c *Controller) onStart(epoch uint64) { c.activate(epoch, true) }

// activate starts the workers (unless they run): once the mirror has synced and, with
// catchUp, caught up with the informer, every object of the primary type is enqueued and
// the pool runs until haltWorkers.
func (c *Controller) activate(epoch uint64, catchUp bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopWorkers != nil {
		return
	}
	if catchUp {
		c.log.Info("active, starting workers", "controller", c.Name, "epoch", epoch)
	} else {
		c.log.Info("running without a manager, starting workers once the mirror has synced", "controller", c.Name)
	}
	pool := c.pool
	if c.poolStarted {
		// A stopped pool does not start again: a new one, with every primary key below.
		c.pool.Queue.ShutDown()
		if c.retired == nil {
			c.retired = map[string]uint64{}
		}
		for k, n := range c.pool.Status().Reconciles {
			c.retired[k] += n
		}
		pool = c.newPool()
		c.pool = pool
	}
	c.poolStarted = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.stopWorkers, c.workersDone = cancel, done
	go func() {
		defer close(done)
		select { // usually long done: the mirror syncs while standing by
		case <-c.Mirror.Synced():
		case <-ctx.Done():
			return
		}
		if catchUp {
			// Read barrier: what the predecessor wrote just before it stopped may still be
			// on its way to this mirror; reconciling without it would, say, create a Job's
			// pod again.
			started := time.Now()
			if err := c.Mirror.CatchUp(ctx); err != nil {
				return // stopped before the mirror caught up
			}
			c.log.Info("mirror caught up with the informer", "controller", c.Name, "took", time.Since(started))
		} else {
			c.log.Info("caches synced", "controller", c.Name, "workers", max(1, c.opts.MaxConcurrentReconciles))
		}
		c.enqueuePrimary(pool) // coalesces with what the mirror's events queued
		if c.opts.ResyncPeriod > 0 {
			go c.resync(ctx, pool)
		}
		pool.Run(ctx)
	}()
}

// haltWorkers stops the workers: gracefully (in-flight reconciles finish within the
// grace period) or at once (their context is cancelled).
func (c *Controller) haltWorkers(graceful bool) {
	c.mu.Lock()
	stop, done, pool := c.stopWorkers, c.workersDone, c.pool
	c.stopWorkers, c.workersDone = nil, nil
	c.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	if !graceful {
		pool.Abort()
	}
	<-done
}

func (c *Controller) heartbeatStatus() *pb.InstanceStatus {
	st := c.Pool().Status()
	n := st.Reconciles
	out := &pb.InstanceStatus{
		QueueDepth:  uint64(st.QueueDepth),
		BusyWorkers: uint32(st.BusyWorkers),
		Reconciles: &pb.ReconcileCounts{
			Success:       n[ResultSuccess],
			Requeue:       n[ResultRequeue] + n[ResultRequeueAfter],
			Error:         n[ResultError],
			TerminalError: n[ResultTerminalError],
		},
		Drained: !c.WorkersRunning(),
	}
	if st.LastError != nil {
		out.LastError = st.LastError.Request.String() + ": " + st.LastError.Message
		out.LastErrorTime = timestamppb.New(st.LastError.At)
	}
	return out
}

// Builder wires a Controller: one primary type, owned and mapped types
// (controller-runtime's ControllerManagedBy(mgr).For(..).Owns(..).Watches(..)).
//
// # Subscriptions
//
// Each source can narrow what the informer sends of its type: WithSubscription, right
// after the For, Owns or Watches it applies to, gives it label and field selectors, an
// owner filter, the objects another type selects, a projection or metadata only (see
// Subscription):
//
//	steward.NewBuilder("deployment").
//		For(steward.Deployments, "Deployment", steward.GenerationChanged).
//		Owns(steward.ReplicaSets).WithSubscription(steward.Subscription{
//			OwnerFilter: &steward.OwnerFilter{Orphans: true}, // and those it may adopt
//		}).
//		Watches(steward.Pods, podsToDeployment).WithSubscription(steward.Subscription{
//			LabelSelector: "app",
//			Fields:        []string{"status.phase"},
//			MetadataOnly:  true, // labels and owner references are metadata
//		})
//
// and an endpoints-like controller reads only the pods some Service selects:
//
//	Watches(steward.Pods, podsToServices).WithSubscription(steward.Subscription{
//		SelectedBy: &steward.SelectedBy{Type: steward.Services, Path: "spec.selector"},
//	})
//
// An Owns source keeps only the objects whose controller owner is of the primary kind
// even without a subscription — that is all it reacts to; its subscription's OwnerFilter
// adds kinds or orphans to that. The controller watches each type once: when several
// sources name the same type, Complete merges their subscriptions into the one target
// its WatchRequest carries, so each gets at least what it asked for. There is no owner
// filter when any of them has none (a Watches or For of a type also Owned lifts the
// Owns filter), else the kinds of all of them, with orphans when any keeps them. Objects
// are whole when any source wants them whole (no Fields, not MetadataOnly); else the
// Fields of all of them, metadata only when every source is (when only some are,
// "metadata" joins the fields). SelectedBy is kept when every source gives the same join
// (type and path); else (a source without one, or two different joins) the type
// receives every object. Selectors cannot be merged: Complete refuses sources of one
// type that give different selectors.
type Builder struct {
	name     string
	primary  *pb.ResourceType
	kind     string
	routes   []builderRoute
	opts     ControllerOptions
	indexers map[string]Indexer
	err      error
}

// builderRoute is one source of a Builder.
type builderRoute struct {
	t      *pb.ResourceType
	src    Source
	method string // For, Owns or Watches: how errors name the source
	owns   bool
	sub    Subscription
	hasSub bool
}

// NewBuilder starts wiring a controller named name (a DNS-1123 label).
func NewBuilder(name string) *Builder {
	return &Builder{name: name, indexers: map[string]Indexer{}}
}

func (b *Builder) add(t *pb.ResourceType, s Source, method string) {
	b.routes = append(b.routes, builderRoute{t: t, src: s, method: method, owns: method == "Owns"})
}

// For sets the primary type: each change enqueues the object's own key. kind (e.g.
// "Deployment") is needed when the controller also Owns other types.
func (b *Builder) For(t *pb.ResourceType, kind string, preds ...Predicate) *Builder {
	if b.primary != nil {
		b.err = errors.Join(b.err, fmt.Errorf("controller %q already has a primary type", b.name))
		return b
	}
	b.primary, b.kind = t, kind
	b.add(t, EnqueueObject{Predicates: preds}, "For")
	return b
}

// Owns adds a type whose objects the primary type controls: a change enqueues the key
// of the controlling owner when it is of the primary kind. The informer sends only those
// objects (an owner filter on the primary kind), unless another source of the type reads
// every object; see the type's docs.
func (b *Builder) Owns(t *pb.ResourceType, preds ...Predicate) *Builder {
	if b.primary == nil || b.kind == "" {
		b.err = errors.Join(b.err, errors.New("Owns needs For(type, kind) first"))
		return b
	}
	b.add(t, EnqueueOwner{OwnerGroup: b.primary.GetGroup(), OwnerKind: b.kind, Predicates: preds}, "Owns")
	return b
}

// Watches adds any other type: mapper says which keys a changed object concerns.
func (b *Builder) Watches(t *pb.ResourceType, mapper Mapper, preds ...Predicate) *Builder {
	b.add(t, EnqueueMapped{Mapper: mapper, Predicates: preds}, "Watches")
	return b
}

// WithSubscription sets what the informer sends for the source added just before it
// (For, Owns or Watches): which objects of its type, and which of their fields. A source
// has at most one subscription; without one it reads every object, whole (an Owns
// source: every object the primary kind controls). Complete merges the subscriptions of
// the sources of one type and refuses different selectors; see the type's docs.
func (b *Builder) WithSubscription(sub Subscription) *Builder {
	if len(b.routes) == 0 {
		b.err = errors.Join(b.err, fmt.Errorf("controller %q: WithSubscription follows the For, Owns or Watches it applies to", b.name))
		return b
	}
	r := &b.routes[len(b.routes)-1]
	if r.hasSub {
		b.err = errors.Join(b.err, fmt.Errorf("controller %q: the %s of %s already has a subscription", b.name, r.method, KeyOf(r.t)))
		return b
	}
	if err := sub.validate(KeyOf(r.t)); err != nil {
		b.err = errors.Join(b.err, fmt.Errorf("controller %q: the subscription of the %s of %s: %w", b.name, r.method, KeyOf(r.t), err))
		return b
	}
	r.sub, r.hasSub = sub.clone(), true
	return b
}

// subscriptions merges the subscriptions of each type's sources (see the type's docs).
func (b *Builder) subscriptions() (map[TypeKey]Subscription, error) {
	var order []TypeKey
	byType := map[TypeKey][]sourceSubscription{}
	for i, r := range b.routes {
		sub := r.sub
		if r.owns {
			sub = ownedBy(sub, GroupKind{b.primary.GetGroup(), b.kind})
		}
		k := KeyOf(r.t)
		if _, seen := byType[k]; !seen {
			order = append(order, k)
		}
		byType[k] = append(byType[k], sourceSubscription{from: fmt.Sprintf("source %d, %s", i+1, r.method), sub: sub})
	}
	out := make(map[TypeKey]Subscription, len(order))
	for _, k := range order {
		merged, err := mergeSubscriptions(k, byType[k])
		if err != nil {
			return nil, fmt.Errorf("controller %q: %w", b.name, err)
		}
		out[k] = merged
	}
	return out, nil
}

// ownedBy is the subscription of an Owns source: its own, keeping at least the objects
// whose controller owner is of kind owner.
func ownedBy(sub Subscription, owner GroupKind) Subscription {
	f := &OwnerFilter{Kinds: []GroupKind{owner}}
	if own := sub.OwnerFilter; own != nil {
		f.Orphans = own.Orphans
		for _, gk := range own.Kinds {
			if !slices.Contains(f.Kinds, gk) {
				f.Kinds = append(f.Kinds, gk)
			}
		}
	}
	sub.OwnerFilter = f
	return sub
}

// WithOptions sets the controller's options.
func (b *Builder) WithOptions(o ControllerOptions) *Builder {
	b.opts = o
	return b
}

// WithIndex declares an index of the mirror, read with Mirror.ByIndex.
func (b *Builder) WithIndex(name string, fn Indexer) *Builder {
	b.indexers[name] = fn
	return b
}

// Complete builds the controller, watching through conn (an informer). newReconciler
// gets the controller's mirror.
func (b *Builder) Complete(conn grpc.ClientConnInterface, newReconciler func(*Mirror) Reconciler) (*Controller, error) {
	if b.err != nil {
		return nil, b.err
	}
	if b.primary == nil {
		return nil, fmt.Errorf("controller %q needs a primary type: call For", b.name)
	}
	log := b.opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var types []*pb.ResourceType
	for _, r := range b.routes {
		types = append(types, r.t)
	}
	subs, err := b.subscriptions()
	if err != nil {
		return nil, err
	}
	mirror, err := NewMirror(conn, types, MirrorOptions{
		Namespace: b.opts.Namespace, LabelSelector: b.opts.LabelSelector,
		Subscriber: b.name, Logger: log, Subscriptions: subs,
	}, b.indexers)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		Name: b.name, Mirror: mirror, opts: b.opts, log: log,
		primary: KeyOf(b.primary), reconciler: newReconciler(mirror),
	}
	for _, r := range b.routes {
		c.routes = append(c.routes, route{KeyOf(r.t), r.src})
	}
	c.pool = c.newPool()
	mirror.AddHandler(c.dispatch)
	return c, nil
}
