/**
 * Subscriptions: what a controller's source needs the informer to send of its type.
 *
 * By default a source gets every object of its type, whole. A {@link Subscription} narrows
 * that: which objects (label and field selectors, an owner filter, those another type
 * selects) and which of their fields (a projection, or the metadata alone). The informer
 * applies it before it encodes an event, so objects and fields nobody asked for cost neither
 * the informer nor the controller anything. Give one where a {@link ResourceType} goes, as a
 * {@link SubscribedType}:
 *
 * ```ts
 * new ControllerBuilder("deployment")
 *   .forKind(DEPLOYMENTS, "Deployment", generationChanged)
 *   .owns({ type: REPLICASETS, ownerFilter: { orphans: true } }) // and those it may adopt
 *   .watches({ type: PODS, labelSelector: "app", fields: ["status.phase"], metadataOnly: true }, podsToDeployment);
 *
 * // Only the pods some Service selects (an endpoints-like controller):
 * builder.watches({ type: PODS, selectedBy: { type: SERVICES, path: "spec.selector" } }, podsToServices);
 * ```
 *
 * An `owns` source keeps only the objects whose controller owner is of the primary kind even
 * without a subscription — that is all it reacts to; its own `ownerFilter` adds kinds or
 * orphans to that.
 *
 * # Merging the sources of a type
 * A controller watches each type once, so the subscriptions of the sources that name the same
 * type are merged into the one `WatchTarget` its request carries, and each source gets at
 * least what it asked for:
 * - owner filter: none when any source has none (a type both owned and watched unfiltered is
 *   not filtered), else the union of the kinds, with orphans when any source keeps them;
 * - projection: the whole object when any source wants it whole (no `fields`, not
 *   `metadataOnly`), else the union of the fields, metadata only when every source is (when
 *   only some are, `metadata` joins the fields);
 * - selected by: kept when every source gives the same join (selecting type and path), else
 *   none (a source without one, or two different joins): one target cannot say "selected by
 *   this or by that", so the type receives every object;
 * - selectors: they must be the same (up to surrounding spaces); different ones throw when
 *   the controller is built, naming the type, the selectors and the sources.
 * Kinds and fields are sent sorted, so equal needs make equal targets.
 *
 * # What the mirror holds
 * What was sent: an object that stops passing its type's filters is seen as deleted, one that
 * starts to as added, and the JSON of a projected type holds only what the projection keeps
 * (`WatchTarget.fields` in informer.proto). `MirrorObject.meta`, the parsed metadata every
 * event carries (name, namespace, UID, resource version, labels, owner references), is never
 * projected: read those from it rather than from `MirrorObject.object`.
 */

import type { ResourceType, WatchTarget } from "./gen/steward/v1/informer";

/** A kind of object: its API group ("" for the core group) and kind, e.g. `{ group: "apps", kind: "ReplicaSet" }`. */
export interface GroupKind {
  readonly group: string;
  readonly kind: string;
}

/**
 * Keeps the objects whose controller owner reference (the one with `controller: true`) is of
 * one of `kinds`; a reference's group is its apiVersion's ("apps" of "apps/v1", "" of "v1").
 */
export interface OwnerFilter {
  /** Kinds of controller owner to keep. */
  readonly kinds?: readonly GroupKind[];
  /** Also keep the objects without a controller owner (those a controller may adopt). */
  readonly orphans?: boolean;
}

/**
 * Keeps only the objects that some object of another type selects by its labels, in the same
 * namespace: `{ type: SERVICES, path: "spec.selector" }` keeps the pods some Service selects.
 * The informer makes the join (it holds both types): when a selector changes, the objects it
 * starts to select arrive as added and those no selector selects any more as deleted, with
 * their last state. Such a type is never resumed: on every (re)opened watch the informer sends
 * REPLACED and a fresh snapshot of it, which the mirror applies as any other (objects the
 * snapshot lacks are reported deleted). See `SelectedBy` in informer.proto.
 */
export interface SelectedBy {
  /**
   * The selecting type, e.g. services; not the watched type. The controller must be allowed
   * to list and watch it too.
   */
  readonly type: ResourceType;
  /**
   * Dot-separated path of the selector in a selecting object: a map of labels (a Service's
   * "spec.selector") or a LabelSelector with matchLabels and matchExpressions (a Deployment's
   * "spec.selector"). An absent or empty selector selects nothing.
   */
  readonly path: string;
}

/** What one source needs of its type (see the module docs); `{}` is every object, whole. */
export interface Subscription {
  /** Only matching objects of this type (e.g. "app=web"), on top of the controller's label selector; "" for all. */
  readonly labelSelector?: string;
  /** Only matching objects of this type (metadata.name, metadata.namespace); "" for all. */
  readonly fieldSelector?: string;
  /**
   * Only the objects controlled by one of its kinds (and, with `orphans`, those controlled by
   * nobody); undefined for all. An `owns` source always keeps those the primary kind controls.
   */
  readonly ownerFilter?: OwnerFilter;
  /**
   * The projection: the dot-separated paths to keep, e.g. "spec.nodeName" or
   * "status.conditions" (through a list, a path applies to each item:
   * "spec.containers.image"); empty for the whole object.
   */
  readonly fields?: readonly string[];
  /** Only apiVersion, kind and metadata (without managedFields), plus `fields`: client-go's metadata-only informer. */
  readonly metadataOnly?: boolean;
  /**
   * Only the objects some object of another type selects (e.g. the pods of Services:
   * `{ type: SERVICES, path: "spec.selector" }`); undefined for all. A type whose sources do
   * not all give the same one receives every object.
   */
  readonly selectedBy?: SelectedBy;
}

/** A resource type with a {@link Subscription}: accepted wherever a {@link ResourceType} is watched. */
export interface SubscribedType extends Subscription {
  readonly type: ResourceType;
}

/** The type and the subscription of a watched entry (a plain type subscribes to everything). */
export function splitSubscribed(entry: ResourceType | SubscribedType): [ResourceType, Subscription] {
  if ("type" in entry) {
    const { type, ...subscription } = entry;
    return [type, subscription];
  }
  return [entry, {}];
}

const sameType = (a: ResourceType, b: ResourceType): boolean =>
  a.group === b.group && a.version === b.version && a.resource === b.resource;

const nameOf = (t: ResourceType): string => `${t.group}/${t.version}/${t.resource}`;

/** Whether `path` is dot-separated names, none of them empty. */
const validPath = (path: string): boolean => path.split(".").every((segment) => segment !== "");

/**
 * Throws a `RangeError` for what no informer would serve for a source of `type` (when given):
 * an owner filter that keeps nothing, a kind without a name, an empty path segment, a type
 * selecting its own objects.
 */
export function validateSubscription(sub: Subscription, type?: ResourceType): void {
  const owners = sub.ownerFilter;
  if (owners !== undefined) {
    if ((owners.kinds ?? []).length === 0 && owners.orphans !== true) {
      throw new RangeError("an owner filter without kinds or orphans keeps no object (leave it out to keep every object)");
    }
    for (const gk of owners.kinds ?? []) {
      if (!gk.kind) throw new RangeError(`owner filter kind ${JSON.stringify(gk)} has no kind`);
    }
  }
  for (const path of sub.fields ?? []) {
    if (!validPath(path)) {
      throw new RangeError(`projection path ${JSON.stringify(path)} is not dot-separated field names`);
    }
  }
  const join = sub.selectedBy;
  if (join !== undefined) {
    if (!join.type?.version || !join.type.resource) {
      throw new RangeError(`selected by ${JSON.stringify(join.type)}: name the selecting type (version and resource)`);
    }
    const by = nameOf(join.type);
    if (type !== undefined && sameType(join.type, type)) {
      throw new RangeError(`selected by ${by}: a type cannot select objects of its own type`);
    }
    if (typeof join.path !== "string" || !validPath(join.path)) {
      throw new RangeError(
        `selected by ${by}: selector path ${JSON.stringify(join.path)} is not dot-separated field names (e.g. "spec.selector")`,
      );
    }
  }
}

/** One source's subscription, and how errors name the source. */
export interface SourceSubscription {
  readonly from: string;
  readonly subscription: Subscription;
}

const byString = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The subscription serving every source of one type (see the module docs), with sorted kinds
 * and fields. Throws an `Error` when two sources give different selectors.
 */
export function mergeSubscriptions(typeName: string, sources: readonly SourceSubscription[]): Subscription {
  const first = sources[0];
  if (first === undefined) return {};
  const labelSelector = (first.subscription.labelSelector ?? "").trim();
  const fieldSelector = (first.subscription.fieldSelector ?? "").trim();
  for (const s of sources.slice(1)) {
    for (const [what, a, b] of [
      ["label selectors", labelSelector, (s.subscription.labelSelector ?? "").trim()],
      ["field selectors", fieldSelector, (s.subscription.fieldSelector ?? "").trim()],
    ] as const) {
      if (a !== b) {
        throw new Error(
          `the sources of ${typeName} ask for different ${what}: ${JSON.stringify(a)} (${first.from}) and ` +
            `${JSON.stringify(b)} (${s.from}); a type is watched once, with one selector, so give its sources the same one`,
        );
      }
    }
  }

  let ownerFilter: OwnerFilter | undefined;
  if (sources.every((s) => s.subscription.ownerFilter !== undefined)) {
    const kinds = new Map<string, GroupKind>();
    for (const s of sources) {
      for (const gk of s.subscription.ownerFilter?.kinds ?? []) {
        kinds.set(`${gk.group}\u0000${gk.kind}`, { group: gk.group, kind: gk.kind });
      }
    }
    ownerFilter = {
      kinds: [...kinds.values()].sort((a, b) => byString(a.group, b.group) || byString(a.kind, b.kind)),
      orphans: sources.some((s) => s.subscription.ownerFilter?.orphans === true),
    };
  }

  const whole = sources.some((s) => (s.subscription.fields ?? []).length === 0 && s.subscription.metadataOnly !== true);
  let fields: string[] = [];
  let metadataOnly = false;
  if (!whole) {
    const union = new Set(sources.flatMap((s) => s.subscription.fields ?? []));
    metadataOnly = sources.every((s) => s.subscription.metadataOnly === true);
    // A metadata-only source merged with projections still gets the whole metadata.
    if (!metadataOnly && sources.some((s) => s.subscription.metadataOnly === true)) union.add("metadata");
    fields = [...union].sort(byString);
  }
  // Objects selected by one type, or by another: one target cannot say both, so a type whose
  // sources do not all give the same join receives every object.
  const firstJoin = first.subscription.selectedBy;
  const same = (j: SelectedBy | undefined): boolean =>
    firstJoin !== undefined && j !== undefined && sameType(j.type, firstJoin.type) && j.path === firstJoin.path;
  const selectedBy = sources.every((s) => same(s.subscription.selectedBy)) ? copyJoin(firstJoin) : undefined;
  return { labelSelector, fieldSelector, ownerFilter, fields, metadataOnly, selectedBy };
}

/** A copy of a join (undefined for none), so a caller's later changes do not reach a mirror. */
function copyJoin(join: SelectedBy | undefined): SelectedBy | undefined {
  if (join === undefined) return undefined;
  const { group, version, resource } = join.type;
  return { type: { group, version, resource }, path: join.path };
}

/** The `WatchTarget` of a type with its subscription. */
export function watchTarget(type: ResourceType, resourceVersion: string, sub: Subscription): WatchTarget {
  const owners = sub.ownerFilter;
  return {
    type,
    resourceVersion,
    labelSelector: sub.labelSelector ?? "",
    fieldSelector: sub.fieldSelector ?? "",
    ownerFilter:
      owners === undefined
        ? undefined
        : { kinds: (owners.kinds ?? []).map((gk) => ({ group: gk.group, kind: gk.kind })), orphans: owners.orphans ?? false },
    fields: [...(sub.fields ?? [])],
    metadataOnly: sub.metadataOnly ?? false,
    selectedBy: copyJoin(sub.selectedBy),
  };
}
