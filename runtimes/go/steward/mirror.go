package steward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/steward-dev/steward/runtimes/go/gen/steward/v1"
)

// TypeKey is the comparable form of a ResourceType: group ("" for core), version,
// plural resource.
type TypeKey struct{ Group, Version, Resource string }

func (k TypeKey) String() string {
	if k.Group == "" {
		return k.Version + "/" + k.Resource
	}
	return k.Group + "/" + k.Version + "/" + k.Resource
}

// KeyOf returns the TypeKey of a ResourceType.
func KeyOf(rt *pb.ResourceType) TypeKey {
	return TypeKey{rt.GetGroup(), rt.GetVersion(), rt.GetResource()}
}

// NewResourceType builds a ResourceType (group is empty for the core API group).
func NewResourceType(group, version, resource string) *pb.ResourceType {
	return &pb.ResourceType{Group: group, Version: version, Resource: resource}
}

// A few resource types controllers commonly watch.
var (
	ConfigMaps  = NewResourceType("", "v1", "configmaps")
	Pods        = NewResourceType("", "v1", "pods")
	Secrets     = NewResourceType("", "v1", "secrets")
	Services    = NewResourceType("", "v1", "services")
	Deployments = NewResourceType("apps", "v1", "deployments")
	ReplicaSets = NewResourceType("apps", "v1", "replicasets")
	Jobs        = NewResourceType("batch", "v1", "jobs")
)

// ObjectKey names an object of a type: namespace ("" for cluster-scoped) and name.
type ObjectKey struct{ Namespace, Name string }

// Object is one mirrored object: its parsed metadata and the API server's JSON exactly
// as the informer sent it. Treat it as read-only; Decode it into your own types.
type Object struct {
	Type TypeKey
	Meta *pb.ObjectMeta
	Raw  []byte
}

// Key is the object's namespace and name.
func (o *Object) Key() ObjectKey { return ObjectKey{o.Meta.GetNamespace(), o.Meta.GetName()} }

// Namespace is the object's namespace ("" for cluster-scoped objects).
func (o *Object) Namespace() string { return o.Meta.GetNamespace() }

// Name is the object's name.
func (o *Object) Name() string { return o.Meta.GetName() }

// ResourceVersion is the resource version of this state of the object.
func (o *Object) ResourceVersion() string { return o.Meta.GetResourceVersion() }

// Decode unmarshals the object's JSON into v.
func (o *Object) Decode(v any) error { return json.Unmarshal(o.Raw, v) }

// ControllerOwner is the owner reference with controller: true, or nil.
func (o *Object) ControllerOwner() *pb.OwnerReference {
	for _, ref := range o.Meta.GetOwnerReferences() {
		if ref.GetController() {
			return ref
		}
	}
	return nil
}

// ChangeKind says what happened to an object in the mirror.
type ChangeKind int

// The kinds of change.
const (
	Added ChangeKind = iota + 1
	Modified
	Deleted
)

func (k ChangeKind) String() string {
	switch k {
	case Added:
		return "added"
	case Modified:
		return "modified"
	case Deleted:
		return "deleted"
	}
	return fmt.Sprintf("ChangeKind(%d)", int(k))
}

// Change is one change to the mirror, as handed to handlers.
type Change struct {
	Kind ChangeKind
	// Obj is the new state (for Deleted, the last known state).
	Obj *Object
	// Old is the previous state, for Modified.
	Old *Object
	// Trace is the context the informer sent with the event; nil for changes the
	// mirror inferred (deletions after REPLACED) and replays.
	Trace *TraceContext
}

// Handler is called for every change, in order, from the mirror's goroutine. It must not
// block for long; it may read the mirror.
type Handler func(Change)

// Indexer returns the index values of an object (e.g. the ConfigMaps it mounts); the
// object is then found by any of them with Mirror.ByIndex.
type Indexer func(*Object) []string

// Built-in index names: every type is indexed by namespace and by each owner's UID.
const (
	IndexNamespace = "namespace"
	IndexOwner     = "owner"
)

// MirrorOptions configure how a Mirror watches. The zero value works.
type MirrorOptions struct {
	// Namespace restricts the watch to one namespace; empty for all.
	Namespace string
	// LabelSelector is a Kubernetes label selector; empty for everything.
	LabelSelector string
	// FieldSelector supports metadata.name and metadata.namespace; empty for everything.
	FieldSelector string
	// Subscriber is the name the informer shows for this watch (the controller's name).
	Subscriber string
	// MaxBatchSize is the largest batch of events per message; 0 for the informer's
	// default.
	MaxBatchSize uint32
	// Subscriptions say, per watched type, which of its objects and fields the informer
	// sends (see Subscription); a type without one gets every object, whole. They apply
	// on top of Namespace, LabelSelector and FieldSelector.
	Subscriptions map[TypeKey]Subscription
	// InitialBackoff is the first reconnection delay. Defaults to 800 ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the reconnection delay. Defaults to 30 s.
	MaxBackoff time.Duration
	// Logger receives the mirror's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// MirrorError means the informer refused the watch for good (NOT_FOUND for an unknown
// type, INVALID_ARGUMENT for a bad selector, PERMISSION_DENIED, UNAUTHENTICATED,
// UNIMPLEMENTED). It is not retried.
type MirrorError struct {
	Code    codes.Code
	Message string
}

func (e *MirrorError) Error() string {
	return fmt.Sprintf("informer refused the watch (%s): %s", e.Code, e.Message)
}

var permanentCodes = map[codes.Code]bool{
	codes.NotFound:         true,
	codes.InvalidArgument:  true,
	codes.PermissionDenied: true,
	codes.Unauthenticated:  true,
	codes.Unimplemented:    true,
}

type typeState struct {
	objects         map[ObjectKey]*Object
	resourceVersion string
	synced          bool
	replacing       map[ObjectKey]struct{} // keys of a fresh snapshot after REPLACED
	indexes         map[string]map[string]map[ObjectKey]struct{}
}

// Mirror is the local mirror of some resource types, kept by one informer Watch stream.
//
// # Recovery
//
// Run reopens the stream with exponential backoff (800 ms doubling to 30 s, reset once a
// stream delivers) whenever it ends or fails, and resumes from the last resource version
// seen per type, so nothing is missed and nothing is delivered twice. When the informer
// cannot resume it sends REPLACED and a fresh snapshot; at its INITIAL_EVENTS_END the
// mirror reports as Deleted every object of that type the snapshot lacked, and as
// Modified every one whose resource version changed (unchanged ones are not reported).
// A snapshot cut off by a broken stream is never used to infer deletions.
//
// # Catching up on demand
//
// CatchUp is a read barrier: it reopens the stream at once (no backoff; resuming, so
// nothing is delivered twice) and returns once every type's INITIAL_EVENTS_END has
// arrived on a stream opened after it was called, that is once the mirror holds
// everything the informer held when it was called. A stream that ends before that hands
// the wait on to the next one, so an informer that is down delays it. A standby promoted
// to active calls it before its first reconcile: the events it was fed while standing by
// may still sit in buffers between the informer and it, and acting on a cache that lacks
// the last objects its predecessor created would create them again.
//
// # Subscriptions
//
// MirrorOptions.Subscriptions narrow what the informer sends of a type, per type: the
// mirror then holds only the objects that pass the type's filters (one that stops
// passing is reported as Deleted, one that starts to as Added), and of a projected type
// only the fields asked for in Object.Raw. A type with SelectedBy is never resumed: the
// informer answers every (re)opened watch with REPLACED and a fresh snapshot of it,
// applied as under Recovery: objects it lacks are reported as Deleted, new ones as
// Added, changed ones as Modified, unchanged ones not at all.
//
// # Memory
//
// One Object per object (JSON bytes plus parsed metadata), plus index entries.
//
// Reads (Get, List, ByIndex) are safe from any goroutine at any time and answer from
// what has been received so far.
type Mirror struct {
	client   pb.InformerServiceClient
	types    []*pb.ResourceType
	opts     MirrorOptions
	indexers map[string]Indexer
	log      *slog.Logger

	mu    sync.RWMutex
	state map[TypeKey]*typeState

	emitMu   sync.Mutex // serialises applying+emitting and AddHandler's replay
	handlers []Handler

	synced     chan struct{}
	syncedOnce sync.Once
	reconnects atomic.Int64

	barrierMu sync.Mutex
	// cancelStream ends the current stream (nil between streams); reopen says CatchUp
	// did, so Run reconnects at once.
	cancelStream context.CancelFunc
	reopen       bool
	// barriers are CatchUp callers waiting for the next stream to reach the present;
	// streamBarriers those the current stream answers once it has sent every type's
	// INITIAL_EVENTS_END (streamEnded holds the types it has sent it for).
	barriers       []chan struct{}
	streamBarriers []chan struct{}
	streamEnded    map[TypeKey]struct{}
}

// NewMirror returns a mirror of types, watched through conn (an informer). indexers adds
// named indexes to the built-in ones.
func NewMirror(conn grpc.ClientConnInterface, types []*pb.ResourceType, opts MirrorOptions, indexers map[string]Indexer) (*Mirror, error) {
	if len(types) == 0 {
		return nil, errors.New("steward: a mirror needs at least one resource type")
	}
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = 800 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	m := &Mirror{
		client: pb.NewInformerServiceClient(conn),
		opts:   opts,
		log:    opts.Logger,
		state:  map[TypeKey]*typeState{},
		synced: make(chan struct{}),
		indexers: map[string]Indexer{
			IndexNamespace: func(o *Object) []string { return []string{o.Namespace()} },
			IndexOwner: func(o *Object) []string {
				var uids []string
				for _, ref := range o.Meta.GetOwnerReferences() {
					uids = append(uids, ref.GetUid())
				}
				return uids
			},
		},
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	for name, fn := range indexers {
		if _, ok := m.indexers[name]; ok {
			return nil, fmt.Errorf("steward: index %q is built in", name)
		}
		m.indexers[name] = fn
	}
	for _, t := range types {
		k := KeyOf(t)
		if _, dup := m.state[k]; dup {
			continue
		}
		m.types = append(m.types, t)
		m.state[k] = &typeState{objects: map[ObjectKey]*Object{}, indexes: map[string]map[string]map[ObjectKey]struct{}{}}
	}
	subs := make(map[TypeKey]Subscription, len(opts.Subscriptions))
	for k, sub := range opts.Subscriptions {
		if _, ok := m.state[k]; !ok {
			return nil, fmt.Errorf("steward: a subscription for %s, which the mirror does not watch", k)
		}
		if err := sub.validate(k); err != nil {
			return nil, fmt.Errorf("steward: the subscription for %s: %w", k, err)
		}
		subs[k] = sub.clone()
	}
	m.opts.Subscriptions = subs
	return m, nil
}

// Get returns the object, or nil when the mirror does not hold it. It panics for a type
// the mirror does not watch.
func (m *Mirror) Get(t TypeKey, namespace, name string) *Object {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.typeState(t).objects[ObjectKey{namespace, name}]
}

// List returns every object of the type.
func (m *Mirror) List(t TypeKey) []*Object {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st := m.typeState(t)
	out := make([]*Object, 0, len(st.objects))
	for _, o := range st.objects {
		out = append(out, o)
	}
	return out
}

// ListNamespace returns the objects of the type in one namespace (by the namespace index).
func (m *Mirror) ListNamespace(t TypeKey, namespace string) []*Object {
	objs, _ := m.ByIndex(t, IndexNamespace, namespace)
	return objs
}

// ByIndex returns the objects whose index yields value; an error for an unknown index.
func (m *Mirror) ByIndex(t TypeKey, index, value string) ([]*Object, error) {
	if _, ok := m.indexers[index]; !ok {
		return nil, fmt.Errorf("steward: no index %q", index)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	st := m.typeState(t)
	keys := st.indexes[index][value]
	out := make([]*Object, 0, len(keys))
	for k := range keys {
		out = append(out, st.objects[k])
	}
	return out, nil
}

// ResourceVersion is the last resource version seen of the type (the resume point).
func (m *Mirror) ResourceVersion(t TypeKey) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.typeState(t).resourceVersion
}

// Types returns the watched resource types.
func (m *Mirror) Types() []*pb.ResourceType { return m.types }

// Synced is closed once every type's initial snapshot has arrived.
func (m *Mirror) Synced() <-chan struct{} { return m.synced }

// HasSynced reports whether every type's initial snapshot has arrived.
func (m *Mirror) HasSynced() bool {
	select {
	case <-m.synced:
		return true
	default:
		return false
	}
}

// Reconnects is how often the stream was reopened.
func (m *Mirror) Reconnects() int64 { return m.reconnects.Load() }

// AddHandler calls h for every change from now on, after replaying the objects already
// held as Added, so it never misses one.
func (m *Mirror) AddHandler(h Handler) {
	m.emitMu.Lock()
	defer m.emitMu.Unlock()
	m.handlers = append(m.handlers, h)
	var held []*Object
	m.mu.RLock()
	for _, t := range m.types {
		for _, o := range m.state[KeyOf(t)].objects {
			held = append(held, o)
		}
	}
	m.mu.RUnlock()
	for _, o := range held {
		m.call(h, Change{Kind: Added, Obj: o})
	}
}

// CatchUp waits until the mirror holds everything the informer holds now (see the
// type's docs): it reopens the stream at once and returns nil after every type's
// INITIAL_EVENTS_END has arrived on a stream opened after the call, and the handlers
// have seen what came before it. The wait spans reconnections (and lasts until Run runs
// when it does not); it returns ctx's error when ctx ends first.
func (m *Mirror) CatchUp(ctx context.Context) error {
	done := make(chan struct{})
	m.barrierMu.Lock()
	m.barriers = append(m.barriers, done)
	if m.cancelStream != nil {
		m.reopen = true
		m.cancelStream()
	}
	m.barrierMu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		m.barrierMu.Lock()
		m.barriers = dropBarrier(m.barriers, done)
		m.streamBarriers = dropBarrier(m.streamBarriers, done)
		m.barrierMu.Unlock()
		return ctx.Err()
	}
}

func dropBarrier(list []chan struct{}, b chan struct{}) []chan struct{} {
	out := list[:0]
	for _, x := range list {
		if x != b {
			out = append(out, x)
		}
	}
	return out
}

func (m *Mirror) typeState(t TypeKey) *typeState {
	st, ok := m.state[t]
	if !ok {
		panic(fmt.Sprintf("steward: the mirror does not watch %s", t))
	}
	return st
}

// Run watches until ctx is cancelled (then it returns nil), reconnecting and resuming as
// the type's docs say. It returns a *MirrorError when the informer refuses the watch for
// good.
func (m *Mirror) Run(ctx context.Context) error {
	delay := m.opts.InitialBackoff
	for {
		m.mu.Lock()
		for _, st := range m.state {
			st.replacing = nil
		}
		m.mu.Unlock()
		delivered, reopened, err := m.watchOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if delivered {
			delay = m.opts.InitialBackoff
		}
		if reopened { // CatchUp ended the stream to resume at once on a new one
			m.log.Debug("reopening the watch stream to catch up")
			m.reconnects.Add(1)
			continue
		}
		if err != nil {
			if st, ok := status.FromError(err); ok && permanentCodes[st.Code()] {
				return &MirrorError{Code: st.Code(), Message: st.Message()}
			}
			m.log.Warn("watch stream failed; reconnecting", "error", err, "in", delay)
		} else {
			m.log.Info("informer ended the watch stream; reconnecting", "in", delay)
		}
		m.reconnects.Add(1)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(delay*2, m.opts.MaxBackoff)
	}
}

// watchOnce runs one stream until it ends; reopened reports that CatchUp ended it.
func (m *Mirror) watchOnce(ctx context.Context) (delivered, reopened bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.barrierMu.Lock()
	// Barriers the last stream did not answer (it ended early) wait for this one.
	m.streamBarriers = append(m.streamBarriers, m.barriers...)
	m.barriers = nil
	m.streamEnded = map[TypeKey]struct{}{}
	m.reopen = false
	m.cancelStream = cancel
	m.barrierMu.Unlock()
	defer func() {
		m.barrierMu.Lock()
		m.cancelStream = nil
		reopened, m.reopen = m.reopen, false
		m.barriers = append(m.barriers, m.streamBarriers...)
		m.streamBarriers = nil
		m.barrierMu.Unlock()
	}()
	stream, err := m.client.Watch(sctx, m.request())
	if err != nil {
		return false, false, err
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return delivered, false, nil
		}
		if err != nil {
			return delivered, false, err
		}
		delivered = true
		m.apply(resp.GetEvents())
	}
}

func (m *Mirror) request() *pb.WatchRequest {
	m.mu.RLock()
	defer m.mu.RUnlock()
	req := &pb.WatchRequest{
		Namespace:     m.opts.Namespace,
		LabelSelector: m.opts.LabelSelector,
		FieldSelector: m.opts.FieldSelector,
		Subscriber:    m.opts.Subscriber,
		MaxBatchSize:  m.opts.MaxBatchSize,
	}
	for _, t := range m.types {
		k := KeyOf(t)
		target := &pb.WatchTarget{Type: t, ResourceVersion: m.state[k].resourceVersion}
		if sub, ok := m.opts.Subscriptions[k]; ok {
			sub.fill(target)
		}
		req.Targets = append(req.Targets, target)
	}
	return req
}

// apply updates the state with a batch of events, then tells the handlers.
func (m *Mirror) apply(events []*pb.Event) {
	m.emitMu.Lock()
	defer m.emitMu.Unlock()
	var changes []Change
	var ended []TypeKey
	allSynced := false
	m.mu.Lock()
	for _, ev := range events {
		key := KeyOf(ev.GetResourceType())
		st, ok := m.state[key]
		if !ok {
			continue
		}
		switch ev.GetType() {
		case pb.EventType_EVENT_TYPE_REPLACED:
			st.replacing = map[ObjectKey]struct{}{}
		case pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END:
			if st.replacing != nil {
				for k, gone := range st.objects {
					if _, seen := st.replacing[k]; !seen {
						m.remove(st, gone)
						changes = append(changes, Change{Kind: Deleted, Obj: gone})
					}
				}
				st.replacing = nil
			}
			st.synced = true
			ended = append(ended, key)
			allSynced = true
			for _, s := range m.state {
				allSynced = allSynced && s.synced
			}
		case pb.EventType_EVENT_TYPE_ADDED, pb.EventType_EVENT_TYPE_MODIFIED:
			obj := &Object{Type: key, Meta: ev.GetMetadata(), Raw: ev.GetObject()}
			if st.replacing != nil {
				st.replacing[obj.Key()] = struct{}{}
			}
			old := st.objects[obj.Key()]
			if old != nil && old.ResourceVersion() == obj.ResourceVersion() {
				break // the same state again (a snapshot after REPLACED): nothing changed
			}
			if old != nil {
				m.remove(st, old)
			}
			m.insert(st, obj)
			kind := Added
			if old != nil {
				kind = Modified
			}
			changes = append(changes, Change{Kind: kind, Obj: obj, Old: old, Trace: traceOf(ev)})
		case pb.EventType_EVENT_TYPE_DELETED:
			obj := &Object{Type: key, Meta: ev.GetMetadata(), Raw: ev.GetObject()}
			if gone := st.objects[obj.Key()]; gone != nil {
				m.remove(st, gone)
			}
			changes = append(changes, Change{Kind: Deleted, Obj: obj, Trace: traceOf(ev)})
		}
		if rv := ev.GetResourceVersion(); rv != "" {
			st.resourceVersion = rv
		}
	}
	m.mu.Unlock()
	for _, c := range changes {
		for _, h := range m.handlers {
			m.call(h, c)
		}
	}
	if allSynced {
		m.syncedOnce.Do(func() { close(m.synced) })
	}
	if len(ended) > 0 {
		m.endInitialEvents(ended)
	}
}

// endInitialEvents records that the current stream sent INITIAL_EVENTS_END for types and,
// once it has for every type, answers the barriers waiting for it.
func (m *Mirror) endInitialEvents(types []TypeKey) {
	m.barrierMu.Lock()
	defer m.barrierMu.Unlock()
	for _, k := range types {
		m.streamEnded[k] = struct{}{}
	}
	if len(m.streamEnded) < len(m.state) {
		return
	}
	for _, done := range m.streamBarriers {
		close(done)
	}
	m.streamBarriers = nil
}

func (m *Mirror) call(h Handler, c Change) {
	defer func() {
		if r := recover(); r != nil { // a handler's bug must not stop the mirror
			m.log.Error("mirror handler panicked", "change", c.Kind.String(), "object", c.Obj.Key(), "panic", r)
		}
	}()
	h(c)
}

func (m *Mirror) insert(st *typeState, o *Object) {
	st.objects[o.Key()] = o
	for name, fn := range m.indexers {
		idx := st.indexes[name]
		if idx == nil {
			idx = map[string]map[ObjectKey]struct{}{}
			st.indexes[name] = idx
		}
		for _, v := range fn(o) {
			if idx[v] == nil {
				idx[v] = map[ObjectKey]struct{}{}
			}
			idx[v][o.Key()] = struct{}{}
		}
	}
}

func (m *Mirror) remove(st *typeState, o *Object) {
	delete(st.objects, o.Key())
	for name, fn := range m.indexers {
		idx := st.indexes[name]
		for _, v := range fn(o) {
			if keys := idx[v]; keys != nil {
				delete(keys, o.Key())
				if len(keys) == 0 {
					delete(idx, v)
				}
			}
		}
	}
}

func traceOf(ev *pb.Event) *TraceContext {
	tc := ev.GetTraceContext()
	if tc.GetTraceparent() == "" {
		return nil
	}
	return &TraceContext{Traceparent: tc.GetTraceparent(), Tracestate: tc.GetTracestate()}
}
