package steward

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	pb "github.com/steward-dev/steward/runtimes/go/gen/steward/v1"
)

var noKeys Mapper = func(*Object) []Request { return nil }

func newNop(*Mirror) Reconciler { return nopReconciler{} }

// firstRequest runs the controller's mirror against the scripted informer until it has
// opened its watch, and returns the WatchRequest the informer received.
func firstRequest(t *testing.T, inf *scriptedInformer, c *Controller) *pb.WatchRequest {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Mirror.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "the watch", func() bool { return len(inf.requests()) == 1 })
	return inf.requests()[0]
}

// sameMessage fails the test unless got equals want.
func sameMessage(t *testing.T, what string, want, got proto.Message) {
	t.Helper()
	if !proto.Equal(want, got) {
		t.Fatalf("%s:\n%s\nwant:\n%s", what, prototext.Format(got), prototext.Format(want))
	}
}

func target(rt *pb.ResourceType, edit func(*pb.WatchTarget)) *pb.WatchTarget {
	wt := &pb.WatchTarget{Type: rt}
	if edit != nil {
		edit(wt)
	}
	return wt
}

func TestBuilderSendsEachTypesMergedSubscription(t *testing.T) {
	inf, conn := startInformer(t)
	deployment := GroupKind{"apps", "Deployment"}
	rollout := GroupKind{"example.com", "Rollout"}
	endpoints := NewResourceType("", "v1", "endpoints")
	byServices := func() *SelectedBy { return &SelectedBy{Type: Services, Path: "spec.selector"} }
	c, err := NewBuilder("subs").
		// The primary type, narrowed by a selector.
		For(Deployments, "Deployment").WithSubscription(Subscription{LabelSelector: "tier=web", FieldSelector: "metadata.namespace=prod"}).
		// Owned (the primary kind, another kind, orphans) and watched with that other
		// kind: the union of the kinds, orphans, the union of the fields; sorted.
		// Selected by the same type at two paths: every object.
		Owns(ReplicaSets).WithSubscription(Subscription{OwnerFilter: &OwnerFilter{Kinds: []GroupKind{rollout, deployment}, Orphans: true}, Fields: []string{"status", "spec.replicas"}, SelectedBy: byServices()}).
		Watches(ReplicaSets, noKeys).WithSubscription(Subscription{OwnerFilter: &OwnerFilter{Kinds: []GroupKind{rollout}}, Fields: []string{"status", "metadata.labels"}, SelectedBy: &SelectedBy{Type: Services, Path: "spec.other"}}).
		// Owned, and watched without an owner filter: no owner filter; whole objects, as
		// the owns source reads them whole.
		Owns(Pods).
		Watches(Pods, noKeys).WithSubscription(Subscription{MetadataOnly: true}).
		// Metadata only for every source: metadata only, the fields' union. Selected by
		// one source only: every object.
		Watches(ConfigMaps, noKeys).WithSubscription(Subscription{MetadataOnly: true, SelectedBy: byServices()}).
		Watches(ConfigMaps, noKeys).WithSubscription(Subscription{MetadataOnly: true, Fields: []string{"data"}}).
		// Metadata only for one source, a projection for the other: the projection, with
		// the metadata; the same selectors (up to spaces) agree; the same join (another
		// but equal ResourceType) is kept.
		Watches(Secrets, noKeys).WithSubscription(Subscription{MetadataOnly: true, LabelSelector: "app=x ", SelectedBy: byServices()}).
		Watches(Secrets, noKeys).WithSubscription(Subscription{Fields: []string{"type"}, LabelSelector: " app=x", SelectedBy: &SelectedBy{Type: NewResourceType("", "v1", "services"), Path: "spec.selector"}}).
		// Selected by two types at the same path: every object.
		Watches(endpoints, noKeys).WithSubscription(Subscription{SelectedBy: byServices()}).
		Watches(endpoints, noKeys).WithSubscription(Subscription{SelectedBy: &SelectedBy{Type: Deployments, Path: "spec.selector"}}).
		// Owned only: the primary kind's, whole; its one source's join.
		Owns(Jobs).WithSubscription(Subscription{SelectedBy: &SelectedBy{Type: Deployments, Path: "spec.selector"}}).
		WithOptions(ControllerOptions{Namespace: "prod", LabelSelector: "team=a"}).
		Complete(conn, newNop)
	if err != nil {
		t.Fatal(err)
	}
	req := firstRequest(t, inf, c)
	want := &pb.WatchRequest{
		Namespace:     "prod",
		LabelSelector: "team=a",
		Subscriber:    "subs",
		Targets: []*pb.WatchTarget{
			target(Deployments, func(wt *pb.WatchTarget) {
				wt.LabelSelector, wt.FieldSelector = "tier=web", "metadata.namespace=prod"
			}),
			target(ReplicaSets, func(wt *pb.WatchTarget) {
				wt.OwnerFilter = &pb.OwnerFilter{
					Kinds:   []*pb.GroupKind{{Group: "apps", Kind: "Deployment"}, {Group: "example.com", Kind: "Rollout"}},
					Orphans: true,
				}
				wt.Fields = []string{"metadata.labels", "spec.replicas", "status"}
			}),
			target(Pods, nil),
			target(ConfigMaps, func(wt *pb.WatchTarget) {
				wt.MetadataOnly = true
				wt.Fields = []string{"data"}
			}),
			target(Secrets, func(wt *pb.WatchTarget) {
				wt.LabelSelector = "app=x"
				wt.Fields = []string{"metadata", "type"}
				wt.SelectedBy = &pb.SelectedBy{Type: Services, Path: "spec.selector"}
			}),
			target(endpoints, nil),
			target(Jobs, func(wt *pb.WatchTarget) {
				wt.OwnerFilter = &pb.OwnerFilter{Kinds: []*pb.GroupKind{{Group: "apps", Kind: "Deployment"}}}
				wt.SelectedBy = &pb.SelectedBy{Type: Deployments, Path: "spec.selector"}
			}),
		},
	}
	sameMessage(t, "WatchRequest", want, req)
}

func TestBuilderOwnsFiltersOnThePrimaryKindByDefault(t *testing.T) {
	inf, conn := startInformer(t)
	c, err := NewBuilder("rs").
		For(ReplicaSets, "ReplicaSet").
		Owns(Pods).
		Complete(conn, newNop)
	if err != nil {
		t.Fatal(err)
	}
	req := firstRequest(t, inf, c)
	want := &pb.WatchRequest{Subscriber: "rs", Targets: []*pb.WatchTarget{
		{Type: ReplicaSets},
		{Type: Pods, OwnerFilter: &pb.OwnerFilter{Kinds: []*pb.GroupKind{{Group: "apps", Kind: "ReplicaSet"}}}},
	}}
	sameMessage(t, "WatchRequest", want, req)
}

func TestBuilderRefusesSourcesOfATypeWithDifferentSelectors(t *testing.T) {
	_, conn := startInformer(t)
	for _, tc := range []struct {
		name string
		b    *Builder
		want []string
	}{
		{
			"label selectors",
			NewBuilder("c").
				For(Deployments, "Deployment").WithSubscription(Subscription{LabelSelector: "app=a"}).
				Watches(Deployments, noKeys).WithSubscription(Subscription{LabelSelector: "app=b"}),
			[]string{`controller "c"`, "apps/v1/deployments", "different label selectors", `"app=a" (source 1, For)`, `"app=b" (source 2, Watches)`},
		},
		{
			"a field selector and none",
			NewBuilder("c").
				For(Deployments, "Deployment").
				Owns(Pods).WithSubscription(Subscription{FieldSelector: "metadata.name=x"}).
				Watches(Pods, noKeys),
			[]string{"v1/pods", "different field selectors", `"metadata.name=x" (source 2, Owns)`, `"" (source 3, Watches)`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.b.Complete(conn, newNop)
			if err == nil {
				t.Fatal("Complete accepted sources of one type with different selectors")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestBuilderRefusesMisusedSubscriptions(t *testing.T) {
	_, conn := startInformer(t)
	for _, tc := range []struct {
		name string
		b    *Builder
		want string
	}{
		{"before any source", NewBuilder("c").WithSubscription(Subscription{}).For(Pods, "Pod"), "WithSubscription follows"},
		{"twice", NewBuilder("c").For(Pods, "Pod").WithSubscription(Subscription{}).WithSubscription(Subscription{}), "already has a subscription"},
		{"an owner filter keeping nothing", NewBuilder("c").For(Pods, "Pod").WithSubscription(Subscription{OwnerFilter: &OwnerFilter{}}), "keeps no object"},
		{"a kind without a name", NewBuilder("c").For(Pods, "Pod").WithSubscription(Subscription{OwnerFilter: &OwnerFilter{Kinds: []GroupKind{{Group: "apps"}}}}), "has no kind"},
		{"an empty path", NewBuilder("c").For(Pods, "Pod").WithSubscription(Subscription{Fields: []string{"spec..nodeName"}}), "not dot-separated"},
		{"an empty selector path", NewBuilder("c").For(Pods, "Pod").Watches(ConfigMaps, noKeys).WithSubscription(Subscription{SelectedBy: &SelectedBy{Type: Services}}), `selector path "" is not dot-separated`},
		{"an empty selector path segment", NewBuilder("c").For(Pods, "Pod").WithSubscription(Subscription{SelectedBy: &SelectedBy{Type: Services, Path: "spec."}}), `selector path "spec." is not dot-separated`},
		{"a type selecting its own objects", NewBuilder("c").For(Deployments, "Deployment").Owns(Pods).WithSubscription(Subscription{SelectedBy: &SelectedBy{Type: NewResourceType("", "v1", "pods"), Path: "spec.selector"}}), "v1/pods: a type cannot select objects of its own type"},
		{"no selecting type", NewBuilder("c").For(Pods, "Pod").WithSubscription(Subscription{SelectedBy: &SelectedBy{Path: "spec.selector"}}), "name the selecting type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.b.Complete(conn, newNop)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Complete = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// A type selected by another is never resumed: on reconnecting, the informer sends
// REPLACED and a fresh snapshot, after which the mirror holds just that snapshot.
func TestMirrorResumesWithItsSubscriptions(t *testing.T) {
	inf, conn := startInformer(t)
	sub := Subscription{
		LabelSelector: "app=web",
		OwnerFilter:   &OwnerFilter{Kinds: []GroupKind{{"apps", "ReplicaSet"}}, Orphans: true},
		Fields:        []string{"data"},
		MetadataOnly:  true,
		SelectedBy:    &SelectedBy{Type: NewResourceType("", "v1", "services"), Path: "spec.selector"},
	}
	if _, err := NewMirror(conn, []*pb.ResourceType{ConfigMaps}, MirrorOptions{Subscriptions: map[TypeKey]Subscription{KeyOf(Pods): sub}}, nil); err == nil {
		t.Fatal("NewMirror accepted a subscription for a type it does not watch")
	}
	own := sub
	own.SelectedBy = &SelectedBy{Type: ConfigMaps, Path: "spec.selector"}
	if _, err := NewMirror(conn, []*pb.ResourceType{ConfigMaps}, MirrorOptions{Subscriptions: map[TypeKey]Subscription{cmKey: own}}, nil); err == nil || !strings.Contains(err.Error(), "its own type") {
		t.Fatalf("NewMirror = %v for a type selecting its own objects", err)
	}
	m, err := NewMirror(conn, []*pb.ResourceType{ConfigMaps}, MirrorOptions{
		InitialBackoff: 10 * time.Millisecond,
		Subscriptions:  map[TypeKey]Subscription{cmKey: sub},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	m.AddHandler(rec.handle)
	// The mirror keeps its own copy.
	sub.Fields[0] = "changed"
	sub.SelectedBy.Type.Resource, sub.SelectedBy.Path = "changed", "changed"
	inf.scripts <- script{batches: [][]*pb.Event{{
		cmEvent(pb.EventType_EVENT_TYPE_ADDED, "a", "one", "5", "", 0),
		cmEvent(pb.EventType_EVENT_TYPE_ADDED, "a", "kept", "4", "", 0),
		marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "5"),
	}}}
	inf.scripts <- script{batches: [][]*pb.Event{
		{marker(pb.EventType_EVENT_TYPE_REPLACED, ""), cmEvent(pb.EventType_EVENT_TYPE_ADDED, "a", "kept", "4", "", 0)},
		{cmEvent(pb.EventType_EVENT_TYPE_ADDED, "a", "two", "6", "", 0), marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "7")},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "the watch after the replacement", func() bool { return len(inf.requests()) == 3 })
	for i, rv := range []string{"", "5", "7"} {
		want := &pb.WatchTarget{
			Type:            ConfigMaps,
			ResourceVersion: rv,
			LabelSelector:   "app=web",
			OwnerFilter:     &pb.OwnerFilter{Kinds: []*pb.GroupKind{{Group: "apps", Kind: "ReplicaSet"}}, Orphans: true},
			Fields:          []string{"data"},
			MetadataOnly:    true,
			SelectedBy:      &pb.SelectedBy{Type: Services, Path: "spec.selector"},
		}
		sameMessage(t, fmt.Sprintf("target of watch %d", i+1), want, inf.requests()[i].GetTargets()[0])
	}
	got := strings.Join(rec.take(), ", ")
	if want := "added a/one@5, added a/kept@4, added a/two@6, deleted a/one@5"; got != want {
		t.Fatalf("changes = %s, want %s", got, want)
	}
	if m.Get(cmKey, "a", "one") != nil || m.Get(cmKey, "a", "two") == nil || m.ResourceVersion(cmKey) != "7" {
		t.Fatal("the mirror must hold the replacement snapshot, at its resource version")
	}
}
