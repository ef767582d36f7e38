/** What a reconcile gets and returns: {@link Request} in, {@link Result} out, {@link TerminalError}. */

import type { Span } from "@opentelemetry/api";
import type { TraceContext } from "./workqueue";

/** The key of one object to reconcile: namespace ("" for cluster-scoped) and name. */
export interface Request {
  readonly namespace: string;
  readonly name: string;
}

/** `namespace/name`, or `name` for a cluster-scoped object: the work-queue key. */
export function requestKey(request: Request): string {
  return request.namespace ? `${request.namespace}/${request.name}` : request.name;
}

/** Parse `namespace/name` or `name`; more slashes throw RangeError. */
export function parseRequestKey(key: string): Request {
  const parts = key.split("/");
  if (parts.length === 1) return { namespace: "", name: parts[0]! };
  if (parts.length === 2) return { namespace: parts[0]!, name: parts[1]! };
  throw new RangeError(`not a namespace/name key: ${JSON.stringify(key)}`);
}

/**
 * What to do after a reconcile that did not throw.
 *
 * `{}` (or `undefined`) means done: the key's backoff is forgotten and it is not queued
 * again until something adds it. `requeueAfter` (milliseconds, > 0) forgets the backoff and
 * adds the key again after that delay; `requeue: true` adds it again with rate limiting (its
 * backoff grows). When both are set, `requeueAfter` wins, as in controller-runtime.
 */
export interface Result {
  readonly requeue?: boolean;
  readonly requeueAfter?: number;
}

/**
 * Thrown by a reconcile to say retrying will not help: the key is not requeued. It is still
 * recorded, logged and counted as an error. The key comes back only when something adds it
 * again (a new event, a resync).
 */
export class TerminalError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TerminalError";
  }
}

/** What a reconcile knows besides its key. */
export interface ReconcileInfo {
  /** The W3C trace contexts of the events coalesced into this reconcile (maybe empty). */
  readonly contexts: readonly TraceContext[];
  /** Failed attempts (rate-limited requeues) of this key since its last success. */
  readonly attempt: number;
  /** The reconcile span (a no-op span when tracing is off). */
  readonly span: Span;
  /** Aborted when the worker pool's shutdown grace period is over: give up quickly. */
  readonly signal: AbortSignal;
}

/**
 * Brings the world in line with one object, read fresh by key (level-triggered). Return a
 * {@link Result} (or nothing); throw {@link TerminalError} to give up on the key, anything
 * else to have it retried with rate limiting.
 */
export interface Reconciler {
  reconcile(request: Request, info: ReconcileInfo): Promise<Result | void>;
}
