/**
 * Unit tests of the host: its flags (standard and the author's), its help, the API client it
 * hands the reconciler (fenced from the start, and not to be unfenced), and its health
 * endpoints.
 */

import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  ConfigError,
  type ControllerDefinition,
  type FlagSpecs,
  Host,
  type HostSettings,
  type ReconcilerContext,
  UsageError,
  helpText,
  parseHostArgs,
} from "../host";
import { FencedError, type KubeClient } from "../kube";
import { resourceType } from "../mirror";
import { SecurityConfigError } from "../security";
import { ManagerSession } from "../session";
import { credentials } from "@grpc/grpc-js";
import { platformLabel, VERSION, versionLine } from "../version";
import { Arrivals } from "./arrivals";

const CONFIGMAPS = resourceType("", "v1", "configmaps");
const CM_PATH = "/api/v1/namespaces/default/configmaps/c";
const PLAINTEXT = { STEWARD_INSECURE_PLAINTEXT: "true" };

const FLAGS = {
  rule: { type: "string", multiple: true, metavar: "RULE", help: "a rule (repeatable)" },
  mode: { type: "string", default: "fast", help: "how" },
  target: { type: "string", help: "where" },
  dry: { type: "boolean", help: "change nothing" },
} as const satisfies FlagSpecs;

/** A definition that hands its reconciler context to `seen`. */
function definition(seen: ReconcilerContext[] = []): ControllerDefinition<typeof FLAGS> {
  return {
    name: "host-test",
    description: "Tests the host.",
    flags: FLAGS,
    setup(builder) {
      builder.for(CONFIGMAPS);
      return (ctx) => {
        seen.push(ctx);
        return { reconcile: () => Promise.resolve({}) };
      };
    },
  };
}

function parsed(argv: string[], env: NodeJS.ProcessEnv = PLAINTEXT) {
  const result = parseHostArgs(definition(), argv, env);
  assert.equal(result.help, false);
  if (result.help) throw new Error("unreachable");
  return result;
}

describe("host flags", () => {
  it("has working defaults and takes the security settings from the environment", () => {
    const { settings, flags } = parsed([], {
      STEWARD_TLS_CA_FILE: "/ca",
      STEWARD_TLS_CERT_FILE: "/cert",
      STEWARD_TLS_KEY_FILE: "/key",
    });
    const expected: HostSettings = {
      name: "host-test",
      informer: "127.0.0.1:50061",
      manager: undefined,
      standby: false,
      kubeconfig: undefined,
      namespace: undefined,
      workers: undefined,
      resyncPeriodMs: undefined,
      shutdownGraceMs: undefined,
      healthListen: undefined,
      metricsListen: undefined,
      kubeApiQps: 20,
      kubeApiBurst: 30,
      security: {
        caFile: "/ca",
        certFile: "/cert",
        keyFile: "/key",
        tokenFile: undefined,
        serverName: undefined,
        insecurePlaintext: false,
      },
    };
    assert.deepEqual(settings, expected);
    assert.deepEqual(flags, { rule: [], mode: "fast", target: undefined, dry: false });
  });

  it("parses every standard flag, the flags over the environment", () => {
    const { settings } = parsed(
      [
        "--name", "other", "--informer", "informer:1", "--manager", "manager:2", "--standby",
        "--kubeconfig", "/kc", "--namespace", "ns", "--workers", "4", "--resync-period", "2.5",
        "--shutdown-grace", "10", "--health-listen", "0.0.0.0:8081", "--metrics-listen", ":8080",
        "--tls-ca-file", "/a", "--tls-cert-file", "/b", "--tls-key-file", "/c", "--token-file", "/t",
        "--tls-server-name", "steward", "--kube-api-qps", "2.5", "--kube-api-burst", "4",
      ],
      { STEWARD_TLS_CA_FILE: "/env-ca", STEWARD_HEALTH_LISTEN: "127.0.0.1:1" },
    );
    assert.deepEqual(settings, {
      name: "other",
      informer: "informer:1",
      manager: "manager:2",
      standby: true,
      kubeconfig: "/kc",
      namespace: "ns",
      workers: 4,
      resyncPeriodMs: 2500,
      shutdownGraceMs: 10_000,
      healthListen: "0.0.0.0:8081",
      metricsListen: ":8080",
      kubeApiQps: 2.5,
      kubeApiBurst: 4,
      security: {
        caFile: "/a",
        certFile: "/b",
        keyFile: "/c",
        tokenFile: "/t",
        serverName: "steward",
        insecurePlaintext: false,
      },
    });
    assert.equal(parsed([], { STEWARD_HEALTH_LISTEN: "127.0.0.1:9" }).settings.healthListen, "127.0.0.1:9");
    assert.equal(parsed([], { STEWARD_METRICS_LISTEN: "127.0.0.1:7" }).settings.metricsListen, "127.0.0.1:7");
    assert.equal(parsed(["--insecure-plaintext"], {}).settings.security.insecurePlaintext, true);
  });

  it("takes a --kube-api-qps of 0 or less as no limit, whatever the burst", () => {
    for (const argv of [["--kube-api-qps", "0", "--kube-api-burst", "0"], ["--kube-api-qps=-1"]]) {
      const { settings } = parsed(argv);
      assert.ok(settings.kubeApiQps <= 0, argv.join(" "));
    }
  });

  it("parses the author's flags, typed", () => {
    const { flags } = parsed(["--rule", "a", "--rule", "b", "--mode", "slow", "--target", "x", "--dry"]);
    const rules: string[] = flags.rule;
    const mode: string = flags.mode;
    const target: string | undefined = flags.target;
    const dry: boolean = flags.dry;
    assert.deepEqual([rules, mode, target, dry], [["a", "b"], "slow", "x", true]);
  });

  it("refuses bad flags with a UsageError", () => {
    for (const argv of [
      ["--bogus"],
      ["positional"],
      ["--workers", "0"],
      ["--workers", "two"],
      ["--workers", "1.5"],
      ["--standby"],
      ["--health-listen", "nowhere"],
      ["--metrics-listen", "1.2.3.4"],
      ["--resync-period", "soon"],
      ["--shutdown-grace", "-1"],
      ["--name", ""],
      ["--informer"],
      ["--kube-api-qps", "fast"],
      ["--kube-api-qps", ""],
      ["--kube-api-qps", "Infinity"],
      ["--kube-api-qps", "NaN"],
      ["--kube-api-burst", "0"],
      ["--kube-api-burst", "1.5"],
      ["--kube-api-qps", "5", "--kube-api-burst=-1"],
    ]) {
      assert.throws(() => parseHostArgs(definition(), argv, PLAINTEXT), UsageError, argv.join(" "));
    }
  });

  it("--help asks for the help, which names every flag", () => {
    assert.deepEqual(parseHostArgs(definition(), ["--rule", "x", "-h"], {}), { help: true });
    const text = helpText(definition() as ControllerDefinition<FlagSpecs>, "host-test");
    assert.match(text, /^usage: host-test \[--rule RULE \.\.\.\] \[--mode VALUE\]/);
    assert.match(text, /Tests the host\./);
    for (const flag of [
      "--rule RULE", "--mode VALUE", "--dry", "--name NAME", "--informer HOST:PORT", "--manager HOST:PORT",
      "--standby", "--kubeconfig FILE", "--namespace NAMESPACE", "--workers N", "--resync-period SECONDS",
      "--shutdown-grace SECONDS", "--health-listen HOST:PORT", "--metrics-listen HOST:PORT",
      "--tls-ca-file FILE", "--tls-cert-file FILE", "--tls-key-file FILE", "--token-file FILE",
      "--tls-server-name NAME", "--insecure-plaintext", "-h, --help", "STEWARD_TLS_CA_FILE",
      "OTEL_EXPORTER_OTLP_ENDPOINT", "--kube-api-qps QPS", "--kube-api-burst N",
      "QPS to use while talking with kubernetes apiserver", "Burst to use while talking with kubernetes apiserver",
      "0 or less means no limit", "(default 20)", "(default 30)",
    ]) {
      assert.ok(text.includes(flag), `the help does not name ${flag}`);
    }
    assert.match(text, /\(default host-test\)/);
  });

  it("--version asks for the version, which names Steward's, node's and the platform", () => {
    assert.deepEqual(parseHostArgs(definition(), ["--version"], {}), { help: true, version: true });
    assert.equal(
      versionLine("host-test"),
      `host-test ${VERSION} (node ${process.version}, ${platformLabel()})`,
    );
    assert.match(platformLabel(), /^[a-z0-9]+\/[a-z0-9]+$/);
    assert.ok(helpText(definition() as ControllerDefinition<FlagSpecs>, "host-test").includes("--version"));
  });

  it("refuses an author's flag that is the host's", () => {
    const clash: ControllerDefinition = {
      ...(definition() as unknown as ControllerDefinition),
      flags: { workers: { type: "string", help: "mine" } },
    };
    assert.throws(() => parseHostArgs(clash, [], PLAINTEXT), /--workers .* is one of the host's/);
  });
});

describe("the host's API client", () => {
  const arrivals = new Arrivals();
  before(() => arrivals.start());
  after(() => arrivals.stop());

  function host(argv: string[]): { host: Host; api: KubeClient } {
    const seen: ReconcilerContext[] = [];
    const def = definition(seen);
    const args = parseHostArgs(def, ["--informer", "127.0.0.1:1", "--kubeconfig", arrivals.kubeconfig, ...argv], PLAINTEXT);
    if (args.help) throw new Error("unreachable");
    const made = Host.create(def, args, PLAINTEXT);
    assert.equal(seen.length, 1, "the reconciler factory was not called once");
    const api = seen[0]!.api;
    assert.equal(seen[0]!.mirror, made.controller.mirror);
    return { host: made, api };
  }

  it("under a manager, refuses every write while the lease is not held, and nothing is sent", async () => {
    arrivals.seen.length = 0;
    const { host: made, api } = host(["--manager", "127.0.0.1:1"]);
    try {
      assert.equal(api.fenced, true);
      // Before run() there is no session: no lease, no write.
      await assert.rejects(api.request("PATCH", CM_PATH, { data: {} }, "application/merge-patch+json"), FencedError);
      // The client cannot be unfenced: its fence is fixed, writeFence only adds to it.
      api.writeFence = () => true;
      await assert.rejects(api.request("POST", CM_PATH, {}), FencedError);
      api.writeFence = undefined;
      await assert.rejects(api.request("DELETE", CM_PATH), FencedError);
      assert.deepEqual(arrivals.seen, [], "a fenced write reached the API server");
      assert.equal(api.fencedWrites, 3);
      // Reads still go.
      await api.request("GET", CM_PATH);
      assert.deepEqual(arrivals.seen, [`GET ${CM_PATH}`]);

      // A session that is not active, then one past its renew deadline: refused.
      const session = new ManagerSession("127.0.0.1:1", { controller: "host-test" }, {}, credentials.createInsecure());
      made.controller.session = session;
      try {
        await assert.rejects(api.request("PUT", CM_PATH, {}), FencedError);
        session.active = true;
        await assert.rejects(api.request("PUT", CM_PATH, {}), FencedError);
        // Holding the lease: the write goes.
        (session as unknown as { deadline: number }).deadline = performance.now() + 60_000;
        await api.request("PUT", CM_PATH, {});
        assert.deepEqual(arrivals.seen, [`GET ${CM_PATH}`, `PUT ${CM_PATH}`]);
        // The lease lapses (a pause past the deadline): refused again.
        (session as unknown as { deadline: number }).deadline = performance.now() - 1;
        await assert.rejects(api.request("PATCH", CM_PATH, {}), FencedError);
      } finally {
        session.active = false;
        await session.close();
      }
    } finally {
      api.close();
    }
  });

  it("alone, every write goes", async () => {
    arrivals.seen.length = 0;
    const { api } = host([]);
    try {
      assert.equal(api.fenced, true);
      await api.request("PATCH", CM_PATH, { data: {} }, "application/merge-patch+json");
      assert.deepEqual(arrivals.seen, [`PATCH ${CM_PATH}`]);
    } finally {
      api.close();
    }
  });

  it("paces its requests with --kube-api-qps and --kube-api-burst, and reports the waits in /metrics", async () => {
    arrivals.seen.length = 0;
    const { host: made, api } = host([]);
    try {
      assert.equal(api.rateLimited, true, "no rate limit by default");
      await api.request("PATCH", CM_PATH, { data: {} }, "application/merge-patch+json");
      const host = new URL(arrivals.url).host;
      const labels = `verb="PATCH",host="${host}"`;
      const text = made.metrics();
      for (const line of [
        "# TYPE rest_client_rate_limiter_duration_seconds histogram",
        `rest_client_rate_limiter_duration_seconds_bucket{${labels},le="0.005"} 1`,
        `rest_client_rate_limiter_duration_seconds_bucket{${labels},le="+Inf"} 1`,
        `rest_client_rate_limiter_duration_seconds_count{${labels}} 1`,
      ]) {
        assert.ok(text.includes(line), `/metrics lacks ${line}:\n${text}`);
      }
    } finally {
      api.close();
    }
    const { host: unlimited, api: free } = host(["--kube-api-qps", "0"]);
    free.close();
    assert.equal(free.rateLimited, false, "--kube-api-qps 0: rate limited");
    assert.ok(!unlimited.metrics().includes("rest_client_rate_limiter_duration_seconds"));
  });

  it("passes the namespace, workers, resync period and grace to the controller", () => {
    const { host: made, api } = host(["--namespace", "ns1", "--workers", "3", "--resync-period", "60", "--shutdown-grace", "5"]);
    api.close();
    assert.equal(made.controller.status().workers, 3);
    const options = (made.controller as unknown as { options: Record<string, unknown> }).options;
    assert.equal(options["namespace"], "ns1");
    assert.equal(options["resyncPeriodMs"], 60_000);
    assert.equal(options["shutdownGraceMs"], 5_000);
  });

  it("refuses to start without security settings, without credentials, or with a bad author's flag", () => {
    const def = definition();
    const noTls = parseHostArgs(def, ["--kubeconfig", arrivals.kubeconfig], {});
    if (noTls.help) throw new Error("unreachable");
    assert.throws(() => Host.create(def, noTls, {}), SecurityConfigError);

    const noKubeconfig = parseHostArgs(def, ["--kubeconfig", join(arrivals.dir, "missing")], PLAINTEXT);
    if (noKubeconfig.help) throw new Error("unreachable");
    assert.throws(() => Host.create(def, noKubeconfig, PLAINTEXT), ConfigError);

    const picky: ControllerDefinition<typeof FLAGS> = {
      ...def,
      setup(_builder, flags) {
        if (flags.rule.length === 0) throw new UsageError("at least one --rule is needed");
        throw new Error("unreachable");
      },
    };
    const args = parseHostArgs(picky, [], PLAINTEXT);
    if (args.help) throw new Error("unreachable");
    assert.throws(() => Host.create(picky, args, PLAINTEXT), UsageError);
  });
});

function get(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      })
      .on("error", reject);
  });
}

describe("the host's health endpoints", () => {
  const arrivals = new Arrivals();
  before(() => arrivals.start());
  after(() => arrivals.stop());

  it("serve /healthz, /readyz (not ready before the caches sync) and /metrics, until the host stops", async () => {
    const def = definition();
    const args = parseHostArgs(
      def,
      [
        "--informer", "127.0.0.1:1", "--kubeconfig", arrivals.kubeconfig,
        "--health-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
      ],
      PLAINTEXT,
    );
    if (args.help) throw new Error("unreachable");
    const made = Host.create(def, args, PLAINTEXT);
    const stop = new AbortController();
    const running = made.run(stop.signal);
    try {
      await checkEndpoints(made);
    } finally {
      stop.abort();
      await running;
    }
    assert.equal(made.healthAddress, undefined);
    assert.equal(made.metricsAddress, undefined);
  });

  it("serve /metrics with the probes when both listen on the same address", async () => {
    const probe = http.createServer().listen(0, "127.0.0.1");
    await once(probe, "listening");
    const port = (probe.address() as AddressInfo).port;
    await new Promise((r) => probe.close(r));
    const def = definition();
    const address = `127.0.0.1:${port}`;
    const args = parseHostArgs(
      def,
      ["--informer", "127.0.0.1:1", "--kubeconfig", arrivals.kubeconfig, "--health-listen", address],
      { ...PLAINTEXT, STEWARD_METRICS_LISTEN: address },
    );
    if (args.help) throw new Error("unreachable");
    const made = Host.create(def, args, PLAINTEXT);
    const stop = new AbortController();
    const running = made.run(stop.signal);
    try {
      for (let i = 0; i < 100 && made.metricsAddress === undefined; i += 1) await new Promise((r) => setTimeout(r, 20));
      assert.equal(made.metricsAddress, address);
      assert.equal(made.healthAddress, address);
      assert.equal((await get(`http://${address}/healthz`)).status, 200);
      assert.match((await get(`http://${address}/metrics`)).body, /^workqueue_depth\{name="host-test"\} 0$/m);
    } finally {
      stop.abort();
      await running;
    }
  });
});

async function checkEndpoints(made: Host): Promise<void> {
  {
    let address: string | undefined;
    let metricsAddress: string | undefined;
    for (let i = 0; i < 100 && (address === undefined || metricsAddress === undefined); i += 1) {
      address = made.healthAddress;
      metricsAddress = made.metricsAddress;
      if (address === undefined || metricsAddress === undefined) await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(address !== undefined && metricsAddress !== undefined, "the health servers did not start");
    assert.notEqual(address, metricsAddress);
    const base = `http://${address}`;
    assert.deepEqual(await get(`${base}/healthz`), { status: 200, body: "ok\n" });
    // The informer at 127.0.0.1:1 never answers: the caches do not sync.
    assert.deepEqual(await get(`${base}/readyz`), { status: 503, body: "caches not synced\n" });
    assert.equal((await get(`${base}/metrics`)).status, 404);
    assert.equal((await get(`http://${metricsAddress}/healthz`)).status, 404);
    const metrics = await get(`http://${metricsAddress}/metrics`);
    assert.equal(metrics.status, 200);
    assert.match(metrics.body, /^controller_runtime_reconcile_total\{controller="host-test",result="success"\} 0$/m);
    assert.match(metrics.body, /^workqueue_depth\{name="host-test"\} 0$/m);
    assert.match(metrics.body, /^steward_mirror_synced\{controller="host-test"\} 0$/m);
    assert.match(metrics.body, /^steward_mirror_reconnects_total\{controller="host-test"\} \d+$/m);
    assert.match(
      metrics.body,
      new RegExp(
        `^steward_build_info\\{platform="${platformLabel()}",runtime="typescript",` +
          `runtime_version="${process.version.replaceAll(".", "\\.")}",version="${VERSION}"\\} 1$`,
        "m",
      ),
    );
    assert.equal((await get(`${base}/nothing`)).status, 404);
  }
}
