/**
 * Steward's controller runtime for TypeScript: one import for a controller author.
 *
 * Layers, each usable alone: the informer's Watch stream → {@link Mirror} (resume,
 * REPLACED, indexes) → sources and predicates → {@link WorkQueue} (client-go's semantics,
 * rate limiters) → {@link WorkerPool} → your `reconcile(request, info)`; a
 * {@link ManagerSession} decides when this instance may reconcile; {@link configureTracing}
 * exports the reconcile spans; {@link KubeClient} writes to the API server with
 * `traceparent`, paced by a {@link RequestRateLimiter}. {@link ControllerBuilder} wires it all, and {@link run} hosts a controller
 * as a process (flags, credentials, a fenced API client, health, signals).
 */

export { type Clock, FakeClock, MonotonicClock } from "./clock";
export {
  type Credential,
  EXEC_API_VERSIONS,
  type ExecCluster,
  type ExecConfig,
  ExecCredentialError,
  ExecCredentials,
} from "./credentials";
export {
  Controller,
  ControllerBuilder,
  type ControllerOptions,
  type Mapper,
  type Predicate,
  type RunOptions,
  generationChanged,
  labelsChanged,
} from "./controller";
export {
  DEFAULT_KUBE_API_BURST,
  DEFAULT_KUBE_API_QPS,
  RATE_LIMITER_BUCKETS_S,
  type RateLimiterWaits,
  RequestRateLimiter,
  type RequestRateLimiterOptions,
} from "./flowcontrol";
export { HealthServer, type HealthChecks, splitAddress } from "./health";
export {
  type BooleanFlag,
  ConfigError,
  type ControllerDefinition,
  type FlagSpec,
  type FlagSpecs,
  type FlagValue,
  type FlagValues,
  HEALTH_LISTEN_ENV,
  METRICS_LISTEN_ENV,
  HOST_FLAGS,
  Host,
  type HostSettings,
  type ListFlag,
  type ParsedArgs,
  type ReconcilerContext,
  type ReconcilerFactory,
  type StringFlag,
  UsageError,
  helpText,
  parseHostArgs,
  run,
  runHost,
} from "./host";
export {
  ApiStatusError,
  type ApiResponse,
  type ClusterAccess,
  FencedError,
  KubeClient,
  type KubeClientOptions,
  SERVICE_ACCOUNT_DIR,
  clusterAccess,
  inClusterAccess,
  loadKubeconfig,
} from "./kube";
export { log } from "./log";
export { Metrics, RECONCILE_RESULTS, defaultMetrics } from "./metrics";
export {
  type Change,
  type ChangeKind,
  type Handler,
  Mirror,
  MirrorError,
  MirrorObject,
  type MirrorOptions,
  objectKey,
  resourceType,
  sleep,
  typeKey,
} from "./mirror";
export {
  DEFAULT_BASE_DELAY_MS,
  DEFAULT_BURST,
  DEFAULT_MAX_DELAY_MS,
  DEFAULT_QPS,
  ItemExponentialBackoff,
  MaxOf,
  type RateLimiter,
  TokenBucket,
  defaultControllerRateLimiter,
} from "./ratelimit";
export {
  type ReconcileInfo,
  type Reconciler,
  type Request,
  type Result,
  TerminalError,
  parseRequestKey,
  requestKey,
} from "./reconcile";
export {
  type ClientSecurity,
  SECURITY_ENV,
  SecurityConfigError,
  TokenFile,
  channelCredentials,
  clientSecurityFromEnv,
  securityFromEnv,
  validateClientSecurity,
} from "./security";
export {
  ManagerSession,
  RUNTIME_VERSION,
  RegistrationRefusedError,
  type SessionCallbacks,
  type SessionOptions,
  defaultInstanceId,
} from "./session";
export {
  type GroupKind,
  type OwnerFilter,
  type SelectedBy,
  type SubscribedType,
  type Subscription,
} from "./subscription";
export { configureTracing, outgoingHeaders, withReconcileSpan } from "./tracing";
export { type Outcome, type ReconcileReport, WorkerPool, type WorkerOptions, type WorkerStatus } from "./workers";
export { MAX_CONTEXTS_PER_ITEM, type QueueItem, type TraceContext, WorkQueue, type WorkQueueOptions } from "./workqueue";
export type { ResourceType } from "./gen/steward/v1/informer";
