// Package steward is the Go runtime for Steward controllers: the same building blocks as
// the Python runtime (steward.runtime), speaking the gRPC contract in protos/steward/v1.
//
// The layers compose, and each is usable alone:
//
//	informer Watch stream → Mirror (local cache, indexes, resume, REPLACED)
//	  → sources (For, Owns, Watches, predicates) → WorkQueue (client-go semantics,
//	  rate-limited retries, trace contexts per key) → WorkerPool → your Reconciler
//
// A Controller wires them together and, given a manager address, registers with the
// ManagerService (ManagerSession): it reconciles only while the manager says it is the
// active instance and its lease is fresh, so two instances of one controller never
// reconcile at once. The API client extends that to each write: it asks "do I hold the
// lease now?" just before it sends a write and refuses it (kube.ErrFenced) otherwise, so
// a process paused past its lease (SIGSTOP, a stopped VM) sends none of the writes it had
// under way when it resumes.
//
// A Host runs one controller as a process (controller-runtime's Manager, the Python
// runtime's steward.run): the standard flags (--informer, --manager, --standby,
// --kubeconfig, --namespace, --workers, TLS, --health-listen, --metrics-listen, --help),
// tracing, signals and graceful drain, and an API client it builds fenced, so there is
// nothing to remember:
//
//	func main() {
//		steward.Run(
//			steward.NewBuilder("confighash").
//				For(steward.Deployments, "Deployment", steward.GenerationChanged).
//				Watches(steward.ConfigMaps, usersOf),
//			func(d steward.Deps) steward.Reconciler { return &reconciler{d.Mirror, d.API} },
//		)
//	}
//
// Each source may narrow what the informer sends of its type — selectors, an owner filter,
// the objects another type selects (SelectedBy), a projection, metadata only — with
// Builder.WithSubscription (see Subscription); an Owns source asks only for the objects
// the primary kind controls.
//
// The layers below stay usable alone (Builder.Complete, Controller.Run or RunWithManager,
// Controller.Fence for clients built elsewhere).
//
// Connections to the informer and the manager are mutual TLS: DialOptions turns a
// SecurityConfig (SecurityConfigFromEnv reads the STEWARD_TLS_* variables, as the Python
// runtime does) into grpc.DialOptions, and refuses plaintext unless it is asked for.
//
//	dial, err := steward.DialOptions(steward.SecurityConfigFromEnv())
//	conn, err := grpc.NewClient("127.0.0.1:50061", dial...)
//
// Every reconcile runs in a span whose parent is the trace context of the first event
// coalesced into its key (links to the others); TracingTransport carries the span's
// traceparent to kube-apiserver. SetupTracing configures the OpenTelemetry SDK from the
// standard OTEL_* environment variables.
//
// Every named WorkQueue and every WorkerPool reports the Python runtime's Prometheus
// metrics (client-go's workqueue_* and controller-runtime's controller_runtime_*, same
// names, labels, help texts and buckets) to a Metrics, DefaultMetrics unless their
// options name one; the Host serves them on --metrics-listen.
package steward
