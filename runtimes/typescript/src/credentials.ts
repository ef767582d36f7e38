/**
 * Exec credential plugins, as client-go runs them (k8s.io/client-go/plugin/pkg/client/auth/exec/exec.go):
 * a kubeconfig user's `exec` names a command that prints an `ExecCredential`
 * (`client.authentication.k8s.io/v1` or `v1beta1`) with a bearer token or a client certificate
 * and key in its `status`. The command runs with its `args`, this process's environment plus its
 * `env`, and `KUBERNETES_EXEC_INFO` (an `ExecCredential` whose `spec` says whether it may
 * prompt, never here, and the cluster when `provideClusterInfo` is set). The credential is kept
 * until its `expirationTimestamp` (without one, until the API server refuses it with a 401);
 * then the command runs again. One run at a time: concurrent requests wait for the same run.
 */

import { execFile } from "node:child_process";

/** The ExecCredential versions a plugin may speak (client-go dropped v1alpha1). */
export const EXEC_API_VERSIONS = ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"];

/** `spec.cluster` of the ExecCredential a plugin is given (with `provideClusterInfo`). */
export interface ExecCluster {
  server: string;
  "tls-server-name"?: string;
  "insecure-skip-tls-verify"?: boolean;
  /** The CA bundle, base64 (as in a kubeconfig). */
  "certificate-authority-data"?: string;
  "proxy-url"?: string;
  "disable-compression"?: boolean;
  /** The cluster's `client.authentication.k8s.io/exec` extension. */
  config?: unknown;
}

/** A kubeconfig user's `exec` (users[].user.exec). */
export interface ExecConfig {
  /** A path with a separator is relative to the kubeconfig's directory; a bare name is looked up in PATH. */
  command: string;
  args?: string[];
  env?: { name: string; value: string }[];
  apiVersion: string;
  installHint?: string;
  provideClusterInfo?: boolean;
  /** Never, IfAvailable or Always. This process has no terminal for the plugin: Always is refused. */
  interactiveMode?: string;
  /** What `KUBERNETES_EXEC_INFO` carries as `spec.cluster` when `provideClusterInfo` is set. */
  cluster?: ExecCluster;
}

/** What one request authenticates with. */
export interface Credential {
  token?: string;
  cert?: Buffer;
  key?: Buffer;
}

/** An exec credential plugin that failed or printed no usable credential; the message names the command. */
export class ExecCredentialError extends Error {
  constructor(
    readonly command: string,
    reason: string,
  ) {
    super(`exec credential plugin ${command}: ${reason}`);
    this.name = "ExecCredentialError";
  }
}

interface ExecOutput {
  apiVersion?: unknown;
  status?: {
    token?: unknown;
    clientCertificateData?: unknown;
    clientKeyData?: unknown;
    expirationTimestamp?: unknown;
  };
}

/** Runs an exec credential plugin and keeps its credential until it expires or is refused. */
export class ExecCredentials {
  #current: Credential | undefined;
  #expiry: number | undefined; // ms since the epoch; undefined: until a 401
  #running: Promise<Credential> | undefined;

  constructor(
    readonly config: ExecConfig,
    private readonly now: () => number = Date.now,
  ) {}

  /** The current credential, running the plugin when there is none or it expired. */
  async get(): Promise<Credential> {
    const current = this.#current;
    if (current !== undefined && (this.#expiry === undefined || this.now() < this.#expiry)) return current;
    return this.#run();
  }

  /**
   * The API server refused `used` (401): unless another request already replaced it, run the
   * plugin again. Resolves with the credential to send the request with once more, or
   * undefined when there is no other.
   */
  async refused(used: Credential): Promise<Credential | undefined> {
    if (this.#running !== undefined) return this.#running.catch(() => undefined);
    if (this.#current !== used) return this.#current;
    this.#current = undefined;
    try {
      return await this.#run();
    } catch {
      return undefined;
    }
  }

  #run(): Promise<Credential> {
    if (this.#running === undefined) {
      this.#running = this.#exec().finally(() => {
        this.#running = undefined;
      });
    }
    return this.#running;
  }

  async #exec(): Promise<Credential> {
    const cfg = this.config;
    const fail = (reason: string): ExecCredentialError => new ExecCredentialError(cfg.command, reason);
    if (!EXEC_API_VERSIONS.includes(cfg.apiVersion)) {
      throw fail(`apiVersion ${JSON.stringify(cfg.apiVersion)} is not supported (want ${EXEC_API_VERSIONS.join(" or ")})`);
    }
    if (cfg.interactiveMode === "Always") {
      throw fail("interactiveMode Always needs a terminal, and this process runs without one");
    }
    const spec: { interactive: boolean; cluster?: ExecCluster } = { interactive: false };
    if (cfg.provideClusterInfo && cfg.cluster !== undefined) spec.cluster = cfg.cluster;
    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const e of cfg.env ?? []) env[e.name] = e.value;
    env["KUBERNETES_EXEC_INFO"] = JSON.stringify({ apiVersion: cfg.apiVersion, kind: "ExecCredential", spec });
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(cfg.command, cfg.args ?? [], { env, maxBuffer: 16 << 20 }, (err, out, errOut) => {
        if (err === null) {
          resolve(out);
          return;
        }
        const code = (err as NodeJS.ErrnoException).code;
        let reason = err.message.split("\n")[0] ?? String(err);
        if (code === "ENOENT" || code === "EACCES") {
          reason = `cannot run it (${String(code)})${cfg.installHint ? `\n${cfg.installHint}` : ""}`;
        } else if (errOut.trim() !== "") {
          reason = `exit ${String(err.code ?? err.signal)}: ${errOut.trim()}`;
        }
        reject(fail(reason));
      });
    });
    let out: ExecOutput;
    try {
      out = JSON.parse(stdout) as ExecOutput;
    } catch (err) {
      throw fail(`its output is not an ExecCredential: ${(err as Error).message}`);
    }
    if (typeof out !== "object" || out === null) throw fail("its output is not an ExecCredential");
    if (out.apiVersion !== cfg.apiVersion) {
      throw fail(`configured for ${cfg.apiVersion}, it printed apiVersion ${JSON.stringify(out.apiVersion)}`);
    }
    const st = out.status;
    if (st === undefined || st === null) throw fail("it printed no status");
    const str = (v: unknown): string => (typeof v === "string" ? v : "");
    const token = str(st.token);
    const cert = str(st.clientCertificateData);
    const key = str(st.clientKeyData);
    if ((cert === "") !== (key === "")) {
      throw fail("it printed a client certificate without its key, or a key without its certificate");
    }
    if (token === "" && cert === "") throw fail("it printed neither a token nor a client certificate and key");
    const cred: Credential = {};
    if (token !== "") cred.token = token;
    if (cert !== "") {
      cred.cert = Buffer.from(cert);
      cred.key = Buffer.from(key);
    }
    let expiry: number | undefined;
    if (typeof st.expirationTimestamp === "string" && st.expirationTimestamp !== "") {
      expiry = Date.parse(st.expirationTimestamp);
      if (Number.isNaN(expiry)) throw fail(`expirationTimestamp ${JSON.stringify(st.expirationTimestamp)} is not a time`);
    }
    this.#current = cred;
    this.#expiry = expiry;
    return cred;
  }
}
