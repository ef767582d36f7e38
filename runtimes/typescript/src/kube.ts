/**
 * A small Kubernetes API client: reads a kubeconfig (client certificate or bearer token),
 * sends JSON requests over HTTPS, and traces each one.
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
import { SpanKind, SpanStatusCode, context as otelContext, propagation, trace } from "@opentelemetry/api";
import { parse as parseYaml } from "yaml";
import type { RateLimiterWaits, RequestRateLimiter } from "./flowcontrol";
import { TokenFile } from "./security";

/** Where and how to reach the API server. */
export interface ClusterAccess {
  /** e.g. https://127.0.0.1:6443 */
  server: string;
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  token?: string;
  /** A file holding the bearer token, read again when it changes (a projected token). */
  tokenFile?: string;
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
interface KubeconfigFile {
  "current-context"?: string;
  contexts?: Named<{ context: { cluster: string; user: string } }>[];
  clusters?: Named<{
    cluster: {
      server: string;
      "certificate-authority"?: string;
      "certificate-authority-data"?: string;
      "insecure-skip-tls-verify"?: boolean;
      "tls-server-name"?: string;
    };
  }>[];
  users?: Named<{
    user: {
      "client-certificate"?: string;
      "client-certificate-data"?: string;
      "client-key"?: string;
      "client-key-data"?: string;
      token?: string;
      tokenFile?: string;
    };
  }>[];
}

function dataOrFile(data: string | undefined, file: string | undefined): Buffer | undefined {
  if (data) return Buffer.from(data, "base64");
  if (file) return readFileSync(file);
  return undefined;
}

/**
 * Read a kubeconfig (`path`, else `$KUBECONFIG`, else `~/.kube/config`) and its current (or
 * the named) context. Throws with a message naming the file when something is missing.
 */
export function loadKubeconfig(path?: string, contextName?: string): ClusterAccess {
  const file = path || process.env["KUBECONFIG"]?.split(":")[0] || `${homedir()}/.kube/config`;
  const cfg = parseYaml(readFileSync(file, "utf8")) as KubeconfigFile;
  const name = contextName ?? cfg["current-context"];
  const ctx = cfg.contexts?.find((c) => c.name === name)?.context;
  if (ctx === undefined) throw new Error(`${file}: no context ${JSON.stringify(name)}`);
  const cluster = cfg.clusters?.find((c) => c.name === ctx.cluster)?.cluster;
  if (cluster === undefined) throw new Error(`${file}: no cluster ${JSON.stringify(ctx.cluster)}`);
  const user = cfg.users?.find((u) => u.name === ctx.user)?.user ?? {};
  const access: ClusterAccess = { server: cluster.server.replace(/\/+$/, "") };
  const ca = dataOrFile(cluster["certificate-authority-data"], cluster["certificate-authority"]);
  if (ca) access.ca = ca;
  const cert = dataOrFile(user["client-certificate-data"], user["client-certificate"]);
  if (cert) access.cert = cert;
  const key = dataOrFile(user["client-key-data"], user["client-key"]);
  if (key) access.key = key;
  const token = user.token ?? (user.tokenFile ? readFileSync(user.tokenFile, "utf8").trim() : undefined);
  if (token) access.token = token;
  if (cluster["insecure-skip-tls-verify"]) access.insecureSkipTlsVerify = true;
  if (cluster["tls-server-name"]) access.tlsServerName = cluster["tls-server-name"];
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
 * `kubeconfig` file when given, else `$KUBECONFIG`, else the pod's service account
 * ({@link inClusterAccess}) when running in a pod, else `~/.kube/config`.
 */
export function clusterAccess(kubeconfig?: string, env: NodeJS.ProcessEnv = process.env): ClusterAccess {
  if (kubeconfig) return loadKubeconfig(kubeconfig);
  if (env["KUBECONFIG"]) return loadKubeconfig(env["KUBECONFIG"].split(":")[0]);
  if (env["KUBERNETES_SERVICE_HOST"] && existsSync(`${SERVICE_ACCOUNT_DIR}/token`)) return inClusterAccess(env);
  return loadKubeconfig(`${homedir()}/.kube/config`);
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
  private readonly agent: https.Agent;
  readonly #fence: (() => boolean) | undefined;
  readonly #token: TokenFile | undefined;
  readonly #limiter: RequestRateLimiter | undefined;

  constructor(
    readonly access: ClusterAccess,
    readonly userAgent = "steward-typescript",
    clientOptions: KubeClientOptions = {},
  ) {
    this.#fence = clientOptions.fence;
    this.#limiter = clientOptions.rateLimiter;
    this.#token = access.tokenFile ? new TokenFile(access.tokenFile) : undefined;
    const options: https.AgentOptions = { keepAlive: true, maxSockets: 16 };
    if (access.ca) options.ca = access.ca;
    if (access.cert) options.cert = access.cert;
    if (access.key) options.key = access.key;
    if (access.insecureSkipTlsVerify) options.rejectUnauthorized = false;
    if (access.tlsServerName) options.servername = access.tlsServerName;
    this.agent = new https.Agent(options);
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
          if (this.#token !== undefined) headers["authorization"] = this.#token.header();
          else if (this.access.token) headers["authorization"] = `Bearer ${this.access.token}`;
          const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
          if (payload !== undefined) {
            headers["content-type"] = contentType;
            headers["content-length"] = String(payload.length);
          }
          if (method.toUpperCase() !== "GET" && !this.mayWrite()) {
            this.fencedWrites += 1;
            span.setStatus({ code: SpanStatusCode.ERROR, message: "fenced" });
            throw new FencedError(method, path.split("?")[0] ?? path);
          }
          const res = await this.send(method, path, headers, payload);
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
