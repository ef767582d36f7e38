package steward

import (
	"log/slog"
	"maps"
	"strings"
)

// Predicate says whether a change should produce keys at all.
type Predicate func(Change) bool

// Mapper returns the keys an object of another type concerns (Watches).
type Mapper func(*Object) []Request

// Enqueue is where keys go (a work queue's Add).
type Enqueue func(Request, *TraceContext)

// GenerationChanged passes creations, deletions and updates that changed
// metadata.generation (a spec change); status-only updates are filtered out.
func GenerationChanged(c Change) bool {
	if c.Kind != Modified || c.Old == nil {
		return true
	}
	return c.Old.Meta.GetGeneration() != c.Obj.Meta.GetGeneration()
}

// LabelsChanged passes creations, deletions and updates that changed the labels.
func LabelsChanged(c Change) bool {
	if c.Kind != Modified || c.Old == nil {
		return true
	}
	return !maps.Equal(c.Old.Meta.GetLabels(), c.Obj.Meta.GetLabels())
}

// ResourceVersionChanged passes everything but updates with the same resource version.
func ResourceVersionChanged(c Change) bool {
	if c.Kind != Modified || c.Old == nil {
		return true
	}
	return c.Old.ResourceVersion() != c.Obj.ResourceVersion()
}

// Source turns the changes of one resource type into keys.
type Source interface {
	Handle(c Change, enqueue Enqueue)
}

func passes(preds []Predicate, c Change) bool {
	for _, p := range preds {
		if !p(c) {
			return false
		}
	}
	return true
}

// EnqueueObject enqueues the object's own key (For in controller-runtime).
type EnqueueObject struct{ Predicates []Predicate }

// Handle enqueues the changed object's key.
func (s EnqueueObject) Handle(c Change, enqueue Enqueue) {
	if passes(s.Predicates, c) {
		enqueue(Request{c.Obj.Namespace(), c.Obj.Name()}, c.Trace)
	}
}

// EnqueueOwner enqueues the key of the object's controlling owner of OwnerKind in
// OwnerGroup (Owns in controller-runtime). On an update that changed the controller
// owner, both the old and the new owner are enqueued.
type EnqueueOwner struct {
	OwnerGroup, OwnerKind string
	Predicates            []Predicate
}

func (s EnqueueOwner) owner(o *Object) (Request, bool) {
	ref := o.ControllerOwner()
	if ref == nil || ref.GetKind() != s.OwnerKind {
		return Request{}, false
	}
	group := ""
	if i := strings.LastIndex(ref.GetApiVersion(), "/"); i >= 0 {
		group = ref.GetApiVersion()[:i]
	}
	if group != s.OwnerGroup {
		return Request{}, false
	}
	return Request{o.Namespace(), ref.GetName()}, true
}

// Handle enqueues the owner (and a former owner) of the changed object.
func (s EnqueueOwner) Handle(c Change, enqueue Enqueue) {
	if !passes(s.Predicates, c) {
		return
	}
	newOwner, okNew := s.owner(c.Obj)
	if okNew {
		enqueue(newOwner, c.Trace)
	}
	if c.Old != nil {
		if old, ok := s.owner(c.Old); ok && (!okNew || old != newOwner) {
			enqueue(old, c.Trace)
		}
	}
}

// EnqueueMapped enqueues the keys Mapper computes from the object (and from its previous
// state on an update). A panicking mapper is logged and yields no keys.
type EnqueueMapped struct {
	Mapper     Mapper
	Predicates []Predicate
}

// Handle enqueues the mapped keys.
func (s EnqueueMapped) Handle(c Change, enqueue Enqueue) {
	if !passes(s.Predicates, c) {
		return
	}
	keys, ok := s.keys(c)
	if !ok {
		return
	}
	for _, k := range keys {
		enqueue(k, c.Trace)
	}
}

func (s EnqueueMapped) keys(c Change) (keys []Request, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			slog.Error("mapper panicked", "object", c.Obj.Key(), "panic", r)
			keys, ok = nil, false
		}
	}()
	seen := map[Request]bool{}
	for _, o := range []*Object{c.Obj, c.Old} {
		if o == nil {
			continue
		}
		for _, k := range s.Mapper(o) {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys, true
}
