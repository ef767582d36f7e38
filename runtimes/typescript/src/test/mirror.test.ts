/**
 * The mirror and the conformance driver against a real gRPC server that plays the informer
 * from a script (one script per Watch connection): snapshot and sync, resume from the last
 * resource version, REPLACED, the catchUp read barrier, permanent errors.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  Server,
  ServerCredentials,
  type ServerWritableStream,
  credentials,
  status as GrpcStatus,
} from "@grpc/grpc-js";
import {
  type Event,
  EventType,
  InformerServiceClient,
  InformerServiceService,
  type WatchRequest,
  type WatchResponse,
} from "../gen/steward/v1/informer";
import { type Change, Mirror, MirrorError, resourceType } from "../mirror";

const CM = resourceType("", "v1", "configmaps");

type Script = (call: ServerWritableStream<WatchRequest, WatchResponse>) => void;

function obj(ns: string, name: string, rv: string, annotations: Record<string, string> = {}): Event {
  const metadata = { namespace: ns, name, resourceVersion: rv, annotations };
  return {
    type: EventType.EVENT_TYPE_ADDED,
    resourceType: CM,
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
    object: Buffer.from(JSON.stringify({ apiVersion: "v1", kind: "ConfigMap", metadata })),
    previousObject: Buffer.alloc(0),
    resourceVersion: "",
    traceContext: undefined,
  };
}

function marker(type: EventType, rv = ""): Event {
  return {
    type,
    resourceType: CM,
    metadata: undefined,
    object: Buffer.alloc(0),
    previousObject: Buffer.alloc(0),
    resourceVersion: rv,
    traceContext: undefined,
  };
}

class FakeInformer {
  readonly requests: WatchRequest[] = [];
  scripts: Script[] = [];
  private readonly server = new Server();
  port = 0;

  async start(): Promise<void> {
    this.server.addService(InformerServiceService, {
      watch: (call: ServerWritableStream<WatchRequest, WatchResponse>) => {
        this.requests.push(call.request);
        const script = this.scripts.shift();
        if (script === undefined) return; // hold the stream open
        script(call);
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

describe("mirror", () => {
  const informer = new FakeInformer();
  let client: InformerServiceClient;
  before(async () => {
    await informer.start();
    client = new InformerServiceClient(`127.0.0.1:${informer.port}`, credentials.createInsecure());
  });
  after(() => {
    client.close();
    informer.stop();
  });

  it("syncs, resumes from the last resource version, and applies REPLACED", async () => {
    informer.requests.length = 0;
    informer.scripts = [
      (call) => {
        call.write({ events: [obj("a", "keep", "1"), obj("a", "change", "2"), obj("b", "gone", "3")] });
        call.write({ events: [marker(EventType.EVENT_TYPE_INITIAL_EVENTS_END, "3")] });
        call.write({ events: [marker(EventType.EVENT_TYPE_BOOKMARK, "7")] });
        call.end(); // the informer closes the stream: resume
      },
      (call) => {
        call.write({ events: [marker(EventType.EVENT_TYPE_REPLACED)] });
        call.write({ events: [obj("a", "keep", "1"), obj("a", "change", "9")] });
        call.write({ events: [marker(EventType.EVENT_TYPE_INITIAL_EVENTS_END, "10")] });
      },
    ];
    const mirror = new Mirror(client, [CM], { subscriber: "test", initialBackoffMs: 10 });
    const changes: string[] = [];
    mirror.addHandler((c: Change) => changes.push(`${c.kind} ${c.obj.key}@${c.obj.resourceVersion}`));
    const stop = new AbortController();
    const running = mirror.run(stop.signal);
    await mirror.waitSynced();
    assert.equal(mirror.list(CM).length, 3);
    assert.equal(mirror.list(CM, "a").length, 2);
    await until(() => mirror.resourceVersion(CM) === "10", "the REPLACED snapshot");
    assert.equal(informer.requests.length, 2);
    assert.equal(informer.requests[0]?.targets[0]?.resourceVersion, "");
    assert.equal(informer.requests[0]?.subscriber, "test");
    assert.equal(informer.requests[1]?.targets[0]?.resourceVersion, "7", "resumed from the bookmark");
    assert.deepEqual(changes, [
      "added a/keep@1",
      "added a/change@2",
      "added b/gone@3",
      "modified a/change@9",
      "deleted b/gone@3",
    ]);
    assert.equal(mirror.get(CM, "b", "gone"), undefined);
    assert.equal((mirror.get(CM, "a", "change")?.object["metadata"] as { name: string }).name, "change");
    stop.abort();
    await running;
  });

  it("catchUp reopens a stuck stream at once and waits for the new stream's INITIAL_EVENTS_END", async () => {
    informer.requests.length = 0;
    let firstCancelled = false;
    let second: ServerWritableStream<WatchRequest, WatchResponse> | undefined;
    informer.scripts = [
      (call) => {
        call.on("cancelled", () => (firstCancelled = true));
        call.write({ events: [{ ...obj("a", "old", "4"), resourceVersion: "4" }] });
        call.write({ events: [marker(EventType.EVENT_TYPE_INITIAL_EVENTS_END, "5")] });
        call.write({ events: [marker(EventType.EVENT_TYPE_BOOKMARK, "8")] });
        // ...then nothing more: the stream is stuck, though the informer has moved on.
      },
      (call) => (second = call),
    ];
    // A reconnection with backoff would wait a minute: the test would time out.
    const mirror = new Mirror(client, [CM], { initialBackoffMs: 60_000 });
    const changes: string[] = [];
    mirror.addHandler((c: Change) => changes.push(`${c.kind} ${c.obj.key}@${c.obj.resourceVersion}`));
    const stop = new AbortController();
    const running = mirror.run(stop.signal);
    await mirror.waitSynced();
    await until(() => mirror.resourceVersion(CM) === "8", "the bookmark");

    let caughtUp = false;
    const barrier = mirror.catchUp().then(() => (caughtUp = true));
    await until(() => second !== undefined, "the reopened stream");
    assert.ok(firstCancelled, "the stuck stream was cancelled");
    assert.equal(informer.requests.length, 2);
    assert.equal(informer.requests[1]?.targets[0]?.resourceVersion, "8", "resumed from the last resource version");
    second!.write({ events: [{ ...obj("a", "new", "9"), resourceVersion: "9" }] });
    await until(() => mirror.get(CM, "a", "new") !== undefined, "the object the new stream sent");
    assert.equal(caughtUp, false, "caught up before the new stream's INITIAL_EVENTS_END");
    second!.write({ events: [marker(EventType.EVENT_TYPE_INITIAL_EVENTS_END, "9")] });
    await barrier;
    assert.equal(caughtUp, true);
    assert.equal(mirror.reconnects, 1);
    assert.deepEqual(changes, ["added a/old@4", "added a/new@9"], "nothing delivered twice");
    stop.abort();
    await running;
  });

  it("catchUp waits across a reopened stream that fails before INITIAL_EVENTS_END", async () => {
    informer.requests.length = 0;
    let third: ServerWritableStream<WatchRequest, WatchResponse> | undefined;
    informer.scripts = [
      (call) => {
        call.write({ events: [{ ...obj("a", "old", "4"), resourceVersion: "4" }] });
        call.write({ events: [marker(EventType.EVENT_TYPE_INITIAL_EVENTS_END, "5")] });
        // stuck from here on
      },
      (call) => {
        call.write({ events: [{ ...obj("a", "half", "6"), resourceVersion: "6" }] });
        setTimeout(() => call.emit("error", { code: GrpcStatus.UNAVAILABLE, details: "informer restarting" }), 20);
      },
      (call) => (third = call),
    ];
    const mirror = new Mirror(client, [CM], { initialBackoffMs: 10 });
    const stop = new AbortController();
    const running = mirror.run(stop.signal);
    await mirror.waitSynced();

    let caughtUp = false;
    const barrier = mirror.catchUp().then(() => (caughtUp = true));
    await until(() => third !== undefined, "the stream after the failed one");
    assert.equal(informer.requests.length, 3);
    assert.equal(informer.requests[1]?.targets[0]?.resourceVersion, "5");
    assert.equal(informer.requests[2]?.targets[0]?.resourceVersion, "6", "resumed after the failed stream");
    assert.ok(mirror.get(CM, "a", "half") !== undefined);
    assert.equal(caughtUp, false, "caught up although no stream reached INITIAL_EVENTS_END");
    third!.write({ events: [marker(EventType.EVENT_TYPE_INITIAL_EVENTS_END, "7")] });
    await barrier;
    assert.equal(caughtUp, true);
    assert.equal(mirror.resourceVersion(CM), "7");
    assert.equal(mirror.reconnects, 2);
    stop.abort();
    await running;
  });

  it("surfaces a permanent error without retrying", async () => {
    informer.requests.length = 0;
    informer.scripts = [(call) => call.emit("error", { code: GrpcStatus.NOT_FOUND, details: "no such type: widgets" })];
    const mirror = new Mirror(client, [CM], { initialBackoffMs: 10 });
    await assert.rejects(mirror.run(new AbortController().signal), (err: unknown) => {
      assert.ok(err instanceof MirrorError);
      assert.equal(err.code, GrpcStatus.NOT_FOUND);
      assert.match(err.message, /no such type: widgets/);
      return true;
    });
    assert.equal(informer.requests.length, 1);
  });
});

describe("conformance driver", () => {
  it("reports reconciles with attempts, coalesced trace contexts, and exits 0 on SIGTERM", async () => {
    const informer = new FakeInformer();
    await informer.start();
    const parent = `00-${"a".repeat(32)}-${"1".repeat(16)}-01`;
    const link = `00-${"b".repeat(32)}-${"2".repeat(16)}-01`;
    const first = { ...obj("ns", "flaky", "1", { "conformance.steward.dev/fail-times": "2" }), traceContext: { traceparent: parent, tracestate: "" } };
    const second = {
      ...obj("ns", "flaky", "2", { "conformance.steward.dev/fail-times": "2" }),
      type: EventType.EVENT_TYPE_MODIFIED,
      traceContext: { traceparent: link, tracestate: "" },
    };
    informer.scripts = [
      (call) => call.write({ events: [first, second, marker(EventType.EVENT_TYPE_INITIAL_EVENTS_END, "2")] }),
    ];
    const driver = spawn(process.execPath, [join(__dirname, "..", "conformance", "driver.js"), "--informer", `127.0.0.1:${informer.port}`], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    driver.stdout.on("data", (c: Buffer) => (out += c.toString()));
    driver.stderr.on("data", (c: Buffer) => (err += c.toString()));
    try {
      await until(() => out.split("\n").filter((l) => l.includes('"ok"')).length === 1, `the successful reconcile (stdout ${out}, stderr ${err})`);
      const lines = out.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
      assert.deepEqual(lines[0], { synced: true });
      const reconciles = lines.slice(1);
      assert.deepEqual(reconciles.map((r) => [r["attempt"], r["result"]]), [[0, "error"], [1, "error"], [2, "ok"]]);
      assert.equal(reconciles[0]?.["key"], "ns/flaky");
      assert.equal(reconciles[0]?.["resourceVersion"], "2");
      assert.equal(reconciles[0]?.["parent"], parent);
      assert.deepEqual(reconciles[0]?.["links"], [link]);
      assert.ok(typeof reconciles[0]?.["startNs"] === "number" && (reconciles[0]["startNs"] as number) > 1.6e18);
      driver.kill("SIGTERM");
      const [code] = (await once(driver, "exit")) as [number | null];
      assert.equal(code, 0, err);
    } finally {
      driver.kill("SIGKILL");
      informer.stop();
    }
  });
});
