package steward

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/steward-dev/steward/runtimes/go/gen/steward/v1"
	"github.com/steward-dev/steward/runtimes/go/kube"
)

type nopReconciler struct{}

func (nopReconciler) Reconcile(context.Context, Request) (Result, error) { return Result{}, nil }

// testBuilder's controller reports to metrics of its own (not DefaultMetrics), which its
// host serves.
func testBuilder() *Builder {
	return NewBuilder("host-test").
		For(ConfigMaps, "ConfigMap").
		WithOptions(ControllerOptions{MaxConcurrentReconciles: 3, Namespace: "default", Metrics: NewMetrics()})
}

func quietHost(b *Builder, newReconciler func(Deps) Reconciler) *Host {
	h := NewHost(b, newReconciler, HostOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h.Flags.SetOutput(io.Discard)
	return h
}

func TestHostFlagsDefaultToTheBuilder(t *testing.T) {
	h := quietHost(testBuilder(), func(Deps) Reconciler { return nopReconciler{} })
	if err := h.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if h.name != "host-test" || h.workers != 3 || h.namespace != "default" || h.manager != "" || h.standby {
		t.Fatalf("defaults: name %q workers %d namespace %q manager %q standby %v", h.name, h.workers, h.namespace, h.manager, h.standby)
	}
	if h.informer != "127.0.0.1:50061" || h.resync != 0 || h.shutdownGrace != 30*time.Second {
		t.Fatalf("default informer %q, resync %v, shutdown grace %v", h.informer, h.resync, h.shutdownGrace)
	}
	if h.kubeAPIQPS != 20 || h.kubeAPIBurst != 30 {
		t.Fatalf("default --kube-api-qps %v, --kube-api-burst %d; want kube-controller-manager's 20 and 30", h.kubeAPIQPS, h.kubeAPIBurst)
	}
}

func TestHostParsesStandardAndOwnFlags(t *testing.T) {
	h := quietHost(testBuilder(), func(Deps) Reconciler { return nopReconciler{} })
	threshold := h.Flags.Int("threshold", 7, "a controller's own flag")
	err := h.Parse([]string{
		"--informer", "10.0.0.1:1", "--manager", "10.0.0.2:2", "--standby", "--name", "other",
		"--namespace", "", "--workers", "5", "--kubeconfig", "/k", "--resync-period", "90", "--shutdown-grace", "2.5",
		"--label-selector", "app=x", "--health-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--insecure-plaintext", "--threshold", "9", "--kube-api-qps", "2.5", "--kube-api-burst", "4",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"10.0.0.1:1", "10.0.0.2:2", true, "other", "", 5, "/k", 90 * time.Second, "app=x", "127.0.0.1:0", "127.0.0.1:0", true, 9, 2500 * time.Millisecond}
	got := []any{h.informer, h.manager, h.standby, h.name, h.namespace, h.workers, h.kubeconfig, h.resync,
		h.labelSelector, h.healthListen, h.metricsListen, h.security.InsecurePlaintext, *threshold, h.shutdownGrace}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
	if h.Name() != "other" {
		t.Fatalf("Name() = %q", h.Name())
	}
	if h.kubeAPIQPS != 2.5 || h.kubeAPIBurst != 4 {
		t.Fatalf("--kube-api-qps %v, --kube-api-burst %d", h.kubeAPIQPS, h.kubeAPIBurst)
	}
}

func TestHostTakesNoQPSAsNoLimitWhateverTheBurst(t *testing.T) {
	for _, args := range [][]string{{"--kube-api-qps", "0", "--kube-api-burst", "0"}, {"--kube-api-qps", "-1"}} {
		h := quietHost(testBuilder(), func(Deps) Reconciler { return nopReconciler{} })
		if err := h.Parse(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
}

func TestHostRefusesBadCommandLines(t *testing.T) {
	for _, args := range [][]string{{"extra"}, {"--no-such-flag"}, {"--workers", "0"}, {"--workers", "x"},
		{"--resync-period", "soon"}, {"--shutdown-grace", "-1"}, {"--kube-api-qps", "fast"}, {"--kube-api-qps", "NaN"},
		{"--kube-api-qps", "+Inf"}, {"--kube-api-burst", "0"}, {"--kube-api-qps", "5", "--kube-api-burst", "-1"},
		{"--kube-api-burst", "1.5"}} {
		h := quietHost(testBuilder(), func(Deps) Reconciler { return nopReconciler{} })
		var out bytes.Buffer
		h.Flags.SetOutput(&out)
		err := h.Parse(args)
		var usage *UsageError
		if !errors.As(err, &usage) {
			t.Fatalf("%v: %v, want a *UsageError", args, err)
		}
		if !strings.Contains(out.String(), "--help") || strings.Contains(out.String(), "Flags:") {
			t.Fatalf("%v printed %q: want the problem and a pointer to --help, not the usage", args, out.String())
		}
	}
}

func TestHostHelpExplains(t *testing.T) {
	h := NewHost(testBuilder(), func(Deps) Reconciler { return nopReconciler{} }, HostOptions{Usage: "host-test does nothing at all."})
	var out bytes.Buffer
	h.Flags.SetOutput(&out)
	h.Flags.Bool("own", false, "the controller's own flag")
	if err := h.Parse([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{
		"Usage: host-test [flags]", "host-test does nothing at all.", "--standby", "STEWARD_TLS_CA_FILE",
		"STEWARD_INSECURE_PLAINTEXT=true", "OTEL_EXPORTER_OTLP_ENDPOINT", "SIGTERM", "/readyz",
		"-informer", "-manager", "-kubeconfig", "-workers", "-namespace", "-health-listen",
		"-metrics-listen", "-tls-cert-file", "-resync-period", "-shutdown-grace", "-own",
		"-kube-api-qps", "QPS to use while talking with kubernetes apiserver", "0 or less means no limit", "(default 20)",
		"-kube-api-burst", "Burst to use while talking with kubernetes apiserver", "(default 30)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not mention %q:\n%s", want, out.String())
		}
	}
}

func TestHostVersionIsAskedForAndSaid(t *testing.T) {
	h := quietHost(testBuilder(), func(Deps) Reconciler { return nopReconciler{} })
	if err := h.Parse([]string{"--version"}); !errors.Is(err, ErrVersion) {
		t.Fatalf("--version: %v, want ErrVersion", err)
	}
	want := "host-test " + Version + " (" + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if got := VersionLine("host-test"); got != want {
		t.Fatalf("VersionLine: %q, want %q", got, want)
	}
	if err := quietHost(testBuilder(), func(Deps) Reconciler { return nopReconciler{} }).Parse(nil); err != nil {
		t.Fatalf("without --version: %v", err)
	}
}

func TestHostStartRefusesMissingSecurity(t *testing.T) {
	for _, env := range []string{EnvTLSCAFile, EnvTLSCertFile, EnvTLSKeyFile, EnvTokenFile, EnvInsecurePlaintext} {
		t.Setenv(env, "")
	}
	called := false
	h := quietHost(testBuilder(), func(Deps) Reconciler { called = true; return nopReconciler{} })
	err := h.Run(context.Background(), []string{"--informer", "127.0.0.1:1", "--kubeconfig", "/nonexistent"})
	var serr *SecurityConfigError
	if !errors.As(err, &serr) || !strings.Contains(err.Error(), EnvInsecurePlaintext+"=true") {
		t.Fatalf("no TLS settings: %v, want a *SecurityConfigError naming the variables", err)
	}
	if called || h.Controller() != nil {
		t.Fatal("the controller was wired although the settings were refused")
	}
}

// apiServer is a local HTTP server that records the requests reaching it, and a
// kubeconfig pointing at it.
type apiServer struct {
	kubeconfig string
	server     string // its URL
	mu         sync.Mutex
	seen       []string
}

func newAPIServer(t *testing.T) *apiServer {
	t.Helper()
	a := &apiServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Method+" "+r.URL.Path)
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(srv.Close)
	a.server = srv.URL
	a.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: test
clusters: [{name: test, cluster: {server: %q}}]
users: [{name: test, user: {token: t}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
`, srv.URL)
	if err := os.WriteFile(a.kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *apiServer) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// startHost runs a host in the background with args (plus an informer nobody serves
// and the API server's kubeconfig) and returns the Deps its reconciler factory got.
func startHost(t *testing.T, a *apiServer, args ...string) (*Host, Deps) {
	t.Helper()
	deps := make(chan Deps, 1)
	h := quietHost(testBuilder(), func(d Deps) Reconciler { deps <- d; return nopReconciler{} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	args = append([]string{"--informer", "127.0.0.1:1", "--kubeconfig", a.kubeconfig, "--insecure-plaintext"}, args...)
	go func() { done <- h.Run(ctx, args) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run after cancel: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30 s of its context's end")
		}
	})
	select {
	case d := <-deps:
		deadline := time.Now().Add(10 * time.Second)
		for h.Controller() == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		return h, d
	case err := <-done:
		t.Fatalf("Run ended before wiring the controller: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the reconciler factory was not called within 10 s")
	}
	panic("unreachable")
}

func TestHostHandsOutAFencedClientUnderAManager(t *testing.T) {
	a := newAPIServer(t)
	// The manager is never reached: this instance holds no lease.
	h, d := startHost(t, a, "--manager", "127.0.0.1:1", "--standby")
	if d.API == nil || !d.API.Fenced() {
		t.Fatal("the host handed out an API client that is not fenced by construction")
	}
	if d.Mirror == nil || d.Mirror != h.Controller().Mirror || d.Name != "host-test" {
		t.Fatalf("Deps: mirror %p (controller's %p), name %q", d.Mirror, h.Controller().Mirror, d.Name)
	}
	ctx := context.Background()
	path := "/api/v1/namespaces/default/configmaps/c"
	if err := d.API.MergePatch(ctx, path, map[string]any{}, nil); !errors.Is(err, kube.ErrFenced) {
		t.Fatalf("a write without the lease: %v, want kube.ErrFenced", err)
	}
	// Nothing the author can do with the client lifts the fence.
	d.API.SetWriteFence(nil)
	h.Controller().Fence(d.API)
	if err := d.API.Do(ctx, http.MethodDelete, path, "", nil, nil); !kube.IsFenced(err) {
		t.Fatalf("a write without the lease after SetWriteFence(nil): %v, want kube.ErrFenced", err)
	}
	if err := d.API.Do(ctx, http.MethodGet, path, "", nil, nil); err != nil {
		t.Fatalf("a read: %v", err)
	}
	if got := a.requests(); len(got) != 1 || got[0] != "GET "+path {
		t.Fatalf("the API server saw %v; want the GET only", got)
	}

	// Once the session holds the lease, writes go; when the renew deadline passes, they
	// stop again at once.
	var s *ManagerSession
	for deadline := time.Now().Add(10 * time.Second); s == nil && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		s = h.Controller().Session()
	}
	if s == nil {
		t.Fatal("no manager session within 10 s")
	}
	s.mu.Lock()
	s.active, s.deadline = true, time.Now().Add(time.Minute)
	s.mu.Unlock()
	if err := d.API.MergePatch(ctx, path, map[string]any{}, nil); err != nil {
		t.Fatalf("a write holding the lease: %v", err)
	}
	s.mu.Lock()
	s.deadline = time.Now().Add(-time.Millisecond)
	s.mu.Unlock()
	if err := d.API.MergePatch(ctx, path, map[string]any{}, nil); !kube.IsFenced(err) {
		t.Fatalf("a write past the renew deadline: %v, want kube.ErrFenced", err)
	}
	s.mu.Lock()
	s.active = false // as the session itself would, before it closes
	s.mu.Unlock()
	if got := a.requests(); len(got) != 2 {
		t.Fatalf("the API server saw %v; want the GET and one PATCH", got)
	}
}

func TestHostFenceRefusesWritesBeforeTheControllerExists(t *testing.T) {
	h := quietHost(testBuilder(), func(Deps) Reconciler { return nopReconciler{} })
	if err := h.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if h.mayWrite() {
		t.Fatal("the fence let a write through before the controller was wired")
	}
}

func TestHostAloneWritesAndServesHealth(t *testing.T) {
	a := newAPIServer(t)
	h, d := startHost(t, a, "--health-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	if !d.API.Fenced() {
		t.Fatal("alone, the client is fenced by construction too")
	}
	if !d.API.RateLimited() {
		t.Fatal("the host's client has no rate limit by default")
	}
	// Alone, the instance may always reconcile, so it may write.
	if err := d.API.MergePatch(context.Background(), "/api/v1/namespaces/default/configmaps/c", map[string]any{}, nil); err != nil {
		t.Fatalf("a write alone: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := h.ListenAddrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	get := func(addr, path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	health, metrics := addrs["health"].String(), addrs["metrics"].String()
	apiHost := strings.TrimPrefix(a.server, "http://")
	if code, body := get(health, "/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	// Nobody serves the informer: the mirror never syncs.
	if code, body := get(health, "/readyz"); code != 503 || !strings.Contains(body, "initial list") {
		t.Fatalf("/readyz before the mirror synced: %d %q", code, body)
	}
	if code, _ := get(health, "/metrics"); code != 404 {
		t.Fatalf("/metrics on the health address: %d, want 404", code)
	}
	code, body := get(metrics, "/metrics")
	for _, want := range []string{
		`controller_runtime_reconcile_total{controller="host-test",result="success"} 0`,
		`controller_runtime_max_concurrent_reconciles{controller="host-test"} 3`,
		`workqueue_depth{name="host-test"} 0`,
		`controller_runtime_terminal_reconcile_errors_total{controller="host-test"} 0`,
		`workqueue_longest_running_processor_seconds{name="host-test"} 0`,
		`steward_mirror_synced{controller="host-test"} 0`,
		`steward_fenced_writes_total{controller="host-test"} 0`,
		`steward_manager_epoch{controller="host-test"} 0`,
		`steward_build_info{platform="` + runtime.GOOS + "/" + runtime.GOARCH + `",runtime="go",runtime_version="` + runtime.Version() + `",version="` + Version + `"} 1`,
		"# TYPE controller_runtime_reconcile_total counter",
		"# TYPE rest_client_rate_limiter_duration_seconds histogram",
		`rest_client_rate_limiter_duration_seconds_bucket{verb="PATCH",host="` + apiHost + `",le="0.005"} 1`,
		`rest_client_rate_limiter_duration_seconds_bucket{verb="PATCH",host="` + apiHost + `",le="+Inf"} 1`,
		`rest_client_rate_limiter_duration_seconds_count{verb="PATCH",host="` + apiHost + `"} 1`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q:\n%s", code, want, body)
		}
	}
}

func TestHostClientHasNoLimitWithoutQPS(t *testing.T) {
	_, d := startHost(t, newAPIServer(t), "--kube-api-qps", "0")
	if d.API.RateLimited() {
		t.Fatal("--kube-api-qps 0: the host's client is rate limited")
	}
}

func TestHostUnreadyUnderAManagerUntilRegistered(t *testing.T) {
	h := quietHost(testBuilder(), func(Deps) Reconciler { return nopReconciler{} })
	if err := h.Parse([]string{"--manager", "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if why := h.unready(); why != "starting" {
		t.Fatalf("unready before wiring: %q", why)
	}
	c, err := testBuilder().Complete(nil, func(*Mirror) Reconciler { return nopReconciler{} })
	if err != nil {
		t.Fatal(err)
	}
	h.ctrl.Store(c)
	close(c.Mirror.synced)
	if why := h.unready(); !strings.Contains(why, "manager") {
		t.Fatalf("synced, no session: unready %q", why)
	}
	s := NewManagerSession(nil, SessionOptions{Controller: "host-test"})
	c.mu.Lock()
	c.session = s
	c.mu.Unlock()
	if why := h.unready(); !strings.Contains(why, "manager") {
		t.Fatalf("synced, not registered: unready %q", why)
	}
	close(s.registered)
	if why := h.unready(); why != "" {
		t.Fatalf("synced and registered (a standby is ready too): unready %q", why)
	}
}

// patcher patches the ConfigMap of each request through the host's API client.
type patcher struct{ api *kube.Client }

func (p patcher) Reconcile(ctx context.Context, req Request) (Result, error) {
	return Result{}, p.api.MergePatch(ctx, "/api/v1/namespaces/"+req.Namespace+"/configmaps/"+req.Name, map[string]any{}, nil)
}

func TestHostAloneReconcilesOnceSyncedAndDrainsOnCancel(t *testing.T) {
	inf, conn := startInformer(t)
	inf.scripts <- script{batches: [][]*pb.Event{
		{cmEvent(pb.EventType_EVENT_TYPE_ADDED, "default", "c", "5", "", 1)},
		{marker(pb.EventType_EVENT_TYPE_INITIAL_EVENTS_END, "5")},
	}, hold: true}
	a := newAPIServer(t)
	h := quietHost(testBuilder(), func(d Deps) Reconciler { return patcher{d.API} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- h.Run(ctx, []string{"--informer", conn.Target(), "--kubeconfig", a.kubeconfig,
			"--insecure-plaintext", "--health-listen", "127.0.0.1:0"})
	}()
	eventually(t, "the reconcile's PATCH", func() bool { return len(a.requests()) > 0 })
	addrs, err := h.ListenAddrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addrs["health"].String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/readyz after the sync: %d", resp.StatusCode)
	}
	eventually(t, "the workers to be idle", func() bool {
		return h.Controller().ReconcileCounts()[ResultSuccess] == 1 && h.Controller().Pool().Status().QueueDepth == 0
	})
	// The key queued by the ADDED event and the one of every primary object coalesce.
	if got := a.requests(); len(got) != 1 || got[0] != "PATCH /api/v1/namespaces/default/configmaps/c" {
		t.Fatalf("the API server saw %v; want one PATCH of default/c", got)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of its context's end")
	}
	if h.Controller().WorkersRunning() {
		t.Fatal("the workers still run after Run returned")
	}
}

func TestSecondsFlagTakesSecondsOrDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{"30": 30 * time.Second, "0.25": 250 * time.Millisecond, "1m30s": 90 * time.Second, "0": 0} {
		var d time.Duration
		if err := (seconds{&d}).Set(in); err != nil || d != want {
			t.Errorf("Set(%q): %v, %v; want %v", in, d, err, want)
		}
	}
	d := 1500 * time.Millisecond
	if got := (seconds{&d}).String(); got != "1.5" {
		t.Errorf("String() = %q, want 1.5", got)
	}
}
