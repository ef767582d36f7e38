/**
 * Subscriptions: the WatchRequest a controller (and a bare mirror) sends to a real gRPC
 * server playing the informer carries each type's subscription, its sources' merged; sources
 * of one type with different selectors, and malformed subscriptions, are refused when the
 * controller is built; a mirror of a type selected by another applies the REPLACED snapshot
 * the informer answers its reconnection with.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Server, ServerCredentials, type ServerWritableStream, credentials, status as GrpcStatus } from "@grpc/grpc-js";
import { ControllerBuilder } from "../controller";
import {
  type Event,
  EventType,
  InformerServiceClient,
  InformerServiceService,
  type ResourceType,
  type WatchRequest,
  type WatchResponse,
  type WatchTarget,
} from "../gen/steward/v1/informer";
import { type Change, Mirror, resourceType } from "../mirror";
import type { Reconciler } from "../reconcile";

const DEPLOYMENTS = resourceType("apps", "v1", "deployments");
const REPLICASETS = resourceType("apps", "v1", "replicasets");
const PODS = resourceType("", "v1", "pods");
const CONFIGMAPS = resourceType("", "v1", "configmaps");
const SECRETS = resourceType("", "v1", "secrets");
const JOBS = resourceType("batch", "v1", "jobs");
const SERVICES = resourceType("", "v1", "services");
const ENDPOINTS = resourceType("", "v1", "endpoints");

const nop: Reconciler = { reconcile: () => Promise.resolve({}) };
const noKeys = (): [] => [];

type Script = (call: ServerWritableStream<WatchRequest, WatchResponse>) => void;

/** An informer that records each WatchRequest and plays one script per Watch (none: holds it open). */
class RecordingInformer {
  readonly requests: WatchRequest[] = [];
  scripts: Script[] = [];
  private readonly server = new Server();
  port = 0;

  async start(): Promise<void> {
    this.server.addService(InformerServiceService, {
      watch: (call: ServerWritableStream<WatchRequest, WatchResponse>) => {
        this.requests.push(call.request);
        this.scripts.shift()?.(call);
      },
      list: (_call: unknown, cb: (err: { code: number }) => void) => cb({ code: GrpcStatus.UNIMPLEMENTED }),
      get: (_call: unknown, cb: (err: { code: number }) => void) => cb({ code: GrpcStatus.UNIMPLEMENTED }),
    });
    this.port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, port) =>
        err ? reject(err) : resolve(port),
      ),
    );
  }

  stop(): void {
    this.server.forceShutdown();
  }
}

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A WatchTarget as the informer decodes it: every field, defaults for those not set. */
function target(type: ResourceType, set: Partial<WatchTarget> = {}): WatchTarget {
  return {
    type,
    resourceVersion: "",
    labelSelector: "",
    fieldSelector: "",
    ownerFilter: undefined,
    fields: [],
    metadataOnly: false,
    selectedBy: undefined,
    ...set,
  };
}

function marker(type: EventType, rtype: ResourceType, rv: string): Event {
  return {
    type,
    resourceType: rtype,
    metadata: undefined,
    object: Buffer.alloc(0),
    previousObject: Buffer.alloc(0),
    resourceVersion: rv,
    traceContext: undefined,
  };
}

/** A snapshot's ADDED ConfigMap. */
function added(ns: string, name: string, rv: string): Event {
  return {
    ...marker(EventType.EVENT_TYPE_ADDED, CONFIGMAPS, ""),
    metadata: {
      namespace: ns,
      name,
      uid: `uid-${name}`,
      resourceVersion: rv,
      generation: 1,
      labels: {},
      ownerReferences: [],
      deletionTimestamp: undefined,
      finalizers: [],
    },
    object: Buffer.from(JSON.stringify({ apiVersion: "v1", kind: "ConfigMap", metadata: { namespace: ns, name } })),
  };
}

function initialEventsEnd(type: ResourceType, rv: string): Event {
  return {
    type: EventType.EVENT_TYPE_INITIAL_EVENTS_END,
    resourceType: type,
    metadata: undefined,
    object: Buffer.alloc(0),
    previousObject: Buffer.alloc(0),
    resourceVersion: rv,
    traceContext: undefined,
  };
}

describe("subscriptions", () => {
  const informer = new RecordingInformer();
  let client: InformerServiceClient;
  before(async () => {
    await informer.start();
    client = new InformerServiceClient(`127.0.0.1:${informer.port}`, credentials.createInsecure());
  });
  after(() => {
    client.close();
    informer.stop();
  });

  /** The first WatchRequest the mirror sends. */
  async function firstRequest(mirror: Mirror): Promise<WatchRequest> {
    informer.requests.length = 0;
    const stop = new AbortController();
    const running = mirror.run(stop.signal);
    await until(() => informer.requests.length === 1, "the watch");
    stop.abort();
    await running;
    return informer.requests[0]!;
  }

  it("a controller's watch carries each type's subscription, its sources' merged", async () => {
    const deployment = { group: "apps", kind: "Deployment" };
    const rollout = { group: "example.com", kind: "Rollout" };
    const byServices = { type: SERVICES, path: "spec.selector" };
    const controller = new ControllerBuilder("subs")
      // The primary type, narrowed by selectors.
      .forKind({ type: DEPLOYMENTS, labelSelector: "tier=web", fieldSelector: "metadata.namespace=prod" }, "Deployment")
      // Owned (the primary kind, another kind, orphans) and watched with that other kind: the
      // union of the kinds, orphans, the union of the fields; sorted. Selected by the same
      // type at two paths: every object.
      .owns({
        type: REPLICASETS,
        ownerFilter: { kinds: [rollout, deployment], orphans: true },
        fields: ["status", "spec.replicas"],
        selectedBy: byServices,
      })
      .watches(
        {
          type: REPLICASETS,
          ownerFilter: { kinds: [rollout] },
          fields: ["status", "metadata.labels"],
          selectedBy: { type: SERVICES, path: "spec.other" },
        },
        noKeys,
      )
      // Owned, and watched without an owner filter: no owner filter; whole objects, as the
      // owns source reads them whole.
      .owns(PODS)
      .watches({ type: PODS, metadataOnly: true }, noKeys)
      // Metadata only for every source: metadata only, the fields' union. Selected by one
      // source only: every object.
      .watches({ type: CONFIGMAPS, metadataOnly: true, selectedBy: byServices }, noKeys)
      .watches({ type: CONFIGMAPS, metadataOnly: true, fields: ["data"] }, noKeys)
      // Metadata only for one source, a projection for the other: the projection, with the
      // metadata; the same selectors (up to spaces) agree; the same join (another but equal
      // type object) is kept.
      .watches({ type: SECRETS, metadataOnly: true, labelSelector: "app=x ", selectedBy: byServices }, noKeys)
      .watches(
        {
          type: SECRETS,
          fields: ["type"],
          labelSelector: " app=x",
          selectedBy: { type: resourceType("", "v1", "services"), path: "spec.selector" },
        },
        noKeys,
      )
      // Selected by two types at the same path: every object.
      .watches({ type: ENDPOINTS, selectedBy: byServices }, noKeys)
      .watches({ type: ENDPOINTS, selectedBy: { type: DEPLOYMENTS, path: "spec.selector" } }, noKeys)
      // Owned only: the primary kind's, whole; its one source's join.
      .owns({ type: JOBS, selectedBy: { type: DEPLOYMENTS, path: "spec.selector" } })
      .withOptions({ namespace: "prod", labelSelector: "team=a" })
      .complete(client, nop);
    const req = await firstRequest(controller.mirror);
    assert.equal(req.namespace, "prod");
    assert.equal(req.labelSelector, "team=a");
    assert.equal(req.subscriber, "subs");
    assert.deepEqual(req.targets, [
      target(DEPLOYMENTS, { labelSelector: "tier=web", fieldSelector: "metadata.namespace=prod" }),
      target(REPLICASETS, {
        ownerFilter: { kinds: [deployment, rollout], orphans: true },
        fields: ["metadata.labels", "spec.replicas", "status"],
      }),
      target(PODS),
      target(CONFIGMAPS, { metadataOnly: true, fields: ["data"] }),
      target(SECRETS, { labelSelector: "app=x", fields: ["metadata", "type"], selectedBy: byServices }),
      target(ENDPOINTS),
      target(JOBS, {
        ownerFilter: { kinds: [deployment], orphans: false },
        selectedBy: { type: DEPLOYMENTS, path: "spec.selector" },
      }),
    ]);
  });

  it("an owned type is filtered on the primary kind by default", async () => {
    const controller = new ControllerBuilder("rs").forKind(REPLICASETS, "ReplicaSet").owns(PODS).complete(client, nop);
    const req = await firstRequest(controller.mirror);
    assert.deepEqual(req.targets, [
      target(REPLICASETS),
      target(PODS, { ownerFilter: { kinds: [{ group: "apps", kind: "ReplicaSet" }], orphans: false } }),
    ]);
    assert.deepEqual(controller.mirror.subscription(PODS).ownerFilter, {
      kinds: [{ group: "apps", kind: "ReplicaSet" }],
      orphans: false,
    });
  });

  it("refuses sources of one type with different selectors when the controller is built", () => {
    assert.throws(
      () =>
        new ControllerBuilder("c")
          .for({ type: DEPLOYMENTS, labelSelector: "app=a" })
          .watches({ type: DEPLOYMENTS, labelSelector: "app=b" }, noKeys)
          .complete(client, nop),
      (err: Error) =>
        err.message.includes("controller c") &&
        err.message.includes("apps/v1/deployments") &&
        err.message.includes("different label selectors") &&
        err.message.includes('"app=a" (source 1, for)') &&
        err.message.includes('"app=b" (source 2, watches)'),
    );
    assert.throws(
      () =>
        new ControllerBuilder("c")
          .forKind(DEPLOYMENTS, "Deployment")
          .owns({ type: PODS, fieldSelector: "metadata.name=x" })
          .watches(PODS, noKeys)
          .complete(client, nop),
      (err: Error) =>
        err.message.includes("/v1/pods") &&
        err.message.includes("different field selectors") &&
        err.message.includes('"metadata.name=x" (source 2, owns)') &&
        err.message.includes('"" (source 3, watches)'),
    );
  });

  it("refuses a malformed subscription at once", () => {
    const b = new ControllerBuilder("c").forKind(DEPLOYMENTS, "Deployment");
    assert.throws(() => b.owns({ type: PODS, ownerFilter: {} }), /keeps no object/);
    assert.throws(() => b.owns({ type: PODS, ownerFilter: { kinds: [{ group: "apps", kind: "" }] } }), /has no kind/);
    assert.throws(() => b.watches({ type: PODS, fields: ["spec..nodeName"] }, noKeys), /not dot-separated/);
    assert.throws(
      () => b.watches({ type: PODS, selectedBy: { type: SERVICES, path: "" } }, noKeys),
      /watches\(\/v1\/pods\): selected by \/v1\/services: selector path "" is not dot-separated/,
    );
    assert.throws(
      () => b.owns({ type: PODS, selectedBy: { type: SERVICES, path: "spec." } }),
      /selector path "spec\." is not dot-separated/,
    );
    assert.throws(
      () =>
        b.watches({ type: PODS, selectedBy: { type: resourceType("", "v1", "pods"), path: "spec.selector" } }, noKeys),
      /selected by \/v1\/pods: a type cannot select objects of its own type/,
    );
    assert.throws(
      () => b.watches({ type: PODS, selectedBy: { type: resourceType("", "", ""), path: "spec.selector" } }, noKeys),
      /name the selecting type/,
    );
    assert.deepEqual(b.subscribedTypes(), [
      {
        type: DEPLOYMENTS,
        labelSelector: "",
        fieldSelector: "",
        ownerFilter: undefined,
        fields: [],
        metadataOnly: false,
        selectedBy: undefined,
      },
    ]);
    assert.throws(() => new ControllerBuilder("c").for({ type: PODS, ownerFilter: {} }), /keeps no object/);
  });

  it("a mirror merges its entries, resumes with the subscription and applies the REPLACED snapshot", async () => {
    assert.throws(
      () =>
        new Mirror(client, [
          { type: CONFIGMAPS, labelSelector: "a=b" },
          { type: CONFIGMAPS, labelSelector: "a=c" },
        ]),
      /different label selectors: "a=b" \(entry 1\) and "a=c" \(entry 2\)/,
    );
    assert.throws(
      () => new Mirror(client, [{ type: CONFIGMAPS, selectedBy: { type: CONFIGMAPS, path: "spec.selector" } }]),
      /a type cannot select objects of its own type/,
    );
    const fields = ["data"];
    const services = resourceType("", "v1", "services");
    const mirror = new Mirror(
      client,
      [
        {
          type: CONFIGMAPS,
          labelSelector: "app=web",
          ownerFilter: { kinds: [{ group: "apps", kind: "ReplicaSet" }] },
          selectedBy: { type: services, path: "spec.selector" },
        },
        {
          type: CONFIGMAPS,
          labelSelector: "app=web",
          ownerFilter: { orphans: true },
          fields,
          metadataOnly: true,
          selectedBy: { type: SERVICES, path: "spec.selector" },
        },
      ],
      { initialBackoffMs: 10 },
    );
    // The mirror keeps its own copy.
    fields[0] = "changed";
    (services as { resource: string }).resource = "changed";
    const changes: string[] = [];
    mirror.addHandler((c: Change) => changes.push(`${c.kind} ${c.obj.key}@${c.obj.resourceVersion}`));
    informer.requests.length = 0;
    informer.scripts = [
      (call) => {
        call.write({ events: [added("a", "one", "5"), added("a", "kept", "4"), initialEventsEnd(CONFIGMAPS, "5")] });
        call.end(); // the informer closes the stream: reconnect
      },
      (call) => {
        // A selected-by target is never resumed: REPLACED and a fresh snapshot.
        call.write({ events: [marker(EventType.EVENT_TYPE_REPLACED, CONFIGMAPS, ""), added("a", "kept", "4")] });
        call.write({ events: [added("a", "two", "6"), initialEventsEnd(CONFIGMAPS, "7")] });
        call.end();
      },
    ];
    const stop = new AbortController();
    const running = mirror.run(stop.signal);
    await until(() => informer.requests.length === 3, "the watch after the replacement");
    stop.abort();
    await running;
    // One entry wants whole objects: whole objects; both give the same join: kept.
    const want = (rv: string): WatchTarget =>
      target(CONFIGMAPS, {
        resourceVersion: rv,
        labelSelector: "app=web",
        ownerFilter: { kinds: [{ group: "apps", kind: "ReplicaSet" }], orphans: true },
        selectedBy: { type: SERVICES, path: "spec.selector" },
      });
    assert.deepEqual(informer.requests[0]!.targets, [want("")]);
    assert.deepEqual(informer.requests[1]!.targets, [want("5")], "the reopened watch carries the subscription");
    assert.deepEqual(informer.requests[2]!.targets, [want("7")]);
    assert.deepEqual(changes, ["added a/one@5", "added a/kept@4", "added a/two@6", "deleted a/one@5"]);
    assert.equal(mirror.get(CONFIGMAPS, "a", "one"), undefined);
    assert.equal(mirror.resourceVersion(CONFIGMAPS), "7");

    const differentJoins = new Mirror(client, [
      { type: CONFIGMAPS, selectedBy: { type: SERVICES, path: "spec.selector" } },
      { type: CONFIGMAPS, selectedBy: { type: DEPLOYMENTS, path: "spec.selector" } },
    ]);
    assert.equal(differentJoins.subscription(CONFIGMAPS).selectedBy, undefined);
    assert.deepEqual((await firstRequest(differentJoins)).targets, [target(CONFIGMAPS)]);

    const projected = new Mirror(client, [{ type: CONFIGMAPS, fields, metadataOnly: true }]);
    fields.push("binaryData");
    const req = await firstRequest(projected);
    assert.deepEqual(req.targets, [target(CONFIGMAPS, { fields: ["changed"], metadataOnly: true })]);
  });
});
