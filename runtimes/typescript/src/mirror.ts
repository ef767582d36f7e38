/**
 * A controller's local mirror of the objects it watches, fed by the informer's Watch stream.
 *
 * {@link Mirror} keeps every object of its resource types (parsed metadata plus the API
 * server's JSON, decoded on first use) by key, with an index by namespace and by owner UID,
 * and tells registered handlers what changed.
 *
 * # Recovery
 * The stream is reopened with exponential backoff (800 ms doubling to 30 s, reset once a
 * stream delivers) whenever it ends or fails: the informer restarted, the network broke,
 * the informer said UNAVAILABLE. It resumes from the last resource version seen per type,
 * so nothing is missed and nothing is delivered twice. When the informer cannot serve the
 * resume it sends REPLACED and a fresh snapshot; the mirror then reports as deleted every
 * object it held of that type that the snapshot lacks, and as modified every one whose
 * resource version changed (unchanged ones are not reported again).
 *
 * # Catching up on demand
 * {@link Mirror.catchUp} is a read barrier: it reopens the stream at once (no backoff;
 * resuming, so nothing is sent twice) and resolves once every type's INITIAL_EVENTS_END has
 * arrived on a stream opened after it was called, that is once the mirror holds everything
 * the informer held when it was called. A stream that ends before that hands the wait to the
 * next one, so while the informer is down the barrier waits. A standby promoted to active
 * calls it before its first reconcile: the events it was fed while standing by may still sit
 * in buffers between the informer and it, and acting on a cache that lacks the last objects
 * its predecessor created would create them again.
 *
 * A request the informer refuses for good (NOT_FOUND, INVALID_ARGUMENT, PERMISSION_DENIED,
 * UNAUTHENTICATED, UNIMPLEMENTED) is not retried: {@link Mirror.run} rejects with
 * {@link MirrorError} carrying the informer's message.
 *
 * # Subscriptions
 * Each type may come with a {@link Subscription} (pass a {@link SubscribedType} for it): the
 * informer then sends only the objects that pass its filters (one that stops passing is
 * reported as deleted, one that starts to as added) and, of a projected type, only the
 * fields asked for. Entries naming the same type are merged (see subscription.ts). A type
 * with `selectedBy` is never resumed: the informer answers every (re)opened watch with
 * REPLACED and a fresh snapshot of it, applied as any REPLACED (objects it lacks are reported
 * deleted, new ones added, changed ones modified, unchanged ones not at all).
 *
 * # Memory usage
 * One {@link MirrorObject} per object (the JSON bytes and parsed metadata; the decoded
 * object only once someone asked for it), plus index entries.
 */

import { type ClientReadableStream, type ServiceError, status as GrpcStatus } from "@grpc/grpc-js";
import {
  type Event,
  EventType,
  InformerServiceClient,
  type ObjectMeta,
  type OwnerReference,
  type ResourceType,
  type WatchRequest,
  type WatchResponse,
} from "./gen/steward/v1/informer";
import { log } from "./log";
import {
  type SubscribedType,
  type Subscription,
  mergeSubscriptions,
  splitSubscribed,
  validateSubscription,
  watchTarget,
} from "./subscription";
import type { TraceContext } from "./workqueue";

/** `group/version/resource`: the map key of a resource type. */
export type TypeKey = string;

/** The {@link TypeKey} of a resource type. */
export function typeKey(rtype: ResourceType): TypeKey {
  return `${rtype.group}/${rtype.version}/${rtype.resource}`;
}

/** Build a {@link ResourceType} (`group` is "" for the core API group). */
export function resourceType(group: string, version: string, resource: string): ResourceType {
  return { group, version, resource };
}

const PERMANENT = new Set<number>([
  GrpcStatus.NOT_FOUND,
  GrpcStatus.INVALID_ARGUMENT,
  GrpcStatus.PERMISSION_DENIED,
  GrpcStatus.UNAUTHENTICATED,
  GrpcStatus.UNIMPLEMENTED,
]);

/** The informer refused the watch for good (bad type, selector or permissions). */
export class MirrorError extends Error {
  constructor(
    readonly code: number,
    readonly details: string,
  ) {
    super(`informer refused the watch (${GrpcStatus[code] ?? code}): ${details}`);
    this.name = "MirrorError";
  }
}

/** One mirrored object: parsed metadata, the API server's JSON, decoded on demand. */
export class MirrorObject {
  private decoded: Record<string, unknown> | undefined;

  constructor(
    readonly type: TypeKey,
    readonly meta: ObjectMeta,
    readonly raw: Uint8Array,
  ) {}

  /** `namespace/name` (or `name` when cluster-scoped): the object's key in the mirror. */
  get key(): string {
    return objectKey(this.meta.namespace, this.meta.name);
  }

  get namespace(): string {
    return this.meta.namespace;
  }

  get name(): string {
    return this.meta.name;
  }

  get resourceVersion(): string {
    return this.meta.resourceVersion;
  }

  /** The object as parsed JSON (decoded once; treat it as read-only). */
  get object(): Record<string, unknown> {
    if (this.decoded === undefined) {
      this.decoded = JSON.parse(Buffer.from(this.raw).toString("utf8")) as Record<string, unknown>;
    }
    return this.decoded;
  }

  /** The owner reference with `controller: true`, if any. */
  controllerOwner(): OwnerReference | undefined {
    return this.meta.ownerReferences.find((ref) => ref.controller);
  }
}

/** `namespace/name`, or `name` for cluster-scoped objects. */
export function objectKey(namespace: string, name: string): string {
  return namespace ? `${namespace}/${name}` : name;
}

/** What happened to an object in the mirror. */
export type ChangeKind = "added" | "modified" | "deleted";

/** One change to the mirror, as handed to handlers. */
export interface Change {
  readonly kind: ChangeKind;
  /** The new state (for deleted, the last known state). */
  readonly obj: MirrorObject;
  /** The previous state, for modified. */
  readonly old: MirrorObject | undefined;
  /** The trace context the informer sent with the event (undefined for synthesised changes). */
  readonly trace: TraceContext | undefined;
}

/** Called for every change, in order; must not block. */
export type Handler = (change: Change) => void;

/** How a mirror watches. Every field has a working default. */
export interface MirrorOptions {
  /** Only this namespace; "" (the default) for all. */
  namespace?: string;
  /** Kubernetes label selector; "" (the default) for everything. */
  labelSelector?: string;
  /** Field selector (metadata.name, metadata.namespace); "" for everything. */
  fieldSelector?: string;
  /** Name the informer shows for this subscriber (e.g. the controller's name). */
  subscriber?: string;
  /** Events per message; 0 (the default) for the informer's default. */
  maxBatchSize?: number;
  /** First reconnection delay in ms. Defaults to 800. */
  initialBackoffMs?: number;
  /** Longest reconnection delay in ms. Defaults to 30 000. */
  maxBackoffMs?: number;
}

class TypeState {
  objects = new Map<string, MirrorObject>();
  resourceVersion = "";
  synced = false;
  /** Keys seen in a fresh snapshot after REPLACED, until its INITIAL_EVENTS_END. */
  replacing: Set<string> | undefined;
  byNamespace = new Map<string, Set<string>>();
  byOwner = new Map<string, Set<string>>();
}

function indexAdd(index: Map<string, Set<string>>, value: string, key: string): void {
  let keys = index.get(value);
  if (keys === undefined) {
    keys = new Set();
    index.set(value, keys);
  }
  keys.add(key);
}

function indexRemove(index: Map<string, Set<string>>, value: string, key: string): void {
  const keys = index.get(value);
  if (keys === undefined) return;
  keys.delete(key);
  if (keys.size === 0) index.delete(value);
}

/** Resolves after `ms`, or early when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * The local mirror of some resource types, kept by one Watch stream (see the module docs).
 *
 * `run(signal)` resolves when `signal` aborts (or rejects with {@link MirrorError}); the
 * read methods answer from what has been received so far.
 */
export class Mirror {
  /** How often the stream was reopened (for logs and tests). */
  reconnects = 0;
  private readonly types = new Map<TypeKey, ResourceType>();
  /** What the informer sends of each type (merged per type). */
  private readonly subscriptions = new Map<TypeKey, Subscription>();
  private readonly state = new Map<TypeKey, TypeState>();
  private readonly handlers: Handler[] = [];
  private syncedFlag = false;
  private syncWaiters: (() => void)[] = [];
  /** The open Watch stream, while there is one. */
  private call: ClientReadableStream<WatchResponse> | undefined;
  /** Set by {@link catchUp} when it cancels the stream: reconnect at once. */
  private reopen = false;
  /** Callers of {@link catchUp} waiting for the next stream to reach the present. */
  private barriers: (() => void)[] = [];
  /** Those the current stream answers once it has sent every INITIAL_EVENTS_END. */
  private streamBarriers: (() => void)[] = [];
  /** The types whose INITIAL_EVENTS_END the current stream has sent. */
  private readonly streamEnded = new Set<TypeKey>();
  readonly options: Required<MirrorOptions>;

  /**
   * `types` are the resource types to watch, each plain (every object, whole) or with a
   * subscription (`{ type, fields: [...] }`: see {@link SubscribedType}). Throws a
   * `RangeError` for a malformed subscription and an `Error` for entries of one type with
   * different selectors.
   */
  constructor(
    private readonly client: InformerServiceClient,
    types: Iterable<ResourceType | SubscribedType>,
    options: MirrorOptions = {},
  ) {
    const entries = new Map<TypeKey, { from: string; subscription: Subscription }[]>();
    let n = 0;
    for (const entry of types) {
      n += 1;
      const [t, subscription] = splitSubscribed(entry);
      validateSubscription(subscription, t);
      const key = typeKey(t);
      if (!this.types.has(key)) {
        this.types.set(key, t);
        this.state.set(key, new TypeState());
        entries.set(key, []);
      }
      entries.get(key)!.push({ from: `entry ${n}`, subscription });
    }
    if (this.types.size === 0) throw new RangeError("a mirror needs at least one resource type");
    for (const [key, subs] of entries) this.subscriptions.set(key, mergeSubscriptions(key, subs));
    this.options = {
      namespace: options.namespace ?? "",
      labelSelector: options.labelSelector ?? "",
      fieldSelector: options.fieldSelector ?? "",
      subscriber: options.subscriber ?? "",
      maxBatchSize: options.maxBatchSize ?? 0,
      initialBackoffMs: options.initialBackoffMs ?? 800,
      maxBackoffMs: options.maxBackoffMs ?? 30_000,
    };
  }

  // -- reading ----------------------------------------------------------------------------

  /** The object, or undefined if the mirror does not hold it. */
  get(rtype: ResourceType | TypeKey, namespace: string, name: string): MirrorObject | undefined {
    return this.typeState(rtype).objects.get(objectKey(namespace, name));
  }

  /** Every object of the type, or of one namespace of it. */
  list(rtype: ResourceType | TypeKey, namespace?: string): MirrorObject[] {
    const st = this.typeState(rtype);
    if (namespace === undefined) return [...st.objects.values()];
    return [...(st.byNamespace.get(namespace) ?? [])].map((k) => st.objects.get(k)!);
  }

  /** Objects that have an owner reference with this UID. */
  byOwner(rtype: ResourceType | TypeKey, ownerUid: string): MirrorObject[] {
    const st = this.typeState(rtype);
    return [...(st.byOwner.get(ownerUid) ?? [])].map((k) => st.objects.get(k)!);
  }

  /** The last resource version seen of a type (the resume point). */
  resourceVersion(rtype: ResourceType | TypeKey): string {
    return this.typeState(rtype).resourceVersion;
  }

  /** The resource types this mirror watches. */
  watchedTypes(): ResourceType[] {
    return [...this.types.values()];
  }

  /** What the informer is asked to send of a type (its sources' subscriptions, merged). */
  subscription(rtype: ResourceType | TypeKey): Subscription {
    this.typeState(rtype);
    return this.subscriptions.get(typeof rtype === "string" ? rtype : typeKey(rtype)) ?? {};
  }

  /** True once every type's initial snapshot has arrived. */
  hasSynced(): boolean {
    return this.syncedFlag;
  }

  /** Resolves once every type's initial snapshot has arrived. */
  waitSynced(): Promise<void> {
    if (this.syncedFlag) return Promise.resolve();
    return new Promise((resolve) => this.syncWaiters.push(resolve));
  }

  /**
   * Resolves once the mirror holds everything the informer holds now (see the module docs):
   * the stream is reopened at once, and the wait spans reconnections, so an informer that is
   * down delays it. Aborting `signal` rejects it with the signal's reason and drops the wait.
   */
  catchUp(signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const onAbort = (): void => {
        this.barriers = this.barriers.filter((b) => b !== done);
        this.streamBarriers = this.streamBarriers.filter((b) => b !== done);
        reject(signal?.reason);
      };
      const done = (): void => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.barriers.push(done);
      if (this.call !== undefined) {
        this.reopen = true;
        this.call.cancel();
      }
    });
  }

  /**
   * Call `handler` for every change from now on, after the objects already held are
   * replayed to it as added (so it never misses one).
   */
  addHandler(handler: Handler): void {
    this.handlers.push(handler);
    for (const st of this.state.values()) {
      for (const obj of st.objects.values()) {
        handler({ kind: "added", obj, old: undefined, trace: undefined });
      }
    }
  }

  private typeState(rtype: ResourceType | TypeKey): TypeState {
    const key = typeof rtype === "string" ? rtype : typeKey(rtype);
    const st = this.state.get(key);
    if (st === undefined) throw new RangeError(`the mirror does not watch ${key}`);
    return st;
  }

  // -- running ----------------------------------------------------------------------------

  /** Watch until `signal` aborts, reconnecting and resuming as the module docs say. */
  async run(signal: AbortSignal): Promise<void> {
    let delay = this.options.initialBackoffMs;
    while (!signal.aborted) {
      for (const st of this.state.values()) {
        // A snapshot cut off midway is not a complete picture: never infer deletions
        // from it (the next REPLACED starts a new one).
        st.replacing = undefined;
      }
      // Barriers the last stream did not answer (it ended early) wait for this one.
      this.streamBarriers.push(...this.barriers);
      this.barriers = [];
      this.streamEnded.clear();
      this.reopen = false;
      let delivered = false;
      const call = this.client.watch(this.request());
      this.call = call;
      const onAbort = (): void => call.cancel();
      signal.addEventListener("abort", onAbort, { once: true });
      try {
        for await (const response of call as AsyncIterable<{ events: Event[] }>) {
          delivered = true;
          this.apply(response.events);
        }
        if (!this.reopen) log.info("informer ended the watch stream; reconnecting");
      } catch (err) {
        if (signal.aborted) return;
        const e = err as ServiceError;
        if (typeof e.code === "number" && PERMANENT.has(e.code)) {
          throw new MirrorError(e.code, e.details ?? e.message);
        }
        if (!this.reopen) {
          log.warn(
            `watch stream failed (${GrpcStatus[e.code] ?? e.code}: ${e.details ?? e.message}); ` +
              `reconnecting in ${delay} ms`,
          );
        }
      } finally {
        signal.removeEventListener("abort", onAbort);
        this.call = undefined;
        this.barriers.push(...this.streamBarriers);
        this.streamBarriers = [];
      }
      if (this.reopen) {
        // catchUp() ended this stream to resume at once on a new one.
        this.reconnects += 1;
        continue;
      }
      if (delivered) delay = this.options.initialBackoffMs;
      this.reconnects += 1;
      await sleep(delay, signal);
      delay = Math.min(delay * 2, this.options.maxBackoffMs);
    }
  }

  private request(): WatchRequest {
    const o = this.options;
    return {
      targets: [...this.types].map(([k, t]) =>
        watchTarget(t, this.state.get(k)!.resourceVersion, this.subscriptions.get(k) ?? {}),
      ),
      namespace: o.namespace,
      labelSelector: o.labelSelector,
      fieldSelector: o.fieldSelector,
      sendPreviousObject: false,
      maxBatchSize: o.maxBatchSize,
      subscriber: o.subscriber,
    };
  }

  /** Apply a batch of events (exposed for tests; `run` calls it). */
  apply(events: readonly Event[]): void {
    for (const event of events) {
      if (event.resourceType === undefined) continue;
      const key = typeKey(event.resourceType);
      const st = this.state.get(key);
      if (st === undefined) continue;
      switch (event.type) {
        case EventType.EVENT_TYPE_REPLACED:
          st.replacing = new Set();
          break;
        case EventType.EVENT_TYPE_INITIAL_EVENTS_END:
          if (st.replacing !== undefined) {
            this.finishReplace(st, st.replacing);
            st.replacing = undefined;
          }
          st.synced = true;
          if (!this.syncedFlag && [...this.state.values()].every((s) => s.synced)) {
            this.syncedFlag = true;
            const waiters = this.syncWaiters;
            this.syncWaiters = [];
            for (const w of waiters) w();
          }
          this.streamEnded.add(key);
          if (this.streamBarriers.length > 0 && this.streamEnded.size === this.state.size) {
            const answered = this.streamBarriers;
            this.streamBarriers = [];
            for (const done of answered) done();
          }
          break;
        case EventType.EVENT_TYPE_ADDED:
        case EventType.EVENT_TYPE_MODIFIED: {
          if (event.metadata === undefined) break;
          const obj = new MirrorObject(key, event.metadata, event.object);
          st.replacing?.add(obj.key);
          this.upsert(st, obj, event);
          break;
        }
        case EventType.EVENT_TYPE_DELETED: {
          if (event.metadata === undefined) break;
          const obj = new MirrorObject(key, event.metadata, event.object);
          const gone = st.objects.get(obj.key);
          if (gone !== undefined) {
            this.unindex(st, gone);
            st.objects.delete(obj.key);
          }
          this.emit({ kind: "deleted", obj, old: undefined, trace: traceOf(event) });
          break;
        }
        default:
          break;
      }
      if (event.resourceVersion) st.resourceVersion = event.resourceVersion;
    }
  }

  private upsert(st: TypeState, obj: MirrorObject, event: Event): void {
    const old = st.objects.get(obj.key);
    if (old !== undefined) {
      if (old.resourceVersion === obj.resourceVersion) return; // the same state again
      this.unindex(st, old);
    }
    st.objects.set(obj.key, obj);
    this.index(st, obj);
    this.emit({ kind: old === undefined ? "added" : "modified", obj, old, trace: traceOf(event) });
  }

  private finishReplace(st: TypeState, seen: Set<string>): void {
    for (const [key, gone] of [...st.objects]) {
      if (seen.has(key)) continue;
      st.objects.delete(key);
      this.unindex(st, gone);
      this.emit({ kind: "deleted", obj: gone, old: undefined, trace: undefined });
    }
  }

  private index(st: TypeState, obj: MirrorObject): void {
    indexAdd(st.byNamespace, obj.namespace, obj.key);
    for (const ref of obj.meta.ownerReferences) indexAdd(st.byOwner, ref.uid, obj.key);
  }

  private unindex(st: TypeState, obj: MirrorObject): void {
    indexRemove(st.byNamespace, obj.namespace, obj.key);
    for (const ref of obj.meta.ownerReferences) indexRemove(st.byOwner, ref.uid, obj.key);
  }

  private emit(change: Change): void {
    for (const handler of this.handlers) {
      try {
        handler(change);
      } catch (err) {
        // A handler's bug must not stop the mirror.
        log.error(`mirror handler failed on ${change.kind} ${change.obj.key}: ${String(err)}`);
      }
    }
  }
}

function traceOf(event: Event): TraceContext | undefined {
  const ctx = event.traceContext;
  if (ctx === undefined || !ctx.traceparent) return undefined;
  return { traceparent: ctx.traceparent, tracestate: ctx.tracestate };
}
