/**
 * The TypeScript runtime's driver for the runtime conformance kit (conformance/README.md).
 *
 * `node dist/conformance/driver.js --informer HOST:PORT [--workers N]` runs a controller
 * named `conformance` on the runtime's normal building blocks (watch → mirror → work
 * queue → workers; no manager) over ConfigMaps in all namespaces, and prints one JSON line
 * per reconcile on stdout, plus `{"synced": true}` once the mirror has synced. Logs go to
 * stderr. SIGTERM stops taking work, lets running reconciles finish, and exits 0; a watch the
 * informer refuses for good exits 1 with the informer's message on stderr.
 */

import { parseArgs } from "node:util";
import { ControllerBuilder } from "../controller";
import { log } from "../log";
import { MirrorError, resourceType, sleep } from "../mirror";
import { type ReconcileInfo, type Request, type Result, requestKey } from "../reconcile";
import { channelCredentials } from "../security";

const SLEEP_ANNOTATION = "conformance.steward.dev/sleep-ms";
const FAIL_ANNOTATION = "conformance.steward.dev/fail-times";
const CONFIGMAPS = resourceType("", "v1", "configmaps");

const USAGE = `usage: node dist/conformance/driver.js --informer HOST:PORT [--workers N]

Runs the conformance controller against the informer at HOST:PORT (plaintext gRPC) with
N workers (default 2) and reports every reconcile as a JSON line on stdout.`;

// Wall-clock Unix time in nanoseconds: Date.now() anchors the monotonic high-resolution clock.
const WALL_BASE = BigInt(Date.now()) * 1_000_000n - process.hrtime.bigint();
function wallNs(): bigint {
  return WALL_BASE + process.hrtime.bigint();
}

function emit(line: string): void {
  process.stdout.write(`${line}\n`);
}

async function main(argv: string[]): Promise<number> {
  let args;
  try {
    args = parseArgs({
      args: argv,
      options: {
        informer: { type: "string" },
        workers: { type: "string", default: "2" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }).values;
  } catch (err) {
    process.stderr.write(`${String(err)}\n${USAGE}\n`);
    return 2;
  }
  if (args.help) {
    process.stderr.write(`${USAGE}\n`);
    return 0;
  }
  const workers = Number(args.workers);
  if (!args.informer || !Number.isInteger(workers) || workers < 1) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }

  const controller = new ControllerBuilder("conformance")
    .for(CONFIGMAPS)
    // The conformance kit's fake informer serves plaintext on loopback: say so explicitly
    // rather than take the STEWARD_* environment.
    .withOptions({ maxConcurrentReconciles: workers, credentials: channelCredentials({ insecurePlaintext: true }) })
    .complete(args.informer, (mirror) => ({
      async reconcile(request: Request, info: ReconcileInfo): Promise<Result> {
        const startNs = wallNs();
        const obj = mirror.get(CONFIGMAPS, request.namespace, request.name);
        const annotations = ((obj?.object["metadata"] as { annotations?: Record<string, string> } | undefined)
          ?.annotations ?? {}) as Record<string, string>;
        const sleepMs = Number(annotations[SLEEP_ANNOTATION] ?? "0");
        if (sleepMs > 0) await sleep(sleepMs);
        const failTimes = Number(annotations[FAIL_ANNOTATION] ?? "0");
        const failed = info.attempt < failTimes;
        const endNs = wallNs();
        const [first, ...rest] = info.contexts;
        emit(
          `{"key": ${JSON.stringify(requestKey(request))}, "exists": ${obj !== undefined}, ` +
            `"resourceVersion": ${JSON.stringify(obj?.resourceVersion ?? "")}, "attempt": ${info.attempt}, ` +
            `"startNs": ${startNs}, "endNs": ${endNs}, ` +
            `"parent": ${JSON.stringify(first?.traceparent ?? "")}, ` +
            `"links": ${JSON.stringify(rest.map((c) => c.traceparent))}, ` +
            `"result": ${failed ? '"error"' : '"ok"'}}`,
        );
        if (failed) throw new Error(`failing on purpose (attempt ${info.attempt} of ${failTimes})`);
        return {};
      },
    }));

  const stop = new AbortController();
  process.on("SIGTERM", () => {
    log.info("SIGTERM: finishing running reconciles");
    stop.abort();
  });
  process.on("SIGINT", () => stop.abort());
  void controller.mirror.waitSynced().then(() => emit('{"synced": true}'));
  try {
    await controller.run({ signal: stop.signal });
  } catch (err) {
    if (err instanceof MirrorError) {
      process.stderr.write(`${err.message}\n`);
      return 1;
    }
    process.stderr.write(`conformance driver failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    return 1;
  }
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`${String(err)}\n`);
    process.exit(1);
  },
);
