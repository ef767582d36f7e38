package steward

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	pb "github.com/steward-dev/steward/runtimes/go/gen/steward/v1"
)

// GroupKind names a kind of object: its API group ("" for the core group) and kind, e.g.
// {"apps", "ReplicaSet"}.
type GroupKind struct{ Group, Kind string }

func (gk GroupKind) String() string {
	if gk.Group == "" {
		return gk.Kind
	}
	return gk.Kind + "." + gk.Group
}

// OwnerFilter keeps the objects whose controller owner reference (the one with
// controller: true) is of one of Kinds; the group of a reference is its apiVersion's
// ("apps" of "apps/v1", "" of "v1").
type OwnerFilter struct {
	// Kinds of controller owner to keep.
	Kinds []GroupKind
	// Orphans also keeps the objects without a controller owner (those a controller may
	// adopt).
	Orphans bool
}

// SelectedBy keeps only the objects that some object of another type selects by its
// labels, in the same namespace: e.g. the pods selected by a Service's spec.selector,
//
//	&steward.SelectedBy{Type: steward.Services, Path: "spec.selector"}
//
// The informer makes the join (it holds both types): when a selector changes, the objects
// it starts to select arrive as Added and those no selector selects any more as Deleted,
// with their last state. Such a type is never resumed: on every (re)opened watch the
// informer sends REPLACED and a fresh snapshot, which the Mirror applies as any other
// (objects the snapshot lacks are reported Deleted). See SelectedBy in informer.proto.
type SelectedBy struct {
	// Type is the selecting type, e.g. Services; it must differ from the watched type.
	// The controller must be allowed to list and watch it too.
	Type *pb.ResourceType
	// Path is the dot-separated path of the selector in a selecting object: a map of
	// labels (a Service's "spec.selector") or a LabelSelector with matchLabels and
	// matchExpressions (a Deployment's "spec.selector"). An absent or empty selector
	// selects nothing.
	Path string
}

// sameJoin reports whether a and b select by the same type and path.
func (a *SelectedBy) sameJoin(b *SelectedBy) bool {
	return KeyOf(a.Type) == KeyOf(b.Type) && a.Path == b.Path
}

// clone is a deep copy (nil for nil).
func (a *SelectedBy) clone() *SelectedBy {
	if a == nil {
		return nil
	}
	k := KeyOf(a.Type)
	return &SelectedBy{Type: NewResourceType(k.Group, k.Version, k.Resource), Path: a.Path}
}

// Subscription is what one source of a controller needs the informer to send of its
// type: which objects (selectors, owner filter, selected by another type's selectors) and
// which of their fields (projection, metadata only). The informer applies it before it encodes an event, so objects and
// fields nobody asked for cost neither the informer nor the controller anything. The
// zero value asks for every object, whole.
//
// A controller watches each type once, so the subscriptions of the sources of one type
// (For, Owns, Watches naming the same type) are merged into the one target it sends (see
// Builder). The Mirror then holds what the informer sent: an object that stops passing
// the filters is seen as Deleted, one that starts to as Added, and Object.Raw of a
// projected type holds only what the projection keeps (WatchTarget.fields in
// informer.proto). Object.Meta, the parsed metadata every event carries (name,
// namespace, UID, resource version, labels, owner references, ...), is not projected:
// read those from it rather than from the decoded object.
type Subscription struct {
	// LabelSelector keeps only matching objects of this type (e.g. "app=web"); empty for
	// all. It applies on top of ControllerOptions.LabelSelector.
	LabelSelector string
	// FieldSelector keeps only matching objects of this type (metadata.name,
	// metadata.namespace); empty for all.
	FieldSelector string
	// OwnerFilter keeps only the objects controlled by one of its kinds (and, with
	// Orphans, those controlled by nobody); nil for all. An Owns source always keeps the
	// objects the primary kind controls.
	OwnerFilter *OwnerFilter
	// Fields is the projection: the dot-separated paths of the object to keep, e.g.
	// "spec.nodeName" or "status.conditions" (through a list, a path applies to each
	// item: "spec.containers.image"); empty for the whole object.
	Fields []string
	// MetadataOnly keeps only apiVersion, kind and metadata (without managedFields), plus
	// Fields: client-go's metadata-only informer.
	MetadataOnly bool
	// SelectedBy keeps only the objects some object of another type selects (e.g. the
	// pods of Services: {Type: Services, Path: "spec.selector"}); nil for all. A type
	// whose sources do not all give the same one receives every object.
	SelectedBy *SelectedBy
}

// wholeObject reports whether the source reads whole objects (no projection).
func (s Subscription) wholeObject() bool { return len(s.Fields) == 0 && !s.MetadataOnly }

// validate refuses what no informer would serve for a source of type t: a filter that
// keeps nothing, an unnamed kind, an empty path, a type selecting its own objects.
func (s Subscription) validate(t TypeKey) error {
	if f := s.OwnerFilter; f != nil {
		if len(f.Kinds) == 0 && !f.Orphans {
			return errors.New("an owner filter without kinds or orphans keeps no object (nil keeps every object)")
		}
		for _, gk := range f.Kinds {
			if gk.Kind == "" {
				return fmt.Errorf("owner filter kind %+v has no kind", gk)
			}
		}
	}
	for _, p := range s.Fields {
		if !validPath(p) {
			return fmt.Errorf("projection path %q is not dot-separated field names", p)
		}
	}
	if j := s.SelectedBy; j != nil {
		k := KeyOf(j.Type)
		if k.Version == "" || k.Resource == "" {
			return fmt.Errorf("selected by %+v: name the selecting type (version and resource)", k)
		}
		if k == t {
			return fmt.Errorf("selected by %s: a type cannot select objects of its own type", k)
		}
		if !validPath(j.Path) {
			return fmt.Errorf("selected by %s: selector path %q is not dot-separated field names (e.g. \"spec.selector\")", k, j.Path)
		}
	}
	return nil
}

// validPath reports whether p is dot-separated names, none of them empty.
func validPath(p string) bool { return p != "" && !slices.Contains(strings.Split(p, "."), "") }

// clone is a deep copy, so a caller's later changes do not reach a mirror.
func (s Subscription) clone() Subscription {
	s.Fields = slices.Clone(s.Fields)
	if f := s.OwnerFilter; f != nil {
		s.OwnerFilter = &OwnerFilter{Kinds: slices.Clone(f.Kinds), Orphans: f.Orphans}
	}
	s.SelectedBy = s.SelectedBy.clone()
	return s
}

// fill sets the target's subscription fields.
func (s Subscription) fill(t *pb.WatchTarget) {
	t.LabelSelector = s.LabelSelector
	t.FieldSelector = s.FieldSelector
	if f := s.OwnerFilter; f != nil {
		of := &pb.OwnerFilter{Orphans: f.Orphans}
		for _, gk := range f.Kinds {
			of.Kinds = append(of.Kinds, &pb.GroupKind{Group: gk.Group, Kind: gk.Kind})
		}
		t.OwnerFilter = of
	}
	t.Fields = slices.Clone(s.Fields)
	t.MetadataOnly = s.MetadataOnly
	if j := s.SelectedBy.clone(); j != nil {
		t.SelectedBy = &pb.SelectedBy{Type: j.Type, Path: j.Path}
	}
}

// sourceSubscription is the subscription of one source, and how errors name the source.
type sourceSubscription struct {
	from string
	sub  Subscription
}

// mergeSubscriptions merges the subscriptions of the sources of one type into the one
// its target carries, so that every source gets at least what it asked for:
//
//   - selectors: all must be the same (after trimming spaces), else an error: no one
//     selector serves two different ones;
//   - owner filter: none when a source has none, else the union of the kinds, with
//     orphans when any source keeps them;
//   - projection: the whole object when a source wants it; else the union of the fields,
//     metadata only when every source is — and when only some are, "metadata" joins the
//     fields, so those still get the whole metadata;
//   - selected by: kept when every source gives the same join (type and path), else none
//     (a source without one, or two different joins): one target cannot say "selected by
//     this or by that", so the type receives every object (as the Python runtime merges).
//
// Kinds and fields come out sorted, so equal needs make equal targets.
func mergeSubscriptions(t TypeKey, subs []sourceSubscription) (Subscription, error) {
	first := subs[0]
	out := Subscription{
		LabelSelector: strings.TrimSpace(first.sub.LabelSelector),
		FieldSelector: strings.TrimSpace(first.sub.FieldSelector),
	}
	for _, s := range subs[1:] {
		for _, sel := range []struct{ what, a, b string }{
			{"label selectors", out.LabelSelector, strings.TrimSpace(s.sub.LabelSelector)},
			{"field selectors", out.FieldSelector, strings.TrimSpace(s.sub.FieldSelector)},
		} {
			if sel.a != sel.b {
				return Subscription{}, fmt.Errorf(
					"the sources of %s ask for different %s: %q (%s) and %q (%s); a type is watched once, with one selector, so give its sources the same one",
					t, sel.what, sel.a, first.from, sel.b, s.from)
			}
		}
	}

	out.SelectedBy = first.sub.SelectedBy.clone()
	for _, s := range subs[1:] {
		if out.SelectedBy == nil || s.sub.SelectedBy == nil || !out.SelectedBy.sameJoin(s.sub.SelectedBy) {
			out.SelectedBy = nil
			break
		}
	}

	owners := &OwnerFilter{}
	for _, s := range subs {
		f := s.sub.OwnerFilter
		if f == nil { // this source reads objects of any owner
			owners = nil
			break
		}
		owners.Orphans = owners.Orphans || f.Orphans
		for _, gk := range f.Kinds {
			if !slices.Contains(owners.Kinds, gk) {
				owners.Kinds = append(owners.Kinds, gk)
			}
		}
	}
	if owners != nil {
		slices.SortFunc(owners.Kinds, func(a, b GroupKind) int {
			return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Kind, b.Kind))
		})
	}
	out.OwnerFilter = owners

	whole, allMeta, anyMeta := false, true, false
	for _, s := range subs {
		whole = whole || s.sub.wholeObject()
		allMeta = allMeta && s.sub.MetadataOnly
		anyMeta = anyMeta || s.sub.MetadataOnly
	}
	if whole {
		return out, nil
	}
	for _, s := range subs {
		for _, p := range s.sub.Fields {
			if !slices.Contains(out.Fields, p) {
				out.Fields = append(out.Fields, p)
			}
		}
	}
	out.MetadataOnly = allMeta
	if anyMeta && !allMeta && !slices.Contains(out.Fields, "metadata") {
		out.Fields = append(out.Fields, "metadata")
	}
	slices.Sort(out.Fields)
	return out, nil
}
