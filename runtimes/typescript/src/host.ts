/**
 * The host of one controller: the process around it, as controller-runtime's Manager is.
 *
 * A controller author writes the reconciler and says what it watches; {@link run} does the
 * rest:
 *
 * ```ts
 * import { labelsChanged, resourceType, run } from "@steward-dev/runtime";
 *
 * const NAMESPACES = resourceType("", "v1", "namespaces");
 * run({
 *   name: "namespace-labeller",
 *   description: "Labels every namespace seen=yes.",
 *   setup(builder) {
 *     builder.for(NAMESPACES, labelsChanged);
 *     return ({ mirror, api }) => ({
 *       async reconcile(req) {
 *         if (mirror.get(NAMESPACES, "", req.name) === undefined) return {};
 *         await api.request("PATCH", `/api/v1/namespaces/${req.name}`,
 *           { metadata: { labels: { seen: "yes" } } }, "application/merge-patch+json");
 *         return {};
 *       },
 *     });
 *   },
 * });
 * ```
 *
 * # What the host does
 * - Parses the standard flags ({@link HOST_FLAGS}: `--informer`, `--manager`, `--standby`,
 *   `--kubeconfig`, `--namespace`, `--workers`, `--resync-period`, `--shutdown-grace`,
 *   `--health-listen`, `--metrics-listen`, `--kube-api-qps`, `--kube-api-burst`, the TLS and
 *   token flags, `--help`) and the author's own ({@link ControllerDefinition.flags}); a bad
 *   flag exits 2 with the help, `--help` prints it and exits 0.
 * - Dials the informer and the manager with mutual TLS (the flags, else the `STEWARD_TLS_*`
 *   variables; plaintext only when asked for), and exits 2 naming the settings otherwise.
 * - Finds the API server the way controller-runtime does ({@link clusterAccess}) and makes
 *   the one {@link KubeClient} it hands the reconciler, **fenced by construction**: under a
 *   manager every write asks "does this instance hold its lease now?" just before it is
 *   sent and is refused with {@link FencedError} otherwise (before the first START, while
 *   standing by, after a pause past the renew deadline, after shutdown). The fence is fixed
 *   when the client is made; the host offers no other client. Its requests are paced as
 *   kube-controller-manager's are, by a token bucket ({@link RequestRateLimiter}):
 *   `--kube-api-burst` at once, then `--kube-api-qps` a second.
 * - Sets up tracing from the `OTEL_*` variables ({@link configureTracing}, service name
 *   `steward-controller-<name>`).
 * - Runs the controller alone, or under the manager given by `--manager` (one
 *   {@link Controller.run}: the same sync, resync and graceful shutdown either way; under a
 *   manager it also stands by, catches up before its first reconcile, and deregisters).
 * - Serves `/healthz` and `/readyz` (ready once the caches have synced, not while shutting
 *   down) over HTTP with `--health-listen`, and Prometheus metrics on `/metrics` with
 *   `--metrics-listen`: the Python runtime's `workqueue_*` and `controller_runtime_*`
 *   families (controller-runtime's and client-go's names; see {@link Metrics}), then the
 *   host's `steward_*` and `rest_client_rate_limiter_duration_seconds`.
 * - On SIGTERM or SIGINT stops taking work, lets running reconciles finish, deregisters and
 *   exits 0; a second signal exits 1 at once. A registration the manager refuses exits 3,
 *   any other failure 1.
 *
 * {@link Host} is the same without the process: parse with {@link parseHostArgs}, make it
 * with {@link Host.create}, run it with a signal.
 */

import { basename } from "node:path";
import { parseArgs } from "node:util";
import { type Controller, ControllerBuilder, type ControllerOptions } from "./controller";
import { DEFAULT_KUBE_API_BURST, DEFAULT_KUBE_API_QPS, RequestRateLimiter } from "./flowcontrol";
import { HealthServer, splitAddress } from "./health";
import { KubeClient, clusterAccess } from "./kube";
import { log } from "./log";
import { familyHeader, histogramLines, sampleLine } from "./metrics";
import type { Mirror } from "./mirror";
import type { Reconciler } from "./reconcile";
import { type ClientSecurity, SecurityConfigError, channelCredentials, clientSecurityFromEnv } from "./security";
import { RegistrationRefusedError } from "./session";
import { configureTracing } from "./tracing";
import { platformLabel, RUNTIME, VERSION, versionLine } from "./version";

/** A flag was wrong: the host prints the message and the help, and exits 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** The API server's credentials cannot be found or read: the host exits 2. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

interface FlagBase {
  /** One line (or a few, separated by "\n") for `--help`. */
  help: string;
  /** A one-letter alias (`-x`). */
  short?: string;
}

/** `--flag VALUE`: the last one given wins. */
export interface StringFlag extends FlagBase {
  type: "string";
  multiple?: false;
  default?: string;
  /** The value's name in `--help` (default VALUE). */
  metavar?: string;
}

/** `--flag VALUE`, repeatable: every value, in order. */
export interface ListFlag extends FlagBase {
  type: "string";
  multiple: true;
  default?: readonly string[];
  /** The value's name in `--help` (default VALUE). */
  metavar?: string;
}

/** `--flag`: true when given. */
export interface BooleanFlag extends FlagBase {
  type: "boolean";
  default?: boolean;
}

/** One flag of the author's. */
export type FlagSpec = StringFlag | ListFlag | BooleanFlag;

/** The author's flags, by name (without the leading `--`). */
export type FlagSpecs = { readonly [name: string]: FlagSpec };

/** The value a flag parses to. */
export type FlagValue<S extends FlagSpec> = S extends BooleanFlag
  ? boolean
  : S extends ListFlag
    ? string[]
    : S extends { default: string }
      ? string
      : string | undefined;

/** The values of the author's flags, by name. */
export type FlagValues<F extends FlagSpecs> = { -readonly [K in keyof F]: FlagValue<F[K]> };

/** The standard flags, parsed. */
export interface HostSettings {
  /** The controller's name (`--name`, default the definition's). */
  name: string;
  /** The informer's host:port. */
  informer: string;
  /** The manager's host:port; undefined: the controller runs alone. */
  manager: string | undefined;
  /** Wait as a standby when another instance holds the name. */
  standby: boolean;
  /** The kubeconfig file; undefined: see {@link clusterAccess}. */
  kubeconfig: string | undefined;
  /** Watch only this namespace; undefined: all (or what the definition set). */
  namespace: string | undefined;
  /** Reconciles at once; undefined: the definition's, else 1. */
  workers: number | undefined;
  /** ms between enqueuing every primary object again; undefined: the definition's, else never. */
  resyncPeriodMs: number | undefined;
  /** ms running reconciles may finish on shutdown; undefined: the definition's, else 30 s. */
  shutdownGraceMs: number | undefined;
  /** host:port of `/healthz` and `/readyz`; undefined: not served. */
  healthListen: string | undefined;
  /** host:port of `/metrics`; undefined: not served. */
  metricsListen: string | undefined;
  /** Requests a second to the API server, on average (`--kube-api-qps`); 0 or less: no limit. */
  kubeApiQps: number;
  /** Requests to the API server at once before `kubeApiQps` paces them (`--kube-api-burst`). */
  kubeApiBurst: number;
  /** How the informer and the manager are dialed (flags over the `STEWARD_*` variables). */
  security: ClientSecurity;
}

/** What the reconciler factory is given. */
export interface ReconcilerContext {
  /** The controller's cache of the watched types. */
  readonly mirror: Mirror;
  /**
   * The API client, fenced: under a manager a write leaves only while this instance holds
   * its lease, else it is refused with `FencedError` (see the module docs).
   */
  readonly api: KubeClient;
  /** The standard flags. */
  readonly settings: HostSettings;
}

/** Makes the reconciler once the host has made the mirror and the API client. */
export type ReconcilerFactory = (context: ReconcilerContext) => Reconciler;

/** A controller for {@link run} / {@link Host}. */
export interface ControllerDefinition<F extends FlagSpecs = FlagSpecs> {
  /** The controller's name: registered with the manager, the default of `--name`. */
  name: string;
  /** What the controller does, for `--help` (paragraphs separated by blank lines). */
  description?: string;
  /** The author's flags (names must not be the host's, {@link HOST_FLAGS}). */
  flags?: F;
  /** Options beyond the flags: resync period, shutdown grace, label selector, workers. */
  options?: Omit<ControllerOptions, "credentials">;
  /**
   * Say what the controller watches on `builder` (`for`, `owns`, `watches`; do not call
   * `complete`) and return the reconciler factory. Called first, before anything is read or
   * dialed; throw {@link UsageError} for a bad value of the author's flags.
   */
  setup(builder: ControllerBuilder, flags: FlagValues<F>, settings: HostSettings): ReconcilerFactory;
}

/** The flags the host owns, with their help. */
export const HOST_FLAGS = {
  name: { type: "string", metavar: "NAME", help: "controller name registered with the manager (default %NAME%)" },
  informer: { type: "string", metavar: "HOST:PORT", help: "the Steward informer (default 127.0.0.1:50061)" },
  manager: {
    type: "string",
    metavar: "HOST:PORT",
    help: "the Steward manager; without it the controller runs alone",
  },
  standby: {
    type: "boolean",
    help: "wait as a standby if another instance holds the name\n(otherwise such a registration is refused)",
  },
  kubeconfig: {
    type: "string",
    metavar: "FILE",
    help: "API server credentials (default $KUBECONFIG; in a pod, its\nservice account; else ~/.kube/config)",
  },
  namespace: { type: "string", metavar: "NAMESPACE", help: "watch only this namespace (default all)" },
  workers: { type: "string", metavar: "N", help: "reconciles at once (default 1)" },
  "resync-period": {
    type: "string",
    metavar: "SECONDS",
    help: "enqueue every object of the primary type again this often,\nwhile active (default never)",
  },
  "shutdown-grace": {
    type: "string",
    metavar: "SECONDS",
    help: "how long running reconciles may finish on SIGTERM (default 30)",
  },
  "health-listen": {
    type: "string",
    metavar: "HOST:PORT",
    help: "serve /healthz and /readyz over HTTP there\n(default $STEWARD_HEALTH_LISTEN; none)",
  },
  "metrics-listen": {
    type: "string",
    metavar: "HOST:PORT",
    help: "serve Prometheus metrics on /metrics there\n(default $STEWARD_METRICS_LISTEN; none)",
  },
  "kube-api-qps": {
    type: "string",
    metavar: "QPS",
    help:
      "QPS to use while talking with kubernetes apiserver: requests\n" +
      "a second the API client sends on average, as the flag of\n" +
      "kube-controller-manager; 0 or less means no limit\n" +
      `(default ${DEFAULT_KUBE_API_QPS})`,
  },
  "kube-api-burst": {
    type: "string",
    metavar: "N",
    help:
      "Burst to use while talking with kubernetes apiserver: requests\n" +
      "sent at once before --kube-api-qps paces them; at least 1\n" +
      `when --kube-api-qps is above 0 (default ${DEFAULT_KUBE_API_BURST})`,
  },
  "tls-ca-file": { type: "string", metavar: "FILE", help: "CA of their certificates (default $STEWARD_TLS_CA_FILE)" },
  "tls-cert-file": { type: "string", metavar: "FILE", help: "client certificate (default $STEWARD_TLS_CERT_FILE)" },
  "tls-key-file": { type: "string", metavar: "FILE", help: "its key (default $STEWARD_TLS_KEY_FILE)" },
  "token-file": {
    type: "string",
    metavar: "FILE",
    help: "bearer token presented as this controller's identity, re-read\nwhen it changes (default $STEWARD_TOKEN_FILE)",
  },
  "tls-server-name": {
    type: "string",
    metavar: "NAME",
    help: "name their certificates carry, when not the dialed host\n(default $STEWARD_TLS_SERVER_NAME)",
  },
  "insecure-plaintext": {
    type: "boolean",
    help: "dial without TLS, development only\n(default $STEWARD_INSECURE_PLAINTEXT=true)",
  },
  help: { type: "boolean", short: "h", help: "this text" },
  version: { type: "boolean", help: "print the version and exit" },
} as const satisfies FlagSpecs;

/** The variable `--health-listen` defaults to. */
export const HEALTH_LISTEN_ENV = "STEWARD_HEALTH_LISTEN";
/** The variable `--metrics-listen` defaults to. */
export const METRICS_LISTEN_ENV = "STEWARD_METRICS_LISTEN";

const DEFAULT_INFORMER = "127.0.0.1:50061";
const SECURITY_FLAGS = ["tls-ca-file", "tls-cert-file", "tls-key-file", "token-file", "tls-server-name", "insecure-plaintext"];

function flagLines(specs: FlagSpecs, only: readonly string[], defaultName: string): string {
  const lines: string[] = [];
  for (const name of only) {
    const spec = specs[name];
    if (spec === undefined) continue;
    const metavar = spec.type === "string" ? ` ${spec.metavar ?? "VALUE"}` : "";
    const head = `  ${spec.short ? `-${spec.short}, ` : ""}--${name}${metavar}`;
    const [first = "", ...rest] = spec.help.replaceAll("%NAME%", defaultName).split("\n");
    if (head.length <= 25) {
      lines.push(`${head.padEnd(26)}${first}`);
    } else {
      lines.push(head, `${"".padEnd(26)}${first}`);
    }
    for (const more of rest) lines.push(`${"".padEnd(26)}${more}`);
  }
  return lines.join("\n");
}

/** The `--help` text of a controller hosted by {@link run}. */
export function helpText(definition: ControllerDefinition<FlagSpecs>, program = programName()): string {
  const own = definition.flags ?? {};
  const ownNames = Object.keys(own);
  const usage = ownNames
    .map((n) => {
      const spec = own[n]!;
      const metavar = spec.type === "string" ? ` ${spec.metavar ?? "VALUE"}` : "";
      return spec.type === "string" && spec.multiple ? `[--${n}${metavar} ...]` : `[--${n}${metavar}]`;
    })
    .join(" ");
  const host = HOST_FLAGS as FlagSpecs;
  const sections = [
    `usage: ${program} ${usage ? `${usage}\n       ` : ""}[--informer HOST:PORT] [--manager HOST:PORT [--standby]]\n` +
      `       [--kubeconfig FILE] [--name NAME] [--namespace NAMESPACE] [--workers N]\n` +
      `       [--resync-period SECONDS] [--shutdown-grace SECONDS]\n` +
      `       [--health-listen HOST:PORT] [--metrics-listen HOST:PORT]\n` +
      `       [--kube-api-qps QPS] [--kube-api-burst N]\n` +
      `       [--tls-ca-file FILE --tls-cert-file FILE --tls-key-file FILE]\n` +
      `       [--token-file FILE] [--tls-server-name NAME] [--insecure-plaintext]`,
  ];
  if (definition.description) sections.push(definition.description.trim());
  if (ownNames.length > 0) sections.push(flagLines(own, ownNames, definition.name));
  sections.push(
    "The controller:\n" +
      flagLines(
        host,
        ["name", "informer", "manager", "standby", "kubeconfig", "namespace", "workers", "resync-period",
          "shutdown-grace", "health-listen", "metrics-listen", "kube-api-qps", "kube-api-burst", "help",
          "version"],
        definition.name,
      ),
    "Security: the informer and the manager are dialed with mutual TLS.\n" +
      flagLines(host, SECURITY_FLAGS, definition.name) +
      "\nWithout the TLS files or plaintext it exits 2 at once, naming the variables.",
    "Writes to the API server leave only while this instance may reconcile: under a manager,\n" +
      "while it holds its lease; a write refused is not sent (FencedError) and is retried.\n" +
      "Requests to the API server are paced by a token bucket, as kube-controller-manager's\n" +
      "are: --kube-api-burst at once, then --kube-api-qps a second.\n\n" +
      "Tracing: spans go over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (service name\n" +
      `steward-controller-NAME). Logs go to stderr (STEWARD_LOG_LEVEL). SIGTERM or SIGINT lets\n` +
      "running reconciles finish, deregisters and exits 0. Exit status 2: a bad flag or\n" +
      "setting; 3: the manager refused the registration; 1: any other failure.",
  );
  return sections.join("\n\n");
}

function programName(): string {
  const script = process.argv[1];
  return script ? `node ${basename(script)}` : "controller";
}

/**
 * What {@link parseHostArgs} found: `--help` or `--version` (`help` true: print the help,
 * or with `version` the version, and exit 0), or the settings and the author's flags.
 */
export type ParsedArgs<F extends FlagSpecs> =
  | { help: true; version?: boolean }
  | { help: false; settings: HostSettings; flags: FlagValues<F> };

/**
 * Parse `argv` (without node and the script) into the standard settings and the author's
 * flags; `env` gives the defaults named in the help. Throws {@link UsageError}.
 */
export function parseHostArgs<const F extends FlagSpecs>(
  definition: ControllerDefinition<F>,
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): ParsedArgs<F> {
  const own: FlagSpecs = definition.flags ?? {};
  const options: Record<string, { type: "string" | "boolean"; multiple?: boolean; short?: string; default?: string | boolean | string[] }> = {};
  for (const [name, spec] of Object.entries(HOST_FLAGS as FlagSpecs)) {
    options[name] = { type: spec.type, ...(spec.short ? { short: spec.short } : {}) };
  }
  for (const [name, spec] of Object.entries(own)) {
    if (name in options) throw new Error(`flag --${name} of ${definition.name} is one of the host's`);
    const option: (typeof options)[string] = { type: spec.type };
    if (spec.short) option.short = spec.short;
    if (spec.type === "string" && spec.multiple) {
      option.multiple = true;
      option.default = [...(spec.default ?? [])];
    } else if (spec.default !== undefined) {
      option.default = spec.default;
    } else if (spec.type === "boolean") {
      option.default = false;
    }
    options[name] = option;
  }
  let values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  try {
    values = parseArgs({ args: [...argv], options, strict: true, allowPositionals: false }).values;
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  if (values["help"] === true) return { help: true };
  if (values["version"] === true) return { help: true, version: true };
  const str = (name: string): string | undefined => {
    const v = values[name];
    return typeof v === "string" ? v : undefined;
  };

  const name = str("name") ?? definition.name;
  if (name === "") throw new UsageError("--name must not be empty");
  let workers: number | undefined;
  const workersText = str("workers");
  if (workersText !== undefined) {
    workers = Number(workersText);
    if (!/^\d+$/.test(workersText) || workers < 1) {
      throw new UsageError(`--workers takes a whole number of at least 1, not ${JSON.stringify(workersText)}`);
    }
  }
  const seconds = (flag: string): number | undefined => {
    const text = str(flag);
    if (text === undefined) return undefined;
    const value = Number(text);
    if (text.trim() === "" || !Number.isFinite(value) || value < 0) {
      throw new UsageError(`--${flag} takes a number of seconds, not ${JSON.stringify(text)}`);
    }
    return Math.round(value * 1000);
  };
  const qpsText = str("kube-api-qps");
  let kubeApiQps = DEFAULT_KUBE_API_QPS;
  if (qpsText !== undefined) {
    kubeApiQps = Number(qpsText);
    if (qpsText.trim() === "" || !Number.isFinite(kubeApiQps)) {
      throw new UsageError(`--kube-api-qps takes a number, not ${JSON.stringify(qpsText)}`);
    }
  }
  const burstText = str("kube-api-burst");
  let kubeApiBurst = DEFAULT_KUBE_API_BURST;
  if (burstText !== undefined) {
    kubeApiBurst = Number(burstText);
    if (!/^[+-]?\d+$/.test(burstText)) {
      throw new UsageError(`--kube-api-burst takes a whole number, not ${JSON.stringify(burstText)}`);
    }
  }
  if (kubeApiQps > 0 && kubeApiBurst < 1) {
    throw new UsageError(`--kube-api-burst must be at least 1 when --kube-api-qps is above 0, not ${kubeApiBurst}`);
  }
  const resyncPeriodMs = seconds("resync-period");
  const shutdownGraceMs = seconds("shutdown-grace");
  const address = (flag: string, variable: string): string | undefined => {
    const value = str(flag) ?? (env[variable] || undefined);
    if (value !== undefined) {
      try {
        splitAddress(value);
      } catch (err) {
        throw new UsageError(`--${flag}: ${(err as Error).message}`);
      }
    }
    return value;
  };
  const healthListen = address("health-listen", HEALTH_LISTEN_ENV);
  const metricsListen = address("metrics-listen", METRICS_LISTEN_ENV);
  const manager = str("manager");
  const standby = values["standby"] === true;
  if (standby && manager === undefined) throw new UsageError("--standby needs --manager");
  const fromEnv = clientSecurityFromEnv(env);
  const plaintext = values["insecure-plaintext"];
  const security: ClientSecurity = {
    caFile: str("tls-ca-file") ?? fromEnv.caFile,
    certFile: str("tls-cert-file") ?? fromEnv.certFile,
    keyFile: str("tls-key-file") ?? fromEnv.keyFile,
    tokenFile: str("token-file") ?? fromEnv.tokenFile,
    serverName: str("tls-server-name") ?? fromEnv.serverName,
    insecurePlaintext: typeof plaintext === "boolean" ? plaintext : fromEnv.insecurePlaintext,
  };
  const settings: HostSettings = {
    name,
    informer: str("informer") ?? DEFAULT_INFORMER,
    manager,
    standby,
    kubeconfig: str("kubeconfig"),
    namespace: str("namespace"),
    workers,
    resyncPeriodMs,
    shutdownGraceMs,
    healthListen,
    metricsListen,
    kubeApiQps,
    kubeApiBurst,
    security,
  };
  const flags: Record<string, unknown> = {};
  for (const key of Object.keys(own)) flags[key] = values[key];
  return { help: false, settings, flags: flags as FlagValues<F> };
}

/** One hosted controller; see the module docs. Run it once. */
export class Host {
  /** The controller, wired (its mirror, session and worker pool). */
  readonly controller: Controller;
  readonly #api: KubeClient;
  #health: HealthServer | undefined;
  #metrics: HealthServer | undefined;
  #stopping = false;
  #failed: string | undefined;

  private constructor(
    readonly settings: HostSettings,
    controller: Controller,
    api: KubeClient,
  ) {
    this.controller = controller;
    this.#api = api;
  }

  /**
   * Make the host of `definition` with parsed arguments: runs the definition's `setup`,
   * makes the credentials, finds the API server and builds the controller. Nothing is
   * dialed yet. Throws {@link UsageError} (from `setup`), `SecurityConfigError` and
   * {@link ConfigError}.
   */
  static create<const F extends FlagSpecs>(
    definition: ControllerDefinition<F>,
    args: { settings: HostSettings; flags: FlagValues<F> },
    env: NodeJS.ProcessEnv = process.env,
  ): Host {
    const { settings, flags } = args;
    const builder = new ControllerBuilder(settings.name);
    const factory = definition.setup(builder, flags, settings);
    if (typeof factory !== "function") {
      throw new TypeError(`setup() of ${definition.name} must return a reconciler factory`);
    }
    if (builder.primaryType === undefined) {
      throw new TypeError(`setup() of ${definition.name} must call builder.for() or builder.forKind()`);
    }
    const credentials = channelCredentials(settings.security);
    let access;
    try {
      access = clusterAccess(settings.kubeconfig, env);
    } catch (err) {
      throw new ConfigError(`cannot find the API server's credentials: ${err instanceof Error ? err.message : String(err)}`);
    }
    // The fence is fixed here, before anyone has the client: alone, every write goes; under
    // a manager, only while the session holds the lease (never before it exists).
    let controller: Controller | undefined;
    const managed = settings.manager !== undefined;
    const api = new KubeClient(access, settings.name, {
      fence: () => controller !== undefined && (!managed || controller.session?.holdsLease() === true),
      ...(settings.kubeApiQps > 0 ? { rateLimiter: new RequestRateLimiter(settings.kubeApiQps, settings.kubeApiBurst) } : {}),
    });
    const options: ControllerOptions = { ...definition.options, ...builder.currentOptions, credentials };
    if (settings.namespace !== undefined) options.namespace = settings.namespace;
    if (settings.workers !== undefined) options.maxConcurrentReconciles = settings.workers;
    if (settings.resyncPeriodMs !== undefined) options.resyncPeriodMs = settings.resyncPeriodMs;
    if (settings.shutdownGraceMs !== undefined) options.shutdownGraceMs = settings.shutdownGraceMs;
    builder.withOptions(options);
    controller = builder.complete(settings.informer, (mirror) => factory({ mirror, api, settings }));
    return new Host(settings, controller, api);
  }

  /** host:port of `/healthz` and `/readyz` while they are served. */
  get healthAddress(): string | undefined {
    return this.#health?.address;
  }

  /** host:port of `/metrics` while it is served. */
  get metricsAddress(): string | undefined {
    return this.#metrics?.address ?? (this.#health?.servesMetrics ? this.#health.address : undefined);
  }

  /** Why the process is not ready (`/readyz` answers 503 with it), or undefined. */
  unready(): string | undefined {
    if (this.#stopping) return "shutting down";
    if (!this.controller.mirror.hasSynced()) return "caches not synced";
    return undefined;
  }

  /** Why the process is not alive any more (`/healthz` answers 503 with it), or undefined. */
  unhealthy(): string | undefined {
    return this.#failed;
  }

  /**
   * The process's metrics in Prometheus' text format: the runtime's (`workqueue_*` and
   * `controller_runtime_*`, from {@link Controller.metrics}), then the host's own
   * (`steward_*`, `rest_client_rate_limiter_duration_seconds`).
   */
  metrics(): string {
    const c = ["controller", this.controller.name];
    const session = this.controller.session;
    const lines = [
      ...familyHeader(
        "steward_controller_active",
        "gauge",
        "Whether this instance may reconcile (holds its lease, or runs alone).",
      ),
      sampleLine("steward_controller_active", this.controller.working && this.controller.mayReconcile() ? 1 : 0, c),
      ...familyHeader(
        "steward_fenced_writes_total",
        "counter",
        "Writes to the API server refused because this instance did not hold its lease.",
      ),
      sampleLine("steward_fenced_writes_total", this.#api.fencedWrites, c),
      ...familyHeader("steward_mirror_synced", "gauge", "1 once the mirror holds the informer's initial list of every watched type."),
      sampleLine("steward_mirror_synced", this.controller.mirror.hasSynced() ? 1 : 0, c),
      ...familyHeader("steward_mirror_reconnects_total", "counter", "Times the mirror's watch stream was opened again."),
      sampleLine("steward_mirror_reconnects_total", this.controller.mirror.reconnects, c),
      ...familyHeader(
        "steward_build_info",
        "gauge",
        "A metric with a constant '1' value labeled by the version of Steward, its runtime and the platform it runs on.",
      ),
      sampleLine("steward_build_info", 1, [
        "platform", platformLabel(), "runtime", RUNTIME, "runtime_version", process.version, "version", VERSION,
      ]),
    ];
    if (this.#api.rateLimited) {
      const name = "rest_client_rate_limiter_duration_seconds";
      lines.push(
        ...familyHeader(name, "histogram", "Client side rate limiter latency in seconds. Broken down by verb, and host."),
      );
      for (const w of this.#api.rateLimiterWaits()) {
        lines.push(...histogramLines(name, w.bounds, w.counts, w.sum, w.count, ["verb", w.verb, "host", w.host]));
      }
    }
    if (session !== undefined) {
      lines.push(
        ...familyHeader("steward_manager_epoch", "gauge", "The epoch of the last START from the manager."),
        sampleLine("steward_manager_epoch", Number(session.epoch), c),
      );
    }
    return `${this.controller.metrics.text()}${lines.join("\n")}\n`;
  }

  /**
   * Run until `signal` aborts (then stop gracefully and resolve), or until the controller
   * fails (reject: `RegistrationRefusedError`, `MirrorError`, ...). The API client is closed
   * at the end.
   */
  async run(signal: AbortSignal): Promise<void> {
    const s = this.settings;
    const onAbort = (): void => {
      this.#stopping = true;
    };
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      if (s.healthListen !== undefined) {
        const both = s.metricsListen === s.healthListen && splitAddress(s.healthListen)[1] !== 0;
        this.#health = await HealthServer.start(s.healthListen, {
          unhealthy: () => this.unhealthy(),
          unready: () => this.unready(),
          ...(both ? { metrics: () => this.metrics() } : {}),
        });
        log.info(`${s.name}: /healthz and /readyz${both ? " and /metrics" : ""} on http://${this.#health.address}`);
      }
      if (s.metricsListen !== undefined && this.#metrics === undefined && !this.#health?.servesMetrics) {
        this.#metrics = await HealthServer.start(s.metricsListen, { probes: false, metrics: () => this.metrics() });
        log.info(`${s.name}: /metrics on http://${this.#metrics.address}`);
      }
      log.info(
        `${s.name}: watching through ${s.informer}` +
          (s.manager === undefined ? ", running alone" : `, under the manager ${s.manager}${s.standby ? " (standby)" : ""}`),
      );
      await this.controller.run({
        signal,
        ...(s.manager !== undefined ? { manager: s.manager, session: { standby: s.standby } } : {}),
      });
    } catch (err) {
      this.#failed = err instanceof Error ? err.message : String(err);
      throw err;
    } finally {
      this.#stopping = true;
      signal.removeEventListener("abort", onAbort);
      this.#api.close();
      await this.#health?.close();
      this.#health = undefined;
      await this.#metrics?.close();
      this.#metrics = undefined;
    }
  }
}

/**
 * Host `definition` in this process with `argv`, and resolve with the exit status (see the
 * module docs); signals are handled while it runs. {@link run} calls it and exits.
 */
export async function runHost<const F extends FlagSpecs>(
  definition: ControllerDefinition<F>,
  argv: readonly string[] = process.argv.slice(2),
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const program = programName();
  const name = definition.name;
  const help = (): string => helpText(definition as ControllerDefinition<FlagSpecs>, program);
  let host: Host;
  try {
    const parsed = parseHostArgs(definition, argv, env);
    if (parsed.help) {
      process.stdout.write(`${parsed.version === true ? versionLine(program) : help()}\n`);
      return 0;
    }
    host = Host.create(definition, parsed, env);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${name}: ${err.message}\n\n${help()}\n`);
      return 2;
    }
    if (err instanceof SecurityConfigError || err instanceof ConfigError) {
      process.stderr.write(`${name}: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const shutdownTracing = configureTracing(`steward-controller-${host.settings.name}`);
  const stop = new AbortController();
  const onSignal = (sig: NodeJS.Signals): void => {
    if (stop.signal.aborted) {
      process.stderr.write(`${name}: ${sig} again: exiting without waiting\n`);
      process.exit(1);
    }
    log.info(`${host.settings.name}: ${sig}: finishing running reconciles`);
    stop.abort();
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  try {
    await host.run(stop.signal);
    return 0;
  } catch (err) {
    process.stderr.write(`${name}: ${err instanceof Error ? err.message : String(err)}\n`);
    return err instanceof RegistrationRefusedError ? 3 : 1;
  } finally {
    process.off("SIGTERM", onSignal);
    process.off("SIGINT", onSignal);
    await shutdownTracing().catch(() => undefined);
  }
}

/**
 * Host `definition` as this process (controller-runtime's `mgr.Start`): parse
 * `process.argv`, run until SIGTERM, exit with the status of {@link runHost}.
 */
export function run<const F extends FlagSpecs>(definition: ControllerDefinition<F>): void {
  runHost(definition).then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`${definition.name}: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}
