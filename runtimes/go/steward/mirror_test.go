package steward

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/steward-dev/steward/runtimes/go/gen/steward/v1"
)

// script is what one Watch call of the scripted informer sends: batches; when gate is
// set, once it is closed, after; then the end of the stream (nil: closed by the server;
// else that status), or with hold nothing more until the client cancels.
type script struct {
	batches [][]*pb.Event
	gate    chan struct{}
	after   [][]*pb.Event
	hold    bool
	end     error
}

// scriptedInformer is a real gRPC InformerService that plays scripts, one per Watch
// call, and records the requests and how many streams the client cancelled while they
// were held. With no script left, a Watch waits until cancelled.
type scriptedInformer struct {
	pb.UnimplementedInformerServiceServer
	scripts   chan script
	mu        sync.Mutex
	reqs      []*pb.WatchRequest
	cancelled int
}

func (s *scriptedInformer) Watch(req *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchResponse]) error {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	select {
	case sc := <-s.scripts:
		for _, b := range sc.batches {
			if err := stream.Send(&pb.WatchResponse{Events: b}); err != nil {
				return err
			}
		}
		if sc.gate != nil {
			select {
			case <-sc.gate:
			case <-stream.Context().Done():
				return stream.Context().Err()
			}
			for _, b := range sc.after {
				if err := stream.Send(&pb.WatchResponse{Events: b}); err != nil {
					return err
				}
			}
		}
		if sc.hold {
			<-stream.Context().Done()
			s.mu.Lock()
			s.cancelled++
			s.mu.Unlock()
			return stream.Context().Err()
		}
		return sc.end
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
}

func (s *scriptedInformer) cancelledStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled
}

func (s *scriptedInformer) requests() []*pb.WatchRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*pb.WatchRequest(nil), s.reqs...)
}

func startInformer(t *testing.T) (*scriptedInformer, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	inf := &scriptedInformer{scripts: make(chan script, 16)}
	pb.RegisterInformerServiceServer(srv, inf)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return inf, conn
}

func cmEvent(typ pb.EventType, ns, name, rv, streamRV string, trace int) *pb.Event {
	ev := &pb.Event{
		Type:            typ,
		ResourceType:    ConfigMaps,
		Metadata:        &pb.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv},
		Object:          []byte(`{"metadata":{"name":"` + name + `","namespace":"` + ns + `","resourceVersion":"` + rv + `"}}`),
		ResourceVersion: streamRV,
	}
	if trace > 0 {
		ev.TraceContext = &pb.TraceContext{Traceparent: tc(trace).Traceparent}
	}
	return ev
}

func marker(typ pb.EventType, rv string) *pb.Event {
	return &pb.Event{Type: typ, ResourceType: ConfigMaps, ResourceVersion: rv}
}

type recorder struct {
	mu      sync.Mutex
	changes []Change
}

func (r *recorder) handle(c Change) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.changes {
		out = append(out, c.Kind.String()+" "+c.Obj.Key().Namespace+"/"+c.Obj.Key().Name+"@"+c.Obj.ResourceVersion())
	}
	r.changes = nil
	return out
}

func runMirror(t *testing.T, conn *grpc.ClientConn) (*Mirror, *recorder, chan error) {
	t.Helper()
	return runMirrorOf(t, conn, []*pb.ResourceType{ConfigMaps}, 10*time.Millisecond)
}

func runMirrorOf(t *testing.T, conn *grpc.ClientConn, types []*pb.ResourceType, backoff time.Duration) (*Mirror, *recorder, chan error) {
	t.Helper()
	m, err := NewMirror(conn, types, MirrorOptions{Subscriber: "test", InitialBackoff: backoff}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	m.AddHandler(rec.handle)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, rec, done
}

var cmKey = KeyOf(ConfigMaps)

func TestMirrorSyncsResumesAndIndexes(t *testing.T) {
	inf, conn := startInformer(t)
	inf.scripts <- script{batches: [][]*pb.Event{
		{cmEvent(pb.EventType_EVENT_TYPE_ADDED, "a", "one", "5", "", 1), cmEvent(pb.EventType_EVENT_TYPE_ADDED, "b", "two", "6", "", 0)},
		{marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "6"), marker(pb.EventType_EVENT_TYPE_BOOKMARK, "9")},
	}}
	m, rec, _ := runMirror(t, conn)
	<-m.Synced()
	if got := m.Get(cmKey, "a", "one"); got == nil || got.ResourceVersion() != "5" {
		t.Fatalf("Get = %v", got)
	}
	if ns := m.ListNamespace(cmKey, "b"); len(ns) != 1 || ns[0].Name() != "two" {
		t.Fatalf("namespace index = %v", ns)
	}
	eventually(t, "the bookmark", func() bool { return m.ResourceVersion(cmKey) == "9" })
	if got := rec.take(); len(got) != 2 {
		t.Fatalf("changes = %v", got)
	}
	// The stream ended; the mirror resumes from the bookmark's version.
	eventually(t, "a resumed watch", func() bool { return len(inf.requests()) == 2 })
	reqs := inf.requests()
	if reqs[0].GetTargets()[0].GetResourceVersion() != "" || reqs[1].GetTargets()[0].GetResourceVersion() != "9" {
		t.Fatalf("resume versions: %q then %q", reqs[0].GetTargets()[0].GetResourceVersion(), reqs[1].GetTargets()[0].GetResourceVersion())
	}
	if reqs[1].GetSubscriber() != "test" {
		t.Fatal("the subscriber name is sent")
	}
	inf.scripts <- script{batches: [][]*pb.Event{{
		marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "9"),
		cmEvent(pb.EventType_EVENT_TYPE_MODIFIED, "a", "one", "10", "10", 2),
		cmEvent(pb.EventType_EVENT_TYPE_DELETED, "b", "two", "11", "11", 3),
	}}, end: status.Error(codes.Unavailable, "informer going away")}
	eventually(t, "the resumed events", func() bool { return m.ResourceVersion(cmKey) == "11" })
	if m.Get(cmKey, "b", "two") != nil || len(m.ListNamespace(cmKey, "b")) != 0 {
		t.Fatal("the deleted object must be gone, index included")
	}
	if got := rec.take(); len(got) != 2 || got[0] != "modified a/one@10" || got[1] != "deleted b/two@11" {
		t.Fatalf("changes = %v", got)
	}
	eventually(t, "a watch after UNAVAILABLE", func() bool { return len(inf.requests()) == 3 })
	if rv := inf.requests()[2].GetTargets()[0].GetResourceVersion(); rv != "11" {
		t.Fatalf("resumed from %q, want 11", rv)
	}
	if m.Reconnects() < 2 {
		t.Fatal("reconnects are counted")
	}
}

func TestMirrorReplacedDeletesWhatTheSnapshotLacks(t *testing.T) {
	inf, conn := startInformer(t)
	inf.scripts <- script{batches: [][]*pb.Event{{
		cmEvent(pb.EventType_EVENT_TYPE_ADDED, "ns", "keep", "1", "", 0),
		cmEvent(pb.EventType_EVENT_TYPE_ADDED, "ns", "change", "2", "", 0),
		cmEvent(pb.EventType_EVENT_TYPE_ADDED, "ns", "gone", "3", "", 0),
		marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "3"),
	}}}
	m, rec, _ := runMirror(t, conn)
	<-m.Synced()
	rec.take()
	// A REPLACED snapshot cut off midway infers nothing.
	inf.scripts <- script{batches: [][]*pb.Event{{
		marker(pb.EventType_EVENT_TYPE_REPLACED, ""),
		cmEvent(pb.EventType_EVENT_TYPE_ADDED, "ns", "keep", "1", "", 0),
	}}}
	eventually(t, "the cut-off snapshot to be read", func() bool { return len(inf.requests()) >= 3 })
	if got := rec.take(); len(got) != 0 || m.Get(cmKey, "ns", "gone") == nil {
		t.Fatalf("a cut-off snapshot must not delete anything: %v", got)
	}
	inf.scripts <- script{batches: [][]*pb.Event{
		{marker(pb.EventType_EVENT_TYPE_REPLACED, ""), cmEvent(pb.EventType_EVENT_TYPE_ADDED, "ns", "keep", "1", "", 0)},
		{cmEvent(pb.EventType_EVENT_TYPE_ADDED, "ns", "change", "7", "", 4), marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "8")},
	}}
	eventually(t, "the replacement", func() bool { return m.ResourceVersion(cmKey) == "8" })
	got := rec.take()
	if len(got) != 2 || got[0] != "modified ns/change@7" || got[1] != "deleted ns/gone@3" {
		t.Fatalf("changes after REPLACED = %v", got)
	}
}

func TestMirrorPermanentErrorIsReturned(t *testing.T) {
	inf, conn := startInformer(t)
	inf.scripts <- script{end: status.Error(codes.PermissionDenied, "system:serviceaccount:x may not watch configmaps")}
	m, err := NewMirror(conn, []*pb.ResourceType{ConfigMaps}, MirrorOptions{InitialBackoff: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = m.Run(context.Background())
	var merr *MirrorError
	if !errors.As(err, &merr) || merr.Code != codes.PermissionDenied || merr.Message != "system:serviceaccount:x may not watch configmaps" {
		t.Fatalf("Run = %v", err)
	}
	if len(inf.requests()) != 1 {
		t.Fatal("a permanent error is not retried")
	}
}

func podMarker(typ pb.EventType, rv string) *pb.Event {
	return &pb.Event{Type: typ, ResourceType: Pods, ResourceVersion: rv}
}

// startCatchUp calls CatchUp in the background; the channel gets its result.
func startCatchUp(ctx context.Context, m *Mirror) chan error {
	out := make(chan error, 1)
	go func() { out <- m.CatchUp(ctx) }()
	return out
}

func assertPending(t *testing.T, caught chan error, when string) {
	t.Helper()
	select {
	case err := <-caught:
		t.Fatalf("CatchUp returned (%v) %s", err, when)
	default:
	}
}

func awaitCaughtUp(t *testing.T, caught chan error) {
	t.Helper()
	select {
	case err := <-caught:
		if err != nil {
			t.Fatalf("CatchUp = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting for CatchUp")
	}
}

func TestMirrorCatchUpReopensAStuckStream(t *testing.T) {
	inf, conn := startInformer(t)
	// The first stream reaches the present, then is stuck: it sends nothing more.
	inf.scripts <- script{batches: [][]*pb.Event{{
		cmEvent(pb.EventType_EVENT_TYPE_ADDED, "ns", "one", "5", "", 0),
		marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "5"),
		podMarker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "6"),
		marker(pb.EventType_EVENT_TYPE_BOOKMARK, "7"),
	}}, hold: true}
	// A backoff this long would outlast the test: the reopening must not wait for it.
	m, rec, _ := runMirrorOf(t, conn, []*pb.ResourceType{ConfigMaps, Pods}, time.Hour)
	<-m.Synced()
	eventually(t, "the bookmark", func() bool { return m.ResourceVersion(cmKey) == "7" })
	rec.take()

	caught := startCatchUp(context.Background(), m)
	eventually(t, "a second watch", func() bool { return len(inf.requests()) == 2 })
	eventually(t, "the stuck stream to be cancelled", func() bool { return inf.cancelledStreams() == 1 })
	req := inf.requests()[1]
	if cm, pod := req.GetTargets()[0].GetResourceVersion(), req.GetTargets()[1].GetResourceVersion(); cm != "7" || pod != "6" {
		t.Fatalf("the second watch resumes from %q and %q, want 7 and 6", cm, pod)
	}
	assertPending(t, caught, "before the second stream sent anything")

	// The second stream sends what the first one held back and one type's
	// INITIAL_EVENTS_END; CatchUp waits for every type's.
	gate := make(chan struct{})
	inf.scripts <- script{
		batches: [][]*pb.Event{{
			cmEvent(pb.EventType_EVENT_TYPE_ADDED, "ns", "two", "8", "8", 0),
			marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "8"),
		}},
		gate:  gate,
		after: [][]*pb.Event{{podMarker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "8")}},
		hold:  true,
	}
	eventually(t, "the second stream's events", func() bool { return m.Get(cmKey, "ns", "two") != nil })
	assertPending(t, caught, "before every type's INITIAL_EVENTS_END on the second stream")
	close(gate)
	awaitCaughtUp(t, caught)
	if got := rec.take(); len(got) != 1 || got[0] != "added ns/two@8" {
		t.Fatalf("changes = %v: each event is delivered once", got)
	}
	if n := len(inf.requests()); n != 2 {
		t.Fatalf("%d watches, want 2", n)
	}
}

func TestMirrorCatchUpWaitsAcrossAFailedStream(t *testing.T) {
	inf, conn := startInformer(t)
	inf.scripts <- script{batches: [][]*pb.Event{{
		cmEvent(pb.EventType_EVENT_TYPE_ADDED, "ns", "one", "5", "", 0),
		marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "5"),
	}}, hold: true}
	m, _, _ := runMirror(t, conn)
	<-m.Synced()

	caught := startCatchUp(context.Background(), m)
	eventually(t, "a second watch", func() bool { return len(inf.requests()) == 2 })
	// The reopened stream fails before its INITIAL_EVENTS_END.
	inf.scripts <- script{batches: [][]*pb.Event{{
		cmEvent(pb.EventType_EVENT_TYPE_ADDED, "ns", "two", "8", "8", 0),
	}}, end: status.Error(codes.Unavailable, "informer going away")}
	eventually(t, "a third watch", func() bool { return len(inf.requests()) == 3 })
	if rv := inf.requests()[2].GetTargets()[0].GetResourceVersion(); rv != "8" {
		t.Fatalf("the third watch resumes from %q, want 8", rv)
	}
	if m.Get(cmKey, "ns", "two") == nil {
		t.Fatal("the failed stream's event is applied")
	}
	assertPending(t, caught, "although no stream since the call reached the present")

	inf.scripts <- script{batches: [][]*pb.Event{{
		cmEvent(pb.EventType_EVENT_TYPE_ADDED, "ns", "three", "9", "9", 0),
		marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "9"),
	}}, hold: true}
	awaitCaughtUp(t, caught)
	if m.Get(cmKey, "ns", "three") == nil {
		t.Fatal("CatchUp returned before the third stream's events were applied")
	}
}

func TestMirrorCatchUpReturnsWhenCancelled(t *testing.T) {
	inf, conn := startInformer(t)
	inf.scripts <- script{batches: [][]*pb.Event{{marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "5")}}, hold: true}
	m, _, _ := runMirror(t, conn)
	<-m.Synced()
	ctx, cancel := context.WithCancel(context.Background())
	caught := startCatchUp(ctx, m)
	eventually(t, "a second watch", func() bool { return len(inf.requests()) == 2 })
	cancel()
	select {
	case err := <-caught:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("CatchUp = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("CatchUp did not return when cancelled")
	}
	m.barrierMu.Lock()
	left := len(m.barriers) + len(m.streamBarriers)
	m.barrierMu.Unlock()
	if left != 0 {
		t.Fatalf("%d barriers left behind", left)
	}
	// The mirror goes on: a later CatchUp is answered by the next stream.
	caught = startCatchUp(context.Background(), m)
	eventually(t, "a third watch", func() bool { return len(inf.requests()) == 3 })
	inf.scripts <- script{batches: [][]*pb.Event{{marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "6")}}, hold: true}
	awaitCaughtUp(t, caught)
}
