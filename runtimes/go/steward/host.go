package steward

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/steward-dev/steward/runtimes/go/kube"
)

// The environment variables the host's listen flags default to (the Python runtime's).
const (
	EnvHealthListen  = "STEWARD_HEALTH_LISTEN"
	EnvMetricsListen = "STEWARD_METRICS_LISTEN"
)

// Deps is what a Host hands to the reconciler factory once the controller is wired.
type Deps struct {
	// Name is the controller's name (--name): the manager's registration, the informer's
	// subscriber and the user agent's suffix.
	Name string
	// Mirror is the controller's cache of every watched type.
	Mirror *Mirror
	// API writes to kube-apiserver with the credentials of --kubeconfig. It is fenced by
	// construction (kube.NewFencedClient): each write is refused with kube.ErrFenced,
	// sending nothing, unless this instance may reconcile now — under a manager, while
	// it holds its lease (checked just before the write is sent). Reads are not fenced.
	API *kube.Client
	// Logger is the controller's logger.
	Logger *slog.Logger
}

// HostOptions configure a Host. The zero value works.
type HostOptions struct {
	// Usage is what --help says the controller does, before the host's own text about
	// its standard flags and the flag list. Optional.
	Usage string
	// Logger receives the host's and the controller's logs. Defaults to slog.Default()
	// (Main first sets it to text on stderr).
	Logger *slog.Logger
}

// seconds is a flag of a duration given in seconds ("2.5"), as the Python and
// TypeScript hosts take it, or as a Go duration ("1m30s").
type seconds struct{ d *time.Duration }

func (s seconds) String() string {
	if s.d == nil || *s.d == 0 {
		return "0"
	}
	return strconv.FormatFloat(s.d.Seconds(), 'f', -1, 64)
}

func (s seconds) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f < 0 {
			return errors.New("negative")
		}
		*s.d = time.Duration(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return errors.New("not a number of seconds")
	}
	*s.d = d
	return nil
}

// Host runs one controller as a process — what controller-runtime calls the Manager,
// and the Python runtime's steward.run. It owns the standard flags (see NewHost), dials
// the informer and the manager with mutual TLS (AddSecurityFlags), sets up tracing from
// the OTEL_* variables (SetupTracing), builds the API client, wires the controller from
// the Builder, serves /healthz, /readyz and /metrics when asked, and runs until SIGTERM
// or SIGINT, then drains: in-flight reconciles finish, the manager session deregisters,
// the watch closes.
//
// # One start path
//
// Without --manager the instance is active from the start (Controller.Run); with it,
// only between the manager's START and DRAIN/STOP (Controller.RunWithManager). Either
// way the workers start once the mirror has synced, every object of the primary type
// is enqueued, --resync-period (ControllerOptions.ResyncPeriod) applies, and shutdown is the
// same; a promoted instance also catches its mirror up with the informer first.
//
// # A fenced client, by construction
//
// The only API client the host hands out (Deps.API) is built fenced: under a manager,
// no write leaves an instance that does not hold its lease, not even one a reconcile
// had under way when the process was paused past the lease. Nothing is left for the
// author to remember, and the fence cannot be removed (kube.NewFencedClient).
//
// # Controller-specific flags
//
// Add them to Flags between NewHost and Main (or Run); they are parsed with the
// standard ones, before the reconciler factory is called.
type Host struct {
	// Flags holds the standard flags; add the controller's own before Main or Run.
	Flags *flag.FlagSet

	builder       *Builder
	newReconciler func(Deps) Reconciler
	opts          HostOptions

	informer, manager, kubeconfig  string
	version                        bool
	name, namespace, labelSelector string
	standby                        bool
	workers                        int
	resync, shutdownGrace          time.Duration
	security                       SecurityConfig
	healthListen, metricsListen    string
	kubeAPIQPS                     float64
	kubeAPIBurst                   int

	ctrl       atomic.Pointer[Controller]
	api        atomic.Pointer[kube.Client]
	mu         sync.Mutex
	started    atomic.Bool
	listeners  map[string]net.Addr // "health", "metrics": the bound addresses
	listenedCh chan struct{}       // closed once they are bound, or Start has failed
	listenOnce sync.Once
}

func (h *Host) listened() { h.listenOnce.Do(func() { close(h.listenedCh) }) }

// Run hosts the controller b wires, its reconciler made by newReconciler, as a process:
// NewHost(b, newReconciler, HostOptions{}).Main(). It does not return.
func Run(b *Builder, newReconciler func(Deps) Reconciler) {
	NewHost(b, newReconciler, HostOptions{}).Main()
}

// NewHost returns a host for the controller b wires (its name, types, indexes and
// options; the flags override name, namespace and workers), its reconciler made by
// newReconciler once the flags are parsed. Its FlagSet, named after the builder's
// controller, holds:
//
//	--informer        Steward informer, host:port (default 127.0.0.1:50061)
//	--manager         Steward manager, host:port (default: none, run alone)
//	--standby         under a manager, wait as a standby when another instance is active
//	--kubeconfig      credentials for writes (default in-cluster, $KUBECONFIG, ~/.kube/config)
//	--name            controller name (default: the builder's)
//	--namespace       watch only this namespace (default: the builder's, else all)
//	--label-selector  watch only matching objects (default: the builder's, else all)
//	--workers         concurrent reconciles (default: the builder's, else 1)
//	--resync-period   seconds between enqueueing every primary object again (default: the builder's, else never)
//	--shutdown-grace  seconds in-flight reconciles may finish on SIGTERM (default: the builder's, else 30)
//	--health-listen   serve /healthz and /readyz on host:port (default $STEWARD_HEALTH_LISTEN, else off)
//	--metrics-listen  serve Prometheus /metrics on host:port (default $STEWARD_METRICS_LISTEN, else off)
//	--kube-api-qps    requests a second to kube-apiserver, on average (default 20; 0 or less: no limit)
//	--kube-api-burst  requests to kube-apiserver at once before --kube-api-qps paces them (default 30)
//	--tls-ca-file … --insecure-plaintext (AddSecurityFlags)
//	--version         print the version (VersionLine) and exit 0
func NewHost(b *Builder, newReconciler func(Deps) Reconciler, opts HostOptions) *Host {
	h := &Host{builder: b, newReconciler: newReconciler, opts: opts, listenedCh: make(chan struct{})}
	fs := flag.NewFlagSet(b.name, flag.ContinueOnError)
	h.Flags = fs
	fs.Usage = h.usage
	bo := b.opts
	fs.StringVar(&h.informer, "informer", "127.0.0.1:50061", "Steward informer address, host:port")
	fs.StringVar(&h.manager, "manager", "", "Steward manager address, host:port (default: none, run alone)")
	fs.BoolVar(&h.standby, "standby", false, "stand by when another instance holds the name, instead of exiting")
	fs.StringVar(&h.kubeconfig, "kubeconfig", "", "kubeconfig for writes (default: in-cluster, else $KUBECONFIG, a list of files merged as kubectl merges them, else ~/.kube/config)")
	fs.StringVar(&h.name, "name", b.name, "controller name registered with the manager")
	fs.StringVar(&h.namespace, "namespace", bo.Namespace, "watch only this namespace (default: all)")
	fs.StringVar(&h.labelSelector, "label-selector", bo.LabelSelector, "watch only objects matching this label selector (default: all)")
	fs.IntVar(&h.workers, "workers", max(1, bo.MaxConcurrentReconciles), "concurrent reconciles")
	h.resync = bo.ResyncPeriod
	fs.Var(seconds{&h.resync}, "resync-period", "seconds between enqueueing every object of the primary type again, while active (0: never)")
	h.shutdownGrace = bo.ShutdownGrace
	if h.shutdownGrace <= 0 {
		h.shutdownGrace = 30 * time.Second
	}
	fs.Var(seconds{&h.shutdownGrace}, "shutdown-grace", "seconds in-flight reconciles may finish on SIGTERM")
	fs.StringVar(&h.healthListen, "health-listen", os.Getenv(EnvHealthListen), "serve /healthz and /readyz over HTTP on host:port (default $"+EnvHealthListen+", else off)")
	fs.StringVar(&h.metricsListen, "metrics-listen", os.Getenv(EnvMetricsListen), "serve Prometheus metrics on host:port /metrics (default $"+EnvMetricsListen+", else off)")
	fs.Float64Var(&h.kubeAPIQPS, "kube-api-qps", kube.DefaultQPS, "QPS to use while talking with kubernetes apiserver: requests a second the API client\nsends on average, as kube-controller-manager's flag of the same name;\n0 or less means no limit")
	fs.IntVar(&h.kubeAPIBurst, "kube-api-burst", kube.DefaultBurst, "Burst to use while talking with kubernetes apiserver: requests sent at once before\n--kube-api-qps paces them; at least 1 when --kube-api-qps is above 0")
	AddSecurityFlags(fs, &h.security)
	fs.BoolVar(&h.version, "version", false, "print the version and exit")
	return h
}

const hostUsage = `%[1]s runs as a Steward controller. It watches its types through Steward's
informer (--informer) and writes to kube-apiserver with the credentials of --kubeconfig.
Without --manager it reconciles from the start. With --manager it registers with
Steward's manager under --name and reconciles only while it is the active instance; a
second instance is refused (ALREADY_EXISTS) unless it runs with --standby, in which case
it waits and takes over when the active one goes away. Every write to kube-apiserver
first checks that this instance still holds its lease, and is refused otherwise.
Requests to kube-apiserver are paced by a token bucket, as kube-controller-manager's
are: --kube-api-burst at once, then --kube-api-qps a second.

It dials the informer and the manager with mutual TLS: --tls-ca-file, --tls-cert-file and
--tls-key-file, or STEWARD_TLS_CA_FILE, STEWARD_TLS_CERT_FILE and STEWARD_TLS_KEY_FILE
(eval "$(steward cluster env)" exports the admin's); --token-file or STEWARD_TOKEN_FILE
adds a bearer token. Plaintext needs --insecure-plaintext or STEWARD_INSECURE_PLAINTEXT=true
(development only); without either it exits 1 at once.

Spans go to OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (service steward-controller-NAME).
--health-listen serves GET /healthz and /readyz (ready once the informer's initial list
is in and, with --manager, the manager has answered); --metrics-listen serves /metrics.

SIGTERM or SIGINT stops taking work, lets in-flight reconciles finish (--shutdown-grace),
deregisters from the manager and exits 0; a second signal exits at once. It exits 1 on an error (a refused
registration or watch, unusable TLS files, an unreadable kubeconfig) and 2 on bad flags.

Flags:
`

func (h *Host) usage() {
	out := h.Flags.Output()
	fmt.Fprintf(out, "Usage: %s [flags]\n\n", h.Flags.Name())
	if u := strings.TrimSpace(h.opts.Usage); u != "" {
		fmt.Fprintf(out, "%s\n\n", u)
	}
	fmt.Fprintf(out, hostUsage, h.Flags.Name())
	h.Flags.PrintDefaults()
}

// ErrVersion is what Parse returns for --version (Main then prints VersionLine and exits 0).
var ErrVersion = errors.New("version printed")

// UsageError is a command line the host cannot run: a bad flag, or an argument that is
// not a flag.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Parse parses the command line (without the program name). --help returns
// flag.ErrHelp after printing the usage; any other problem is a *UsageError.
//
// The usage goes to the FlagSet's output on --help only; a bad command line prints the
// problem and a pointer to --help there instead.
func (h *Host) Parse(args []string) error {
	usage := h.Flags.Usage
	h.Flags.Usage = func() {} // the flag package calls it for errors too
	err := h.Flags.Parse(args)
	h.Flags.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	case err == nil && h.version:
		return ErrVersion
	case err != nil: // the flag package has printed it
	case h.Flags.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", h.Flags.Arg(0))
		fmt.Fprintln(h.Flags.Output(), err)
	case h.workers < 1:
		err = fmt.Errorf("--workers must be at least 1, not %d", h.workers)
		fmt.Fprintln(h.Flags.Output(), err)
	case math.IsNaN(h.kubeAPIQPS) || math.IsInf(h.kubeAPIQPS, 0):
		err = fmt.Errorf("--kube-api-qps must be a number, not %v", h.kubeAPIQPS)
		fmt.Fprintln(h.Flags.Output(), err)
	case h.kubeAPIQPS > 0 && h.kubeAPIBurst < 1:
		err = fmt.Errorf("--kube-api-burst must be at least 1 when --kube-api-qps is above 0, not %d", h.kubeAPIBurst)
		fmt.Fprintln(h.Flags.Output(), err)
	default:
		return nil
	}
	fmt.Fprintf(h.Flags.Output(), "Run %s --help for the flags.\n", h.Flags.Name())
	return &UsageError{err}
}

// Main runs the host as the process: it parses os.Args, logs as text to stderr, runs
// until SIGTERM or SIGINT (a second one exits at once) and exits: 0 after a signal or
// --help, 1 on an error, 2 on bad flags. It does not return.
func (h *Host) Main() {
	if h.opts.Logger == nil {
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	}
	if err := h.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, ErrVersion) {
			fmt.Println(VersionLine(h.Flags.Name()))
			os.Exit(0)
		}
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2) // Parse has printed the problem
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		<-ctx.Done()
		stop() // the next signal has its default effect: exit at once
	}()
	err := h.Start(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s\n", h.Flags.Name(), h.describe(err))
		os.Exit(1)
	}
	os.Exit(0)
}

func (h *Host) describe(err error) string {
	var refused *RegistrationRefusedError
	if errors.As(err, &refused) {
		return fmt.Sprintf("the manager refused %q (%s): %s; run with --standby to wait", h.name, refused.Code, refused.Message)
	}
	return err.Error()
}

// Run parses args (without the program name) and runs the controller until ctx is
// cancelled; see Parse and Start.
func (h *Host) Run(ctx context.Context, args []string) error {
	if err := h.Parse(args); err != nil {
		return err
	}
	return h.Start(ctx)
}

// Start runs the controller as the parsed flags say until ctx is cancelled (then it
// drains and returns nil), or a refused registration (*RegistrationRefusedError) or
// watch (*MirrorError), or a setting it cannot use (*SecurityConfigError, the
// kubeconfig, a listen address). Call Parse first (Run does both), and Start once.
func (h *Host) Start(ctx context.Context) error {
	if !h.Flags.Parsed() {
		return errors.New("steward.Host: Start before Parse")
	}
	if !h.started.CompareAndSwap(false, true) {
		return errors.New("steward.Host: Start called twice")
	}
	defer h.listened()
	log := h.opts.Logger
	if log == nil {
		log = slog.Default()
	}
	dial, err := DialOptions(h.security)
	if err != nil {
		return err
	}
	shutdownTracing, err := SetupTracing(ctx, "steward-controller-"+h.name)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer func() { _ = shutdownTracing(context.Background()) }()
	cfg, err := kube.LoadConfig(h.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = h.kubeAPIQPS, h.kubeAPIBurst
	api := kube.NewFencedClient(cfg, "steward-controller-"+h.name, h.mayWrite)
	h.api.Store(api)

	conn, err := grpc.NewClient(h.informer, dial...)
	if err != nil {
		return fmt.Errorf("informer %s: %w", h.informer, err)
	}
	defer conn.Close()
	var mconn *grpc.ClientConn
	if h.manager != "" {
		if mconn, err = grpc.NewClient(h.manager, dial...); err != nil {
			return fmt.Errorf("manager %s: %w", h.manager, err)
		}
		defer mconn.Close()
	}

	b := *h.builder // the author's builder stays as it was
	b.name = h.name
	b.opts.Namespace = h.namespace
	b.opts.LabelSelector = h.labelSelector
	b.opts.MaxConcurrentReconciles = h.workers
	b.opts.ResyncPeriod = h.resync
	b.opts.Logger = log
	b.opts.ShutdownGrace = h.shutdownGrace
	ctrl, err := b.Complete(conn, func(m *Mirror) Reconciler {
		return h.newReconciler(Deps{Name: h.name, Mirror: m, API: api, Logger: log})
	})
	if err != nil {
		return err
	}
	h.ctrl.Store(ctrl)

	servers, err := h.serve(log)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()

	if mconn == nil {
		return ctrl.Run(ctx)
	}
	return ctrl.RunWithManager(ctx, mconn, SessionOptions{Standby: h.standby})
}

// mayWrite is the API client's fence: no write before the controller exists; under a
// manager, none unless its session holds the lease now; alone, every write.
func (h *Host) mayWrite() bool {
	c := h.ctrl.Load()
	if c == nil {
		return false
	}
	if h.manager == "" {
		return true
	}
	s := c.Session()
	return s != nil && s.HoldsLease()
}

// Controller is the controller once Start has wired it (nil before).
func (h *Host) Controller() *Controller { return h.ctrl.Load() }

// Name is the controller's name (--name, once parsed).
func (h *Host) Name() string { return h.name }

// ListenAddrs waits until Start has bound --health-listen and --metrics-listen (or
// returned before), then returns the bound addresses by "health" and "metrics" (none for
// an address not asked for).
func (h *Host) ListenAddrs(ctx context.Context) (map[string]net.Addr, error) {
	select {
	case <-h.listenedCh:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]net.Addr, len(h.listeners))
	for k, v := range h.listeners {
		out[k] = v
	}
	return out, nil
}

// unready says why the instance is not ready, or "" when it is: the mirror has synced
// and, under a manager, the manager has answered the registration (a standby is ready:
// its cache is warm for the takeover).
func (h *Host) unready() string {
	c := h.ctrl.Load()
	if c == nil {
		return "starting"
	}
	if !c.Mirror.HasSynced() {
		return "waiting for the informer's initial list"
	}
	if h.manager != "" {
		s := c.Session()
		if s == nil {
			return "not registered with the manager yet"
		}
		select {
		case <-s.Registered():
		default:
			return "not registered with the manager yet"
		}
	}
	return ""
}

func (h *Host) healthHandler() http.Handler {
	mux := http.NewServeMux()
	text := func(w http.ResponseWriter, code int, body string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
	live := func(w http.ResponseWriter, _ *http.Request) { text(w, http.StatusOK, "ok\n") }
	mux.HandleFunc("GET /healthz", live)
	mux.HandleFunc("GET /livez", live)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := h.unready(); why != "" {
			text(w, http.StatusServiceUnavailable, "not ready: "+why+"\n")
			return
		}
		text(w, http.StatusOK, "ok\n")
	})
	return mux
}

// metrics is what /metrics serves of the runtime: the builder's ControllerOptions.Metrics,
// else DefaultMetrics.
func (h *Host) metrics() *Metrics { return h.builder.opts.Metrics.orDefault() }

func (h *Host) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		h.writeMetrics(w)
	})
	return mux
}

// serve binds and serves --health-listen and --metrics-listen (one server when they
// name the same address, unless port 0: each its own free port).
func (h *Host) serve(log *slog.Logger) ([]*http.Server, error) {
	defer h.listened()
	type endpoint struct {
		what, addr string
		handler    http.Handler
	}
	var eps []endpoint
	shared := h.healthListen != "" && h.healthListen == h.metricsListen && !strings.HasSuffix(h.healthListen, ":0")
	switch {
	case shared:
		mux := http.NewServeMux()
		mux.Handle("/metrics", h.metricsHandler())
		mux.Handle("/", h.healthHandler())
		eps = append(eps, endpoint{"health", h.healthListen, mux})
	default:
		if h.healthListen != "" {
			eps = append(eps, endpoint{"health", h.healthListen, h.healthHandler()})
		}
		if h.metricsListen != "" {
			eps = append(eps, endpoint{"metrics", h.metricsListen, h.metricsHandler()})
		}
	}
	var servers []*http.Server
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listeners = map[string]net.Addr{}
	for _, ep := range eps {
		ln, err := net.Listen("tcp", ep.addr)
		if err != nil {
			for _, s := range servers {
				_ = s.Close()
			}
			return nil, fmt.Errorf("--%s-listen %s: %w", ep.what, ep.addr, err)
		}
		srv := &http.Server{Handler: ep.handler, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		servers = append(servers, srv)
		h.listeners[ep.what] = ln.Addr()
		if shared {
			h.listeners["metrics"] = ln.Addr()
		}
		log.Info("serving "+ep.what, "address", "http://"+ln.Addr().String())
	}
	return servers, nil
}
