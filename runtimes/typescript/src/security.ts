/**
 * Client security: how a controller dials Steward's informer and manager.
 *
 * Both serve mutual TLS only: the client checks the server's certificate against a CA and
 * presents its own certificate, whose subject (common name = user, organizations = groups)
 * is its identity unless it also sends a bearer token, which the server verifies with a
 * TokenReview. Plaintext is for development servers only and must be asked for
 * explicitly. The settings and their environment variables are the Python runtime's
 * (`steward.security.ClientSecurity`); see the README, section Security.
 *
 * # Files
 * The CA, certificate and key are read when the credentials are made (at start), where a
 * file that cannot be used fails at once. Before every new connection (a new channel, or a
 * channel reconnecting) the three files are checked again: when the modification time,
 * size or inode of one has changed (cert-manager rewriting the mounted Secret), they are
 * read again and that connection, and those after it, present the new certificate and
 * trust the new CA; no restart is needed. Connections already open keep theirs (grpc-js
 * may give a new channel with the same credentials and address an open connection). When the
 * files are momentarily inconsistent (a certificate written before its key) or unusable,
 * the last good set is kept and a warning is logged once, until they change again. The
 * token file is read again whenever its modification time or size changes (the kubelet
 * rotates projected tokens in place), and a token is only ever sent over TLS.
 */

import { readFileSync, statSync } from "node:fs";
import { checkServerIdentity } from "node:tls";
import type { Socket } from "node:net";
import {
  CallCredentials,
  type ChannelOptions,
  ChannelCredentials,
  Metadata,
  credentials,
  type experimental,
} from "@grpc/grpc-js";
import { log } from "./log";

/** The environment variables {@link clientSecurityFromEnv} reads. */
export const SECURITY_ENV = {
  caFile: "STEWARD_TLS_CA_FILE",
  certFile: "STEWARD_TLS_CERT_FILE",
  keyFile: "STEWARD_TLS_KEY_FILE",
  tokenFile: "STEWARD_TOKEN_FILE",
  serverName: "STEWARD_TLS_SERVER_NAME",
  insecurePlaintext: "STEWARD_INSECURE_PLAINTEXT",
} as const;

/** How to dial Steward's services: the three TLS files, or `insecurePlaintext`. */
export interface ClientSecurity {
  /** CA of the servers' certificates (PEM). */
  caFile?: string | undefined;
  /** This client's certificate (PEM), presented for mutual TLS. */
  certFile?: string | undefined;
  /** Its private key (PEM). */
  keyFile?: string | undefined;
  /** A bearer token presented as the caller's identity (sent over TLS only). Optional. */
  tokenFile?: string | undefined;
  /** Name the server's certificate must carry, when it is not the dialed host. Optional. */
  serverName?: string | undefined;
  /** Dial without TLS (development only); excludes every other setting. */
  insecurePlaintext?: boolean | undefined;
}

/** A security setting is missing, contradictory, or names a file that cannot be used. */
export class SecurityConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SecurityConfigError";
  }
}

/**
 * The settings of the `STEWARD_TLS_CA_FILE`, `STEWARD_TLS_CERT_FILE`, `STEWARD_TLS_KEY_FILE`,
 * `STEWARD_TOKEN_FILE`, `STEWARD_TLS_SERVER_NAME` and `STEWARD_INSECURE_PLAINTEXT` ("true" or
 * "1" enables it) variables of `env`. Not validated: {@link channelCredentials} does that.
 */
export function clientSecurityFromEnv(env: NodeJS.ProcessEnv = process.env): ClientSecurity {
  const get = (name: string): string | undefined => env[name] || undefined;
  const plaintext = env[SECURITY_ENV.insecurePlaintext];
  return {
    caFile: get(SECURITY_ENV.caFile),
    certFile: get(SECURITY_ENV.certFile),
    keyFile: get(SECURITY_ENV.keyFile),
    tokenFile: get(SECURITY_ENV.tokenFile),
    serverName: get(SECURITY_ENV.serverName),
    insecurePlaintext: plaintext === "true" || plaintext === "1",
  };
}

/** Throws {@link SecurityConfigError} unless `security` can make a connection. */
export function validateClientSecurity(security: ClientSecurity): void {
  const { caFile, certFile, keyFile, tokenFile } = security;
  if (security.insecurePlaintext) {
    if (caFile || certFile || keyFile || tokenFile) {
      throw new SecurityConfigError(
        `${SECURITY_ENV.insecurePlaintext} excludes TLS files and a token (a token is never sent in plaintext)`,
      );
    }
    return;
  }
  if (!caFile || !certFile || !keyFile) {
    throw new SecurityConfigError(
      `dialing Steward's services needs ${SECURITY_ENV.caFile}, ${SECURITY_ENV.certFile} and ` +
        `${SECURITY_ENV.keyFile} (mutual TLS), or ${SECURITY_ENV.insecurePlaintext}=true (development only)`,
    );
  }
}

function reason(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  return code ?? (err instanceof Error ? err.message : String(err));
}

function readPem(path: string, what: string): Buffer {
  let data: Buffer;
  try {
    data = readFileSync(path);
  } catch (err) {
    throw new SecurityConfigError(`cannot read the ${what} ${path}: ${reason(err)}`);
  }
  if (!data.includes("-----BEGIN")) throw new SecurityConfigError(`the ${what} ${path} holds no PEM data`);
  return data;
}

/**
 * The bearer token of a file, read again when its modification time or size changes.
 * {@link header} throws {@link SecurityConfigError} when the file cannot be read or is empty.
 */
export class TokenFile {
  private stamp = "";
  private token = "";

  constructor(readonly path: string) {}

  /** `Bearer <token>`, from the file as it is now. */
  header(): string {
    let stamp: string;
    try {
      const st = statSync(this.path);
      stamp = `${st.mtimeMs}:${st.size}`;
      if (stamp !== this.stamp || this.token === "") {
        const token = readFileSync(this.path, "utf8").trim();
        if (token === "") throw new SecurityConfigError(`the token file ${this.path} is empty`);
        this.token = token;
        this.stamp = stamp;
      }
    } catch (err) {
      if (err instanceof SecurityConfigError) throw err;
      throw new SecurityConfigError(`cannot read the token ${this.path}: ${reason(err)}`);
    }
    return `Bearer ${this.token}`;
  }

  /** Call credentials sending `authorization: Bearer <token>` with every call. */
  callCredentials(): CallCredentials {
    return credentials.createFromMetadataGenerator((_params, callback) => {
      let value: string;
      try {
        value = this.header();
      } catch (err) {
        callback(err as Error);
        return;
      }
      const metadata = new Metadata();
      metadata.set("authorization", value);
      callback(null, metadata);
    });
  }
}

/** The TLS files of a {@link ClientSecurity}, as read at one time, and the credentials made of them. */
interface TlsFiles {
  /** Modification time, size and inode of the CA, certificate and key when they were checked. */
  stamp: string;
  credentials: ChannelCredentials;
}

function tlsStamp(paths: readonly string[]): string {
  return paths
    .map((path) => {
      const st = statSync(path, { bigint: true });
      return `${st.mtimeNs}:${st.size}:${st.ino}`;
    })
    .join("/");
}

/**
 * TLS channel credentials that read the CA, certificate and key again before a connection
 * when the files have changed, keeping the last good set when the new one cannot be used.
 *
 * grpc-js makes one secure connector per subchannel and calls its `connect` for every
 * connection the subchannel opens (the first and each reconnection); the connector here
 * delegates each of them to the credentials of the files as they are then.
 */
class ReloadingTlsCredentials extends ChannelCredentials {
  private current: TlsFiles;
  /** The stamp of the files last found unusable, so that they are warned about once. */
  private refused = "";

  constructor(
    private readonly security: ClientSecurity,
    private readonly make: (security: ClientSecurity) => ChannelCredentials,
  ) {
    super();
    // Stamped before they are read, so that a change while reading is seen at the next check.
    // An unreadable file fails here or in make, which names it.
    const stamp = (() => {
      try {
        return tlsStamp(this.paths);
      } catch {
        return "";
      }
    })();
    this.current = { stamp, credentials: make(security) };
  }

  private get paths(): string[] {
    return [this.security.caFile!, this.security.certFile!, this.security.keyFile!];
  }

  /** The credentials of the files as they are now, or the last good ones. */
  latest(): ChannelCredentials {
    let stamp: string;
    try {
      stamp = tlsStamp(this.paths);
    } catch (err) {
      // A file missing (a Secret's files being swapped): named when it is read below.
      stamp = `unreadable:${reason(err)}`;
    }
    if (stamp === this.current.stamp || stamp === this.refused) return this.current.credentials;
    try {
      this.current = { stamp, credentials: this.make(this.security) };
      this.refused = "";
      log.info(`client certificate reloaded from ${this.security.certFile} and ${this.security.keyFile}`);
    } catch (err) {
      this.refused = stamp;
      log.warn(`keeping the current client certificate: ${err instanceof Error ? err.message : String(err)}`);
    }
    return this.current.credentials;
  }

  override _isSecure(): boolean {
    return true;
  }

  override _equals(other: ChannelCredentials): boolean {
    return other === this;
  }

  override _createSecureConnector(
    target: experimental.GrpcUri,
    options: ChannelOptions,
    callCredentials?: CallCredentials,
  ): experimental.SecureConnector {
    const calls = callCredentials ?? CallCredentials.createEmpty();
    return {
      connect: (socket: Socket): Promise<experimental.SecureConnectResult> =>
        this.latest()._createSecureConnector(target, options, calls).connect(socket),
      waitForReady: (): Promise<void> => Promise.resolve(),
      getCallCredentials: (): CallCredentials => calls,
      destroy: (): void => {},
    };
  }
}

/** TLS credentials of the files as they are now; throws {@link SecurityConfigError} naming the one at fault. */
function readTls(security: ClientSecurity): ChannelCredentials {
  const ca = readPem(security.caFile!, "server CA");
  const cert = readPem(security.certFile!, "client certificate");
  const key = readPem(security.keyFile!, "client key");
  const serverName = security.serverName;
  try {
    return credentials.createSsl(
      ca,
      key,
      cert,
      serverName ? { checkServerIdentity: (_host, peer) => checkServerIdentity(serverName, peer) } : {},
    );
  } catch (err) {
    throw new SecurityConfigError(
      `the server CA ${security.caFile}, client certificate ${security.certFile} and key ` +
        `${security.keyFile} cannot be used: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}

/**
 * grpc-js channel credentials for `security`: TLS with the CA, the client certificate and
 * key (read again for a new connection when the files change; see the module's doc), the
 * server's name checked against `serverName` when given, and the token (if any) with every
 * call; insecure credentials only when `insecurePlaintext` says so.
 *
 * Throws {@link SecurityConfigError} naming the setting or file at fault, so that a
 * misconfigured controller fails at start rather than at its first call.
 */
export function channelCredentials(security: ClientSecurity): ChannelCredentials {
  validateClientSecurity(security);
  if (security.insecurePlaintext) return credentials.createInsecure();
  const tls = new ReloadingTlsCredentials({ ...security }, readTls);
  if (!security.tokenFile) return tls;
  const token = new TokenFile(security.tokenFile);
  token.header(); // fail now, naming the file
  return credentials.combineChannelCredentials(tls, token.callCredentials());
}

/** {@link channelCredentials} of the `STEWARD_*` environment ({@link clientSecurityFromEnv}). */
export function securityFromEnv(env: NodeJS.ProcessEnv = process.env): ChannelCredentials {
  return channelCredentials(clientSecurityFromEnv(env));
}
