/**
 * A small Kubernetes API client: reads a kubeconfig (client certificate, bearer token, token
 * file or exec credential plugin), sends JSON requests over HTTPS, and traces each one.
 *
 * Credentials as client-go finds them: `$KUBECONFIG` may list several files, merged as
 * clientcmd merges them (k8s.io/client-go/tools/clientcmd/loader.go: the first file to set
 * `current-context` sets it, the first to define a cluster, user or context of a name defines
 * it; missing files are skipped; relative paths are relative to the file that holds them). A
 * token file (a kubeconfig's `tokenFile`, a pod's projected service account token) is read
 * again whenever it changes. An exec credential plugin (`users[].user.exec`, see
 * {@link ExecCredentials}) gives a token or a client certificate, kept until it expires. A 401
 * answer makes the credential stale: the plugin runs again, the token file is read again, and
 * the request is sent once more when that gave a different credential (kube-apiserver
 * authenticates before anything else, so the refused request did nothing).
 *
 * Every request is a CLIENT span (`<METHOD> <path>`) under the active span (the reconcile
 * span inside a reconcile) and carries its `traceparent`, which kube-apiserver continues
 * for callers it trusts. Non-2xx answers reject with {@link ApiStatusError}.
 *
 * A client can be fenced (the `fence` of {@link KubeClientOptions}, fixed for the client's
 * life, or {@link KubeClient.writeFence}; `Controller.fence` sets the latter to "this
 * instance holds its controller's lease"): every write (any method but GET) asks the fence
 * just before it is sent and, when the fence says no, rejects with {@link FencedError}
 * without sending anything. A process paused past its lease (SIGSTOP, a stopped VM) thus
 * sends no write after it resumes, not even one a reconcile already had under way, while a
 * standby has taken over.
 *
 * A client can be rate limited (the `rateLimiter` of {@link KubeClientOptions}, which the host
 * makes from `--kube-api-qps` and `--kube-api-burst`): every request first takes a token from
 * its bucket, waiting when there is none, as client-go's rest client does; the fence is asked
 * after that wait.
 */

import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import https from "node:https";
import { delimiter, dirname, isAbsolute, join, sep } from "node:path";
import { SpanKind, SpanStatusCode, context as otelContext, propagation, trace } from "@opentelemetry/api";
import { parse as parseYaml } from "yaml";
import type { RateLimiterWaits, RequestRateLimiter } from "./flowcontrol";
import { type Credential, type ExecCluster, type ExecConfig, ExecCredentials } from "./credentials";
import { TokenFile } from "./security";

/** Where and how to reach the API server. */
export interface ClusterAccess {
  /** e.g. https://127.0.0.1:6443 */
  server: string;
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  token?: string;
  /**
   * A file holding the bearer token, read again when it changes (a projected token); it wins
   * over `token`, which is used only while the file cannot be read.
   */
  tokenFile?: string;
  /** An exec credential plugin giving the token or client certificate; wins over the others. */
  exec?: ExecConfig;
  insecureSkipTlsVerify?: boolean;
  tlsServerName?: string;
}

/** The API server answered with a non-2xx status. */
export class ApiStatusError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
    readonly method: string,
    readonly path: string,
  ) {
    let reason = body;
    try {
      reason = String((JSON.parse(body) as { message?: unknown }).message ?? body);
    } catch {
      // not JSON: keep the body
    }
    super(`${method} ${path}: ${status} ${reason}`);
    this.name = "ApiStatusError";
  }
}

/**
 * A write refused before it was sent: this instance does not hold its controller's lease
 * (see {@link KubeClient.writeFence}). Retryable: the active instance will make the write.
 */
export class FencedError extends Error {
  constructor(
    readonly method: string,
    readonly path: string,
  ) {
    super(`${method} ${path} not sent: this instance does not hold its controller's lease (fenced)`);
    this.name = "FencedError";
  }
}

type Named<T> = { name: string } & T;
interface KubeconfigCluster {
  server: string;
  "certificate-authority"?: string;
  "certificate-authority-data"?: string;
  "insecure-skip-tls-verify"?: boolean;
  "tls-server-name"?: string;
  "proxy-url"?: string;
  "disable-compression"?: boolean;
  extensions?: Named<{ extension?: unknown }>[];
}
interface KubeconfigUser {
  "client-certificate"?: string;
  "client-certificate-data"?: string;
  "client-key"?: string;
  "client-key-data"?: string;
  token?: string;
  tokenFile?: string;
  exec?: ExecConfig;
}
interface KubeconfigContext {
  cluster: string;
  user: string;
}
interface KubeconfigFile {
  "current-context"?: string;
  contexts?: Named<{ context: KubeconfigContext }>[] | null;
  clusters?: Named<{ cluster: KubeconfigCluster }>[] | null;
  users?: Named<{ user: KubeconfigUser }>[] | null;
}

/** A kubeconfig entry with the file that defines it (its relative paths are relative to that file). */
interface FromFile<T> {
  value: T;
  file: string;
}

/** Several kubeconfig files merged as clientcmd merges `$KUBECONFIG`: the first to set a value wins. */
interface MergedKubeconfig {
  files: string[];
  currentContext: string | undefined;
  clusters: Map<string, FromFile<KubeconfigCluster>>;
  users: Map<string, FromFile<KubeconfigUser>>;
  contexts: Map<string, FromFile<KubeconfigContext>>;
}

function mergeKubeconfigs(files: string[], explicit: boolean): MergedKubeconfig {
  const merged: MergedKubeconfig = {
    files: [],
    currentContext: undefined,
    clusters: new Map(),
    users: new Map(),
    contexts: new Map(),
  };
  const firstWins = <T>(into: Map<string, FromFile<T>>, entries: [string, T][], file: string): void => {
    for (const [name, value] of entries) if (!into.has(name)) into.set(name, { value, file });
  };
  for (const file of new Set(files.filter((f) => f !== ""))) {
    if (!explicit && !existsSync(file)) continue;
    const cfg = (parseYaml(readFileSync(file, "utf8")) ?? {}) as KubeconfigFile;
    merged.files.push(file);
    merged.currentContext ||= cfg["current-context"] || undefined;
    firstWins(merged.clusters, (cfg.clusters ?? []).map((c) => [c.name, c.cluster]), file);
    firstWins(merged.users, (cfg.users ?? []).map((u) => [u.name, u.user ?? {}]), file);
    firstWins(merged.contexts, (cfg.contexts ?? []).map((c) => [c.name, c.context]), file);
  }
  if (merged.files.length === 0) throw new Error(`no kubeconfig: none of ${files.join(delimiter)} exists`);
  return merged;
}

function resolveIn(file: string, path: string): string {
  return isAbsolute(path) ? path : join(dirname(file), path);
}

function dataOrFile(data: string | undefined, path: string | undefined, from: string): Buffer | undefined {
  if (data) return Buffer.from(data, "base64");
  if (path) return readFileSync(resolveIn(from, path));
  return undefined;
}

/**
 * Read a kubeconfig and its current (or the named) context: the file `path` when given, else
 * the files `$KUBECONFIG` lists (merged as clientcmd merges them), else `~/.kube/config`.
 * Throws with a message naming the files when something is missing. A token file or an exec
 * plugin is not read here but by the {@link KubeClient}, at each request.
 */
export function loadKubeconfig(path?: string, contextName?: string, env: NodeJS.ProcessEnv = process.env): ClusterAccess {
  const list = env["KUBECONFIG"] ? env["KUBECONFIG"].split(delimiter) : [`${homedir()}/.kube/config`];
  const cfg = mergeKubeconfigs(path ? [path] : list, Boolean(path));
  const where = cfg.files.join(delimiter);
  const name = contextName ?? cfg.currentContext;
  const ctx = name === undefined ? undefined : cfg.contexts.get(name)?.value;
  if (ctx === undefined) throw new Error(`${where}: no context ${JSON.stringify(name)}`);
  const entry = cfg.clusters.get(ctx.cluster);
  if (entry === undefined) throw new Error(`${where}: no cluster ${JSON.stringify(ctx.cluster)}`);
  const cluster = entry.value;
  const access: ClusterAccess = { server: cluster.server.replace(/\/+$/, "") };
  const ca = dataOrFile(cluster["certificate-authority-data"], cluster["certificate-authority"], entry.file);
  if (ca) access.ca = ca;
  if (cluster["insecure-skip-tls-verify"]) access.insecureSkipTlsVerify = true;
  if (cluster["tls-server-name"]) access.tlsServerName = cluster["tls-server-name"];
  const userEntry = cfg.users.get(ctx.user);
  if (userEntry === undefined) return access;
  const user = userEntry.value;
  const from = userEntry.file;
  const cert = dataOrFile(user["client-certificate-data"], user["client-certificate"], from);
  if (cert) access.cert = cert;
  const key = dataOrFile(user["client-key-data"], user["client-key"], from);
  if (key) access.key = key;
  if (user.token) access.token = user.token;
  if (user.tokenFile) access.tokenFile = resolveIn(from, user.tokenFile);
  if (user.exec) {
    const exec: ExecConfig = { ...user.exec };
    if (exec.command.includes(sep)) exec.command = resolveIn(from, exec.command);
    if (exec.provideClusterInfo) {
      const info: ExecCluster = { server: cluster.server };
      if (cluster["tls-server-name"]) info["tls-server-name"] = cluster["tls-server-name"];
      if (cluster["insecure-skip-tls-verify"]) info["insecure-skip-tls-verify"] = true;
      if (ca) info["certificate-authority-data"] = ca.toString("base64");
      if (cluster["proxy-url"]) info["proxy-url"] = cluster["proxy-url"];
      if (cluster["disable-compression"]) info["disable-compression"] = true;
      const ext = cluster.extensions?.find((e) => e.name === "client.authentication.k8s.io/exec");
      if (ext !== undefined) info.config = ext.extension;
      exec.cluster = info;
    }
    access.exec = exec;
  }
  return access;
}

/** Where a pod finds its service account's credentials. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/**
 * The API server as a pod sees it: `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`,
 * the service account's CA and its token (a file the kubelet rotates; read again when it
 * changes). Throws when not in a pod.
 */
export function inClusterAccess(env: NodeJS.ProcessEnv = process.env, dir = SERVICE_ACCOUNT_DIR): ClusterAccess {
  const host = env["KUBERNETES_SERVICE_HOST"];
  const port = env["KUBERNETES_SERVICE_PORT"] || "443";
  const tokenFile = `${dir}/token`;
  if (!host || !existsSync(tokenFile)) {
    throw new Error(`not in a pod: KUBERNETES_SERVICE_HOST or ${tokenFile} is missing`);
  }
  return {
    server: `https://${host.includes(":") ? `[${host}]` : host}:${port}`,
    ca: readFileSync(`${dir}/ca.crt`),
    tokenFile,
  };
}

/**
 * The API server's address and credentials the way controller-runtime finds them: the
 * `kubeconfig` file when given, else the files `$KUBECONFIG` lists, else the pod's service account
 * ({@link inClusterAccess}) when running in a pod, else `~/.kube/config`.
 */
export function clusterAccess(kubeconfig?: string, env: NodeJS.ProcessEnv = process.env): ClusterAccess {
  if (kubeconfig) return loadKubeconfig(kubeconfig, undefined, env);
  if (env["KUBECONFIG"]) return loadKubeconfig(undefined, undefined, env);
  if (env["KUBERNETES_SERVICE_HOST"] && existsSync(`${SERVICE_ACCOUNT_DIR}/token`)) return inClusterAccess(env);
  return loadKubeconfig(`${homedir()}/.kube/config`, undefined, env);
}

/** How a {@link KubeClient} behaves beyond its credentials. */
export interface KubeClientOptions {
  /**
   * Asked just before every write (any method but GET) is sent; false refuses it with
   * {@link FencedError}. Fixed for the client's life: unlike {@link KubeClient.writeFence}
   * it cannot be replaced or removed, so a client made with one stays fenced.
   */
  fence?: () => boolean;
  /**
   * The token bucket every request waits on before it is sent (client-go's client-side rate
   * limit); none: no limit.
   */
  rateLimiter?: RequestRateLimiter;
}

/** A JSON answer of the API server. */
export interface ApiResponse {
  status: number;
  body: unknown;
}

/** Sends requests to the API server with one keep-alive agent. */
export class KubeClient {
  /**
   * When set, every write (any method but GET) first asks it, just before the request is
   * sent, and rejects with {@link FencedError} without sending anything when it answers
   * false: a controller instance sets it to "I hold the lease" (`Controller.fence`), so a
   * process that was paused past its renew deadline never writes after it resumes, not even
   * a write that was already under way.
   */
  writeFence: (() => boolean) | undefined;
  /** Writes refused by a fence (the fixed one or {@link writeFence}). */
  fencedWrites = 0;
  private agent: https.Agent;
  readonly #agentOptions: https.AgentOptions;
  /** The client certificate of {@link agent}'s connections, when an exec plugin gave it. */
  #agentCert: Buffer | undefined;
  readonly #fence: (() => boolean) | undefined;
  readonly #token: TokenFile | undefined;
  readonly #exec: ExecCredentials | undefined;
  readonly #limiter: RequestRateLimiter | undefined;

  constructor(
    readonly access: ClusterAccess,
    readonly userAgent = "steward-typescript",
    clientOptions: KubeClientOptions = {},
  ) {
    this.#fence = clientOptions.fence;
    this.#limiter = clientOptions.rateLimiter;
    this.#token = access.tokenFile ? new TokenFile(access.tokenFile) : undefined;
    this.#exec = access.exec ? new ExecCredentials(access.exec) : undefined;
    const options: https.AgentOptions = { keepAlive: true, maxSockets: 16 };
    if (access.ca) options.ca = access.ca;
    if (access.cert) options.cert = access.cert;
    if (access.key) options.key = access.key;
    if (access.insecureSkipTlsVerify) options.rejectUnauthorized = false;
    if (access.tlsServerName) options.servername = access.tlsServerName;
    this.#agentOptions = options;
    this.agent = new https.Agent(options);
  }

  /**
   * The credential to send now: the exec plugin's, else the token file's, else the static
   * token (a client certificate of the kubeconfig is the agent's).
   */
  async #credential(): Promise<Credential> {
    if (this.#exec !== undefined) return this.#exec.get();
    if (this.#token !== undefined) {
      try {
        return { token: this.#token.header().slice("Bearer ".length) };
      } catch (err) {
        // As client-go: the kubeconfig's token, when it has one, while the file cannot be read.
        if (!this.access.token) throw err;
      }
    }
    return this.access.token ? { token: this.access.token } : {};
  }

  /** After a 401 with `used`: a different credential to send the request once more with, if any. */
  async #refused(used: Credential): Promise<Credential | undefined> {
    if (this.#exec !== undefined) return this.#exec.refused(used);
    if (this.#token !== undefined) {
      const token = this.#token.header().slice("Bearer ".length);
      return token !== used.token ? { token } : undefined;
    }
    return undefined;
  }

  /**
   * Put `cred` on the request: its token in `headers`, its client certificate (an exec
   * plugin's) on the agent. A new certificate needs new connections (an open one keeps the
   * certificate of its handshake): a new agent, the old one closing its sockets as they free up.
   */
  #authenticate(cred: Credential, headers: Record<string, string>): void {
    if (cred.token) headers["authorization"] = `Bearer ${cred.token}`;
    else delete headers["authorization"];
    if (cred.cert !== undefined && cred.key !== undefined && cred.cert !== this.#agentCert) {
      const old = this.agent;
      this.agent = new https.Agent({ ...this.#agentOptions, cert: cred.cert, key: cred.key });
      this.#agentCert = cred.cert;
      old.maxFreeSockets = 0; // its busy sockets close when they free up
      for (const sockets of Object.values(old.freeSockets)) for (const socket of sockets ?? []) socket.destroy();
    }
  }

  /**
   * Send `method path` with `body` as JSON (or `contentType`, e.g.
   * `application/merge-patch+json`) inside a CLIENT span; resolves with the parsed answer,
   * rejects with {@link ApiStatusError} for a non-2xx status, and with {@link FencedError}
   * (nothing sent) for a write a fence refuses. With a rate limiter it first waits for a
   * token (outside the span: the span is the exchange with the API server).
   */
  /** OpenTelemetry's HTTP client attributes of a request (`url.full` without the query). */
  #spanAttributes(method: string, path: string): Record<string, string | number> {
    const server = this.access.server.replace(/\/+$/, "");
    const full = server + (path.split("?")[0] ?? path);
    if (!URL.canParse(server)) return { "http.request.method": method, "url.full": full };
    const url = new URL(server);
    const port = url.port !== "" ? Number(url.port) : url.protocol === "https:" ? 443 : 80;
    return { "http.request.method": method, "url.full": full, "server.address": url.hostname, "server.port": port };
  }

  async request(method: string, path: string, body?: unknown, contentType = "application/json"): Promise<ApiResponse> {
    if (this.#limiter !== undefined) await this.#limiter.wait(method.toUpperCase());
    const tracer = trace.getTracer("steward.kube");
    return tracer.startActiveSpan(
      `${method} ${path.split("?")[0]}`,
      { kind: SpanKind.CLIENT, attributes: this.#spanAttributes(method, path) },
      async (span) => {
        try {
          const headers: Record<string, string> = {
            accept: "application/json",
            "user-agent": this.userAgent,
          };
          propagation.inject(otelContext.active(), headers);
          let cred = await this.#credential();
          const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
          if (payload !== undefined) {
            headers["content-type"] = contentType;
            headers["content-length"] = String(payload.length);
          }
          let res: { status: number; text: string };
          for (let attempt = 0; ; attempt++) {
            if (method.toUpperCase() !== "GET" && !this.mayWrite()) {
              this.fencedWrites += 1;
              span.setStatus({ code: SpanStatusCode.ERROR, message: "fenced" });
              throw new FencedError(method, path.split("?")[0] ?? path);
            }
            this.#authenticate(cred, headers);
            res = await this.send(method, path, headers, payload);
            if (res.status !== 401 || attempt > 0) break;
            const fresh = await this.#refused(cred);
            if (fresh === undefined) break;
            cred = fresh;
          }
          span.setAttribute("http.response.status_code", res.status);
          if (res.status < 200 || res.status >= 300) {
            span.setStatus({ code: SpanStatusCode.ERROR, message: String(res.status) });
            throw new ApiStatusError(res.status, res.text, method, path);
          }
          return { status: res.status, body: res.text ? (JSON.parse(res.text) as unknown) : undefined };
        } finally {
          span.end();
        }
      },
    );
  }

  /** True when both fences (the fixed one and {@link writeFence}, where set) let a write go now. */
  mayWrite(): boolean {
    const fixed = this.#fence;
    const settable = this.writeFence;
    return (fixed === undefined || fixed()) && (settable === undefined || settable());
  }

  /** True when the client's requests wait on a rate limiter ({@link KubeClientOptions.rateLimiter}). */
  get rateLimited(): boolean {
    return this.#limiter !== undefined;
  }

  /**
   * How long the client's requests waited for its rate limiter, by verb, with the API
   * server's host:port; none without a limiter.
   */
  rateLimiterWaits(): (RateLimiterWaits & { host: string })[] {
    if (this.#limiter === undefined) return [];
    const host = URL.canParse(this.access.server) ? new URL(this.access.server).host : this.access.server;
    return this.#limiter.waits().map((w) => ({ ...w, host }));
  }

  /** True when the client was made with a fixed fence ({@link KubeClientOptions.fence}). */
  get fenced(): boolean {
    return this.#fence !== undefined;
  }

  private send(
    method: string,
    path: string,
    headers: Record<string, string>,
    payload: Buffer | undefined,
  ): Promise<{ status: number; text: string }> {
    const url = new URL(this.access.server + path);
    return new Promise((resolve, reject) => {
      const req = https.request(url, { method, headers, agent: this.agent, timeout: 30_000 }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }));
        res.on("error", reject);
      });
      req.on("timeout", () => req.destroy(new Error(`${method} ${path}: timed out`)));
      req.on("error", reject);
      if (payload !== undefined) req.write(payload);
      req.end();
    });
  }

  /** Close idle connections. */
  close(): void {
    this.agent.destroy();
  }
}
