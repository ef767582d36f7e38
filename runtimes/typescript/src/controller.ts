/**
 * A controller: mirror → sources → work queue → workers → reconciler, wired and run as one.
 *
 * Build one with {@link ControllerBuilder} (`ControllerManagedBy(mgr).For(..).Owns(..)` in
 * controller-runtime). A controller process usually leaves the wiring below to the host
 * (`run` in host.ts: flags, credentials, a fenced client, signals); by hand it is:
 *
 * ```ts
 * const controller = new ControllerBuilder("namespace-labeller")
 *   .for(resourceType("", "v1", "namespaces"), labelsChanged)
 *   .complete("127.0.0.1:50061", (mirror) => new Labeller(mirror, api));
 * controller.fence(api); // api's writes are refused while this instance holds no lease
 * await controller.run({ signal, manager: "127.0.0.1:50062" });
 * ```
 *
 * # Start-up and shutdown
 * `run` starts the mirror, waits until every watched type has synced (a reconcile never sees
 * a half-filled cache), then runs the workers. Aborting its signal stops taking work, lets
 * in-flight reconciles finish within the grace period, and closes the watch. If the informer
 * refuses the watch for good, `run` rejects with {@link MirrorError}.
 *
 * # With a manager
 * Given a manager address, the controller registers with it ({@link ManagerSession}) and
 * runs its workers only while the manager says it is the active instance: START starts them
 * (after a full resync of the primary type, so nothing that changed while standing by is
 * missed), DRAIN stops them gracefully, STOP or a lost lease stops them at once. Before its
 * first reconcile a promoted instance waits until its mirror holds everything the informer
 * holds ({@link Mirror.catchUp}), so it never acts without what its predecessor last wrote.
 * Every worker also checks the lease before each reconcile, and {@link Controller.fence}
 * makes the controller's {@link KubeClient}s check it before each write, so a process paused
 * past its lease (SIGSTOP, a stopped VM) sends none of the writes it had under way when it
 * resumes ({@link FencedError}). The mirror keeps syncing while standing by, so a promoted standby starts with a warm cache. Heartbeats carry the pool's
 * status. Shutdown deregisters, so a standby takes over without waiting for the lease.
 *
 * # Security
 * The informer and the manager are dialed with {@link ControllerOptions.credentials}, by
 * default {@link securityFromEnv}: mutual TLS with the files of `STEWARD_TLS_CA_FILE`,
 * `STEWARD_TLS_CERT_FILE` and `STEWARD_TLS_KEY_FILE` (plus `STEWARD_TOKEN_FILE`), or
 * plaintext with `STEWARD_INSECURE_PLAINTEXT=true`; with neither, `complete` (given an
 * address) and `run` (given a manager) throw `SecurityConfigError`.
 */

import type { ChannelCredentials } from "@grpc/grpc-js";
import { InformerServiceClient, type ResourceType } from "./gen/steward/v1/informer";
import type { InstanceStatus } from "./gen/steward/v1/manager";
import type { FencedError, KubeClient } from "./kube";
import { log } from "./log";
import { type Metrics, defaultMetrics } from "./metrics";
import { type Change, Mirror, type MirrorObject, type TypeKey, typeKey } from "./mirror";
import {
  type ReconcileInfo,
  type Reconciler,
  type Request,
  type Result,
  requestKey,
} from "./reconcile";
import { securityFromEnv } from "./security";
import { ManagerSession, type SessionOptions } from "./session";
import {
  type SourceSubscription,
  type SubscribedType,
  type Subscription,
  mergeSubscriptions,
  splitSubscribed,
  validateSubscription,
} from "./subscription";
import { type Outcome, WorkerPool, type WorkerStatus } from "./workers";
import type { TraceContext } from "./workqueue";

/** Whether a change should produce keys at all. */
export type Predicate = (change: Change) => boolean;

/** The keys an object of another type maps to. */
export type Mapper = (obj: MirrorObject) => Iterable<Request>;

/** True for creations and deletions, and for updates that changed the labels. */
export const labelsChanged: Predicate = (change) => {
  if (change.kind !== "modified" || change.old === undefined) return true;
  const a = change.old.meta.labels;
  const b = change.obj.meta.labels;
  const ka = Object.keys(a);
  return ka.length !== Object.keys(b).length || ka.some((k) => a[k] !== b[k]);
};

/** True for creations and deletions, and for updates that changed `metadata.generation`. */
export const generationChanged: Predicate = (change) =>
  change.kind !== "modified" ||
  change.old === undefined ||
  change.old.meta.generation !== change.obj.meta.generation;

/** How a controller runs. Every field has a working default. */
export interface ControllerOptions {
  /** Reconciles running at once. Defaults to 1, as in controller-runtime. */
  maxConcurrentReconciles?: number;
  /** Watch only this namespace; "" (the default) for all. */
  namespace?: string;
  /** Watch only objects matching this label selector; "" (the default) for all. */
  labelSelector?: string;
  /**
   * Every so many ms, enqueue every object of the primary type again (while the instance is
   * active, under a manager). 0 (default): never.
   */
  resyncPeriodMs?: number;
  /** How long in-flight reconciles may finish on shutdown. Defaults to 30 000 ms. */
  shutdownGraceMs?: number;
  /**
   * How to dial the informer (when `complete` is given an address) and the manager.
   * Defaults to {@link securityFromEnv}: mutual TLS from the `STEWARD_TLS_*` variables, or
   * plaintext with `STEWARD_INSECURE_PLAINTEXT=true`.
   */
  credentials?: ChannelCredentials;
  /**
   * Where the controller's work queue and workers report (`workqueue_*{name}`,
   * `controller_runtime_*{controller}`, named after the controller); the counts go on across
   * the worker pools of successive activations. Defaults to {@link defaultMetrics}.
   */
  metrics?: Metrics;
}

/** How to run a controller. */
export interface RunOptions {
  /** Aborting it stops the controller gracefully; `run` then resolves. */
  signal: AbortSignal;
  /** The manager's host:port; without it the controller reconciles on its own. */
  manager?: string;
  /** Registration options (controller name and watches default to the controller's). */
  session?: Partial<SessionOptions>;
}

type Source = (change: Change, enqueue: (req: Request, ctx: TraceContext | undefined) => void) => void;

/** One controller, wired; see the module docs. Use {@link ControllerBuilder}. */
export class Controller {
  readonly mirror: Mirror;
  readonly reconciler: Reconciler;
  /** The session with the manager, when run with one. */
  session: ManagerSession | undefined;
  /** The current worker pool (a new one each time the instance becomes active). */
  pool: WorkerPool;
  private workers: Promise<void> | undefined;
  /** Aborted when the workers stop, to end a promotion still waiting for the mirror. */
  private activation: AbortController | undefined;
  private readonly options: ControllerOptions;
  /** Where the controller's queue and workers report ({@link ControllerOptions.metrics}). */
  readonly metrics: Metrics;
  /** Reconcile counts of the pools before the current one. */
  private readonly retired: Record<Outcome, number> = {
    success: 0,
    requeue: 0,
    requeue_after: 0,
    error: 0,
    terminal_error: 0,
  };

  constructor(
    readonly name: string,
    client: InformerServiceClient,
    readonly primary: ResourceType,
    private readonly routes: Map<TypeKey, Source[]>,
    reconciler: Reconciler | ((mirror: Mirror) => Reconciler),
    options: ControllerOptions = {},
    types: (ResourceType | SubscribedType)[] = [primary],
  ) {
    this.options = options;
    this.metrics = options.metrics ?? defaultMetrics;
    this.mirror = new Mirror(client, types, {
      namespace: options.namespace ?? "",
      labelSelector: options.labelSelector ?? "",
      subscriber: name,
    });
    this.reconciler = typeof reconciler === "function" ? reconciler(this.mirror) : reconciler;
    this.pool = this.newPool();
    this.mirror.addHandler((change) => {
      for (const source of this.routes.get(change.obj.type) ?? []) {
        source(change, (req, ctx) => this.pool.queue.add(requestKey(req), ctx));
      }
    });
  }

  /** Queue depth, busy workers, reconcile counts and the last error, now. */
  status(): WorkerStatus {
    return this.pool.status();
  }

  /** Reconciles since the controller was made, by outcome (over every activation). */
  reconcileTotals(): Record<Outcome, number> {
    const now = this.pool.status().reconciles;
    const totals = { ...this.retired };
    for (const k of Object.keys(totals) as Outcome[]) totals[k] += now[k];
    return totals;
  }

  /** True while the workers run. */
  get working(): boolean {
    return this.workers !== undefined;
  }

  /** The pool's status as the manager's heartbeat carries it. */
  heartbeatStatus(): Partial<InstanceStatus> {
    const st = this.pool.status();
    const c = st.reconciles;
    const status: Partial<InstanceStatus> = {
      queueDepth: st.queueDepth,
      busyWorkers: st.busyWorkers,
      reconciles: {
        success: c.success,
        requeue: c.requeue + c.requeue_after,
        error: c.error,
        terminalError: c.terminal_error,
      },
    };
    if (st.lastError !== undefined) {
      status.lastError = `${requestKey(st.lastError.request)}: ${st.lastError.message}`;
      status.lastErrorTime = { seconds: Math.floor(st.lastError.at / 1000), nanos: 0 };
    }
    return status;
  }

  /**
   * Refuse the writes of `clients` while this instance does not hold the lease (their
   * {@link KubeClient.writeFence} becomes {@link mayReconcile}): after a pause past the renew
   * deadline, even a write a reconcile already had under way is not sent
   * ({@link FencedError}).
   */
  fence(...clients: KubeClient[]): void {
    for (const api of clients) api.writeFence = () => this.mayReconcile();
  }

  /** True unless a manager session exists and this instance does not hold the lease. */
  mayReconcile(): boolean {
    return this.session === undefined || this.session.holdsLease();
  }

  /** Run until `signal` aborts (see the module docs). */
  async run(options: RunOptions): Promise<void> {
    const { signal } = options;
    // Settle how to dial the manager before starting anything: a misconfiguration fails here.
    const managerCredentials =
      options.manager === undefined ? undefined : (this.options.credentials ?? securityFromEnv());
    const stopMirror = new AbortController();
    const mirror = this.mirror.run(stopMirror.signal);
    const aborted = new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      signal.addEventListener("abort", () => resolve(), { once: true });
    });
    try {
      if (options.manager === undefined) {
        await Promise.race([mirror, aborted, this.runAlone(signal)]);
      } else {
        this.session = new ManagerSession(
          options.manager,
          {
            controller: this.name,
            watches: this.mirror.watchedTypes(),
            ...options.session,
          },
          {
            status: () => this.heartbeatStatus(),
            onStart: (epoch) => this.onStart(epoch),
            onDrain: () => this.stopWorkers(true),
            onStop: (reason) => {
              log.info(`controller ${this.name}: no longer active (${reason}), stopping workers`);
              return this.stopWorkers(false);
            },
          },
          managerCredentials,
        );
        await Promise.race([mirror, aborted, this.session.run()]);
      }
    } finally {
      await this.stopWorkers(true);
      if (this.session !== undefined) await this.session.close();
      stopMirror.abort();
      await mirror.catch(() => undefined);
    }
  }

  private async runAlone(signal: AbortSignal): Promise<void> {
    await this.mirror.waitSynced();
    if (signal.aborted) return;
    log.info(`controller ${this.name}: caches synced, starting workers`);
    this.workers = this.pool.run();
    let resync: NodeJS.Timeout | undefined;
    const period = this.options.resyncPeriodMs ?? 0;
    if (period > 0) resync = setInterval(() => this.enqueueAll(), period);
    try {
      await this.workers;
    } finally {
      if (resync !== undefined) clearInterval(resync);
    }
    await new Promise(() => undefined); // the workers only stop when run() ends
  }

  private enqueueAll(): void {
    for (const obj of this.mirror.list(this.primary)) {
      this.pool.queue.add(requestKey({ namespace: obj.namespace, name: obj.name }));
    }
  }

  private onStart(epoch: number): void {
    if (this.workers !== undefined) return;
    log.info(`controller ${this.name}: active (epoch ${epoch}), starting workers`);
    const pool = this.newPool();
    const done = this.pool.status().reconciles; // stopped: final
    for (const k of Object.keys(this.retired) as Outcome[]) this.retired[k] += done[k];
    this.pool = pool;
    const activation = new AbortController();
    this.activation = activation;
    this.workers = this.activate(pool, activation.signal);
  }

  private async activate(pool: WorkerPool, signal: AbortSignal): Promise<void> {
    const stopped = (): boolean => signal.aborted || this.pool !== pool || pool.queue.shuttingDown;
    // Usually long done: the mirror syncs while standing by.
    await new Promise<void>((resolve) => {
      signal.addEventListener("abort", () => resolve(), { once: true });
      void this.mirror.waitSynced().then(resolve);
    });
    if (stopped()) return;
    // Read barrier: what the predecessor wrote just before it stopped may still be on its way
    // to this mirror; reconciling without it would, say, create a Job's pod again.
    const started = performance.now();
    try {
      await this.mirror.catchUp(signal);
    } catch {
      return; // the workers were stopped before the mirror caught up
    }
    log.info(
      `controller ${this.name}: mirror caught up with the informer in ` +
        `${((performance.now() - started) / 1000).toFixed(3)} s`,
    );
    if (stopped()) return;
    this.enqueueAll();
    // The same periodic resync as alone, while this instance is active.
    const period = this.options.resyncPeriodMs ?? 0;
    const resync = period > 0 ? setInterval(() => this.enqueueAll(), period) : undefined;
    try {
      await pool.run();
    } finally {
      if (resync !== undefined) clearInterval(resync);
    }
  }

  private async stopWorkers(graceful: boolean): Promise<void> {
    const running = this.workers;
    if (running === undefined) return;
    this.workers = undefined;
    this.activation?.abort();
    this.activation = undefined;
    await this.pool.stop(graceful);
    await running;
  }

  private newPool(): WorkerPool {
    const inner = this.reconciler;
    const fenced: Reconciler = {
      reconcile: (request: Request, info: ReconcileInfo): Promise<Result | void> => {
        if (!this.mayReconcile()) {
          // The workers are about to be stopped; whoever is active next reconciles it.
          return Promise.resolve({ requeueAfter: 1000 });
        }
        return inner.reconcile(request, info);
      },
    };
    return new WorkerPool(this.name, fenced, undefined, {
      maxConcurrentReconciles: this.options.maxConcurrentReconciles ?? 1,
      shutdownGraceMs: this.options.shutdownGraceMs ?? 30_000,
      metrics: this.metrics,
    });
  }
}

/**
 * Fluent wiring of a {@link Controller}: one primary type, plus owned and mapped types.
 *
 * Wherever a type goes, a {@link SubscribedType} may go instead (`{ type, ...subscription }`)
 * to narrow what the informer sends of it for that source: selectors, an owner filter, the
 * objects another type selects (`selectedBy`), a projection, metadata only. An {@link owns}
 * source asks only for the objects the primary kind controls. {@link complete} merges the
 * subscriptions of the sources of each type into the one target the watch carries, and
 * throws when they give different selectors (see subscription.ts):
 *
 * ```ts
 * new ControllerBuilder("deployment")
 *   .forKind(DEPLOYMENTS, "Deployment", generationChanged)
 *   .owns({ type: REPLICASETS, ownerFilter: { orphans: true } }) // and those it may adopt
 *   .watches({ type: PODS, labelSelector: "app", fields: ["status.phase"], metadataOnly: true }, podsToDeployment);
 * ```
 */
export class ControllerBuilder {
  private primary: ResourceType | undefined;
  private primaryKind = "";
  private readonly routes = new Map<TypeKey, Source[]>();
  private readonly types = new Map<TypeKey, ResourceType>();
  /** Each type's sources' subscriptions (an owns source's with the primary kind added). */
  private readonly subscriptions = new Map<TypeKey, SourceSubscription[]>();
  private sources = 0;
  private options: ControllerOptions = {};

  constructor(readonly name: string) {}

  private route(
    entry: ResourceType | SubscribedType,
    method: string,
    source: Source,
    owner?: { group: string; kind: string },
  ): void {
    const [rtype, given] = splitSubscribed(entry);
    const key = typeKey(rtype);
    try {
      validateSubscription(given, rtype);
    } catch (err) {
      throw new RangeError(`controller ${this.name}: the subscription of ${method}(${key}): ${(err as Error).message}`);
    }
    let subscription: Subscription = given;
    if (owner !== undefined) {
      // An owns source reacts only to objects the primary kind controls: it asks for those.
      const own = given.ownerFilter;
      subscription = { ...given, ownerFilter: { kinds: [owner, ...(own?.kinds ?? [])], orphans: own?.orphans ?? false } };
    }
    this.sources += 1;
    this.types.set(key, rtype);
    const list = this.routes.get(key) ?? [];
    list.push(source);
    this.routes.set(key, list);
    const subs = this.subscriptions.get(key) ?? [];
    subs.push({ from: `source ${this.sources}, ${method}`, subscription });
    this.subscriptions.set(key, subs);
  }

  /**
   * The primary type (or a {@link SubscribedType}): each change enqueues the object's own key.
   * `kind` is needed for {@link owns}.
   */
  for(rtype: ResourceType | SubscribedType, ...predicates: Predicate[]): this {
    return this.forKind(rtype, "", ...predicates);
  }

  /** {@link for} with the primary type's kind (e.g. "Job"), for {@link owns}. */
  forKind(rtype: ResourceType | SubscribedType, kind: string, ...predicates: Predicate[]): this {
    if (this.primary !== undefined) throw new Error(`controller ${this.name} already has a primary type`);
    this.route(rtype, "for", (change, enqueue) => {
      if (predicates.every((p) => p(change))) {
        enqueue({ namespace: change.obj.namespace, name: change.obj.name }, change.trace);
      }
    });
    this.primary = splitSubscribed(rtype)[0];
    this.primaryKind = kind;
    return this;
  }

  /**
   * A type (or a {@link SubscribedType}) whose objects the primary type controls: a change
   * enqueues the controlling owner when it is of the primary kind. The informer sends only
   * those objects (plus the kinds and orphans of the subscription's `ownerFilter`), unless
   * another source of the type reads every object.
   */
  owns(rtype: ResourceType | SubscribedType, ...predicates: Predicate[]): this {
    const primary = this.primary;
    if (primary === undefined || !this.primaryKind) throw new Error("owns() needs forKind() first");
    const kind = this.primaryKind;
    const owner = (obj: MirrorObject): Request | undefined => {
      const ref = obj.controllerOwner();
      if (ref === undefined || ref.kind !== kind) return undefined;
      const slash = ref.apiVersion.lastIndexOf("/");
      const group = slash < 0 ? "" : ref.apiVersion.slice(0, slash);
      return group === primary.group ? { namespace: obj.namespace, name: ref.name } : undefined;
    };
    const route: Source = (change, enqueue) => {
      if (!predicates.every((p) => p(change))) return;
      const now = owner(change.obj);
      if (now !== undefined) enqueue(now, change.trace);
      const before = change.old === undefined ? undefined : owner(change.old);
      if (before !== undefined && (now === undefined || requestKey(before) !== requestKey(now))) {
        enqueue(before, change.trace);
      }
    };
    this.route(rtype, "owns", route, { group: primary.group, kind });
    return this;
  }

  /** Any other type (or a {@link SubscribedType}): `mapper` says which keys a changed object concerns. */
  watches(rtype: ResourceType | SubscribedType, mapper: Mapper, ...predicates: Predicate[]): this {
    this.route(rtype, "watches", (change, enqueue) => {
      if (!predicates.every((p) => p(change))) return;
      const keys = new Map<string, Request>();
      try {
        for (const obj of change.old === undefined ? [change.obj] : [change.obj, change.old]) {
          for (const req of mapper(obj)) keys.set(requestKey(req), req);
        }
      } catch (err) {
        log.error(`mapper failed for ${change.obj.key}: ${String(err)}`);
        return;
      }
      for (const req of keys.values()) enqueue(req, change.trace);
    });
    return this;
  }

  /** Set the options (replacing those set before). */
  withOptions(options: ControllerOptions): this {
    this.options = options;
    return this;
  }

  /** The options set so far (a copy). */
  get currentOptions(): ControllerOptions {
    return { ...this.options };
  }

  /** The primary type, once {@link for} or {@link forKind} has been called. */
  get primaryType(): ResourceType | undefined {
    return this.primary;
  }

  /**
   * Each watched type with its sources' subscriptions merged (see subscription.ts); throws
   * when sources of one type give different selectors.
   */
  subscribedTypes(): SubscribedType[] {
    return [...this.types].map(([key, type]) => {
      try {
        return { type, ...mergeSubscriptions(key, this.subscriptions.get(key) ?? []) };
      } catch (err) {
        throw new Error(`controller ${this.name}: ${(err as Error).message}`);
      }
    });
  }

  /**
   * Build the controller. `informer` is the informer's host:port, dialed with the options'
   * `credentials` (default {@link securityFromEnv}, which throws `SecurityConfigError`
   * when the environment says neither TLS nor plaintext), or a client; `reconciler` may be
   * a factory taking the mirror. Throws when sources of one type give different selectors.
   */
  complete(
    informer: string | InformerServiceClient,
    reconciler: Reconciler | ((mirror: Mirror) => Reconciler),
  ): Controller {
    if (this.primary === undefined) throw new Error(`controller ${this.name} needs a primary type: call for()`);
    const types = this.subscribedTypes(); // before dialing: a conflict fails here
    let options = this.options;
    let client: InformerServiceClient;
    if (typeof informer === "string") {
      const creds = options.credentials ?? securityFromEnv();
      options = { ...options, credentials: creds }; // the manager is dialed the same way
      client = new InformerServiceClient(informer, creds, {
        "grpc.max_receive_message_length": 64 * 1024 * 1024,
      });
    } else {
      client = informer;
    }
    return new Controller(
      this.name,
      client,
      this.primary,
      this.routes,
      reconciler,
      options,
      types,
    );
  }
}
