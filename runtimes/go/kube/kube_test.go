package kube_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/steward-dev/steward/runtimes/go/kube"
	"github.com/steward-dev/steward/runtimes/go/steward"
)

// arrivals is a local HTTP server that only records which requests reached it and
// answers {} to each: it observes what the client sends, it does not play the API server.
type arrivals struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func newArrivals(t *testing.T) *arrivals {
	t.Helper()
	a := &arrivals{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Method+" "+r.URL.Path)
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *arrivals) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

func (a *arrivals) client() *kube.Client {
	return kube.NewClient(&kube.Config{Server: a.srv.URL}, "steward-test")
}

const cmPath = "/api/v1/namespaces/default/configmaps/c"

func TestWriteFenceDownSendsNoWrite(t *testing.T) {
	a := newArrivals(t)
	api := a.client()
	var up atomic.Bool
	api.SetWriteFence(up.Load)
	ctx := context.Background()

	for _, method := range []string{http.MethodPatch, http.MethodPost, http.MethodPut, http.MethodDelete} {
		err := api.Do(ctx, method, cmPath+"?fieldManager=t", "", map[string]any{"data": map[string]string{"k": "v"}}, nil)
		var fenced *kube.FencedError
		if !errors.As(err, &fenced) || !errors.Is(err, kube.ErrFenced) || !kube.IsFenced(err) {
			t.Fatalf("%s with the fence down: got %v, want a *FencedError", method, err)
		}
		if fenced.Method != method || fenced.Path != cmPath {
			t.Errorf("FencedError names %s %s, want %s %s", fenced.Method, fenced.Path, method, cmPath)
		}
	}
	if got := api.FencedWrites(); got != 4 {
		t.Errorf("FencedWrites() = %d, want 4", got)
	}
	if got := a.requests(); len(got) != 0 {
		t.Fatalf("fenced writes reached the server: %v", got)
	}

	// Reads are never fenced.
	var out map[string]any
	if err := api.Do(ctx, http.MethodGet, cmPath, "", nil, &out); err != nil {
		t.Fatalf("GET with the fence down: %v", err)
	}
	if got := a.requests(); len(got) != 1 || got[0] != "GET "+cmPath {
		t.Fatalf("after a GET the server saw %v, want [GET %s]", got, cmPath)
	}

	// The fence is asked at each write: raised, the same client sends.
	up.Store(true)
	if err := api.MergePatch(ctx, cmPath, map[string]any{"metadata": map[string]any{}}, nil); err != nil {
		t.Fatalf("PATCH with the fence up: %v", err)
	}
	if got := a.requests(); len(got) != 2 || got[1] != "PATCH "+cmPath {
		t.Fatalf("after a PATCH with the fence up the server saw %v", got)
	}
	if got := api.FencedWrites(); got != 4 {
		t.Errorf("FencedWrites() = %d after an allowed write, want 4", got)
	}

	// Removing the fence lets every write through.
	up.Store(false)
	api.SetWriteFence(nil)
	if err := api.Do(ctx, http.MethodDelete, cmPath, "", nil, nil); err != nil {
		t.Fatalf("DELETE without a fence: %v", err)
	}
	if got := a.requests(); len(got) != 3 {
		t.Fatalf("after a DELETE without a fence the server saw %v", got)
	}
}

func TestControllerFenceWithoutSessionLetsWritesThrough(t *testing.T) {
	a := newArrivals(t)
	api := a.client()
	ctrl, err := steward.NewBuilder("fence-test").
		For(steward.ConfigMaps, "ConfigMap").
		Complete(nil, func(*steward.Mirror) steward.Reconciler { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctrl.Fence(api)
	// Without a manager session the controller may always reconcile, so it may write.
	if err := api.MergePatch(context.Background(), cmPath, map[string]any{}, nil); err != nil {
		t.Fatalf("PATCH through a controller without a session: %v", err)
	}
	if got := a.requests(); len(got) != 1 || api.FencedWrites() != 0 {
		t.Fatalf("server saw %v, fenced %d; want one PATCH, none fenced", got, api.FencedWrites())
	}
}

func TestFencedClientKeepsItsFence(t *testing.T) {
	a := newArrivals(t)
	var up atomic.Bool
	api := kube.NewFencedClient(&kube.Config{Server: a.srv.URL}, "steward-test", up.Load)
	if !api.Fenced() {
		t.Fatal("NewFencedClient: Fenced() is false")
	}
	ctx := context.Background()
	if err := api.MergePatch(ctx, cmPath, map[string]any{}, nil); !kube.IsFenced(err) {
		t.Fatalf("PATCH with the fence down: %v, want ErrFenced", err)
	}
	// Neither removing nor replacing the settable fence lifts the construction-time one.
	api.SetWriteFence(nil)
	if err := api.MergePatch(ctx, cmPath, map[string]any{}, nil); !kube.IsFenced(err) {
		t.Fatalf("PATCH after SetWriteFence(nil): %v, want ErrFenced", err)
	}
	api.SetWriteFence(func() bool { return true })
	if err := api.Do(ctx, http.MethodDelete, cmPath, "", nil, nil); !kube.IsFenced(err) {
		t.Fatalf("DELETE under an always-open extra fence: %v, want ErrFenced", err)
	}
	// Reads are never fenced.
	if err := api.Do(ctx, http.MethodGet, cmPath, "", nil, nil); err != nil {
		t.Fatalf("GET with the fence down: %v", err)
	}
	if got := a.requests(); len(got) != 1 || got[0] != "GET "+cmPath {
		t.Fatalf("the server saw %v; want only the GET", got)
	}
	// Both fences up: the write goes.
	up.Store(true)
	if err := api.MergePatch(ctx, cmPath, map[string]any{}, nil); err != nil {
		t.Fatalf("PATCH with both fences up: %v", err)
	}
	// The extra fence still counts.
	api.SetWriteFence(func() bool { return false })
	if err := api.MergePatch(ctx, cmPath, map[string]any{}, nil); !kube.IsFenced(err) {
		t.Fatalf("PATCH with the extra fence down: %v, want ErrFenced", err)
	}
	if n := api.FencedWrites(); n != 4 {
		t.Fatalf("FencedWrites() = %d, want 4", n)
	}
}
