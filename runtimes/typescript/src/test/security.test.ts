/**
 * Unit tests of the client security: settings, errors, the token file, and real mTLS calls,
 * also with the certificate files rotated under a client.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, renameSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { type Socket, connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  type ChannelCredentials,
  Client,
  connectivityState as ConnectivityState,
  Metadata,
  Server,
  ServerCredentials,
  type ServerUnaryCall,
  type ServiceError,
  type sendUnaryData,
} from "@grpc/grpc-js";
import {
  SecurityConfigError,
  TokenFile,
  channelCredentials,
  clientSecurityFromEnv,
  securityFromEnv,
} from "../security";

const dir = mkdtempSync(join(tmpdir(), "steward-security-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function openssl(...args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
}

/** A CA `name` and, signed by it, a certificate `cn` (server for "steward.test" if `server`). */
function issue(ca: string, cn: string, server = false): { cert: string; key: string } {
  const cert = join(dir, `${cn}.crt`);
  const key = join(dir, `${cn}.key`);
  const ext = join(dir, `${cn}.ext`);
  writeFileSync(
    ext,
    server
      ? "subjectAltName=DNS:steward.test\nextendedKeyUsage=serverAuth\n"
      : "extendedKeyUsage=clientAuth\n",
  );
  openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-subj", `/O=steward-test/CN=${cn}`, "-keyout", key, "-out", join(dir, `${cn}.csr`));
  openssl("x509", "-req", "-in", join(dir, `${cn}.csr`), "-CA", `${ca}.crt`, "-CAkey", `${ca}.key`,
    "-CAcreateserial", "-days", "1", "-extfile", ext, "-out", cert);
  return { cert, key };
}

function newCA(name: string): string {
  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-subj", `/CN=${name}`, "-days", "1", "-keyout", `${name}.key`, "-out", `${name}.crt`);
  return join(dir, name);
}

function errorOf(fn: () => unknown): SecurityConfigError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof SecurityConfigError, `${String(err)} is not a SecurityConfigError`);
    return err;
  }
  assert.fail("no error");
}

describe("client security settings", () => {
  it("reads the STEWARD_* variables; only true and 1 enable plaintext", () => {
    const env = {
      STEWARD_TLS_CA_FILE: "/ca",
      STEWARD_TLS_CERT_FILE: "/c",
      STEWARD_TLS_KEY_FILE: "/k",
      STEWARD_TOKEN_FILE: "/t",
      STEWARD_TLS_SERVER_NAME: "steward.test",
      STEWARD_INSECURE_PLAINTEXT: "yes",
    };
    assert.deepEqual(clientSecurityFromEnv(env), {
      caFile: "/ca",
      certFile: "/c",
      keyFile: "/k",
      tokenFile: "/t",
      serverName: "steward.test",
      insecurePlaintext: false,
    });
    assert.equal(clientSecurityFromEnv({ STEWARD_INSECURE_PLAINTEXT: "true" }).insecurePlaintext, true);
    assert.equal(clientSecurityFromEnv({ STEWARD_INSECURE_PLAINTEXT: "1" }).insecurePlaintext, true);
  });

  it("refuses an empty environment, naming the variables", () => {
    const err = errorOf(() => securityFromEnv({}));
    for (const word of [
      "STEWARD_TLS_CA_FILE",
      "STEWARD_TLS_CERT_FILE",
      "STEWARD_TLS_KEY_FILE",
      "STEWARD_INSECURE_PLAINTEXT=true",
      "development only",
    ]) {
      assert.ok(err.message.includes(word), `${err.message} does not say ${word}`);
    }
    errorOf(() => securityFromEnv({ STEWARD_TLS_CA_FILE: "/ca", STEWARD_TLS_CERT_FILE: "/c" }));
  });

  it("never pairs plaintext with TLS files or a token", () => {
    assert.match(errorOf(() => channelCredentials({ insecurePlaintext: true, tokenFile: "/t" })).message, /never sent in plaintext/);
    assert.match(errorOf(() => channelCredentials({ insecurePlaintext: true, caFile: "/ca" })).message, /excludes TLS files/);
    assert.ok(channelCredentials({ insecurePlaintext: true }) !== undefined);
  });

  it("names the file it cannot use", () => {
    const ca = newCA("files-ca");
    const { cert, key } = issue(ca, "files-client");
    const garbage = join(dir, "garbage");
    writeFileSync(garbage, "not pem");
    const missing = join(dir, "missing.crt");
    const files = { caFile: `${ca}.crt`, certFile: cert, keyFile: key };
    assert.match(errorOf(() => channelCredentials({ ...files, caFile: missing })).message, /server CA .*missing\.crt: ENOENT/);
    assert.match(errorOf(() => channelCredentials({ ...files, keyFile: garbage })).message, /client key .*garbage holds no PEM data/);
    const other = issue(ca, "files-other");
    assert.match(errorOf(() => channelCredentials({ ...files, keyFile: other.key })).message, /cannot be used/);
    assert.match(errorOf(() => channelCredentials({ ...files, tokenFile: missing })).message, /token .*missing\.crt/);
    assert.ok(channelCredentials(files)._isSecure());
  });
});

describe("token file", () => {
  it("is read again when its time or size changes", () => {
    const path = join(dir, "token");
    const token = new TokenFile(path);
    assert.match(errorOf(() => token.header()).message, /cannot read the token/);
    writeFileSync(path, "first\n");
    assert.equal(token.header(), "Bearer first");
    const stamp = new Date(Date.now() - 60_000);
    writeFileSync(path, "other\n"); // same size, new time
    utimesSync(path, stamp, stamp);
    assert.equal(token.header(), "Bearer other");
    writeFileSync(path, "rotated-longer");
    utimesSync(path, stamp, stamp); // same time, new size
    assert.equal(token.header(), "Bearer rotated-longer");
    writeFileSync(path, "  \n");
    assert.match(errorOf(() => token.header()).message, /empty/);
  });
});

interface Seen {
  commonName: string | undefined;
  authorization: string | undefined;
}

describe("a call over mutual TLS", () => {
  const path = "/steward.test.Echo/Echo";
  const identity = (b: Buffer): Buffer => b;
  let server: Server;
  let target = "";
  let ca = "";
  let client: { cert: string; key: string };
  const seen: Seen[] = [];

  before(async () => {
    ca = newCA("call-ca");
    const serving = issue(ca, "steward", true);
    client = issue(ca, "controller-one");
    server = new Server();
    server.addService(
      { echo: { path, requestStream: false, responseStream: false, requestSerialize: identity,
        requestDeserialize: identity, responseSerialize: identity, responseDeserialize: identity } },
      {
        echo: (call: ServerUnaryCall<Buffer, Buffer>, callback: sendUnaryData<Buffer>) => {
          const auth = call.metadata.get("authorization")[0];
          seen.push({
            commonName: call.getAuthContext().sslPeerCertificate?.subject.CN,
            authorization: auth === undefined ? undefined : String(auth),
          });
          callback(null, call.request);
        },
      },
    );
    const creds = ServerCredentials.createSsl(
      readFileSync(`${ca}.crt`),
      [{ private_key: readFileSync(serving.key), cert_chain: readFileSync(serving.cert) }],
      true,
    );
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", creds, (err, p) => (err ? reject(err) : resolve(p))),
    );
    target = `127.0.0.1:${port}`;
  });
  after(() => server.forceShutdown());

  function callOn(c: Client): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const deadline = new Date(Date.now() + 10_000);
      c.makeUnaryRequest(path, identity, identity, Buffer.from("hi"), new Metadata(), { deadline },
        (err: ServiceError | null) => (err ? reject(err) : resolve()));
    });
  }

  /** One call on a new channel, over a new connection (no subchannel shared with other channels). */
  async function call(creds: ChannelCredentials, to = target): Promise<void> {
    const c = new Client(to, creds, { "grpc.use_local_subchannel_pool": 1 });
    try {
      await callOn(c);
    } finally {
      c.close();
    }
  }

  it("presents the client certificate and checks the server's name", async () => {
    const files = { caFile: `${ca}.crt`, certFile: client.cert, keyFile: client.key };
    await call(channelCredentials({ ...files, serverName: "steward.test" }));
    assert.deepEqual(seen.pop(), { commonName: "controller-one", authorization: undefined });
    // The server's certificate names steward.test, not 127.0.0.1.
    await assert.rejects(call(channelCredentials(files)), /UNAVAILABLE|14/);
    // A client certificate of another CA is refused.
    const other = newCA("other-ca");
    const intruder = issue(other, "intruder");
    await assert.rejects(
      call(channelCredentials({ ...files, certFile: intruder.cert, keyFile: intruder.key, serverName: "steward.test" })),
    );
  });

  it("sends the token with every call, re-read when the file changes", async () => {
    const tokenFile = join(dir, "call-token");
    writeFileSync(tokenFile, "token-1\n");
    const creds = securityFromEnv({
      STEWARD_TLS_CA_FILE: `${ca}.crt`,
      STEWARD_TLS_CERT_FILE: client.cert,
      STEWARD_TLS_KEY_FILE: client.key,
      STEWARD_TOKEN_FILE: tokenFile,
      STEWARD_TLS_SERVER_NAME: "steward.test",
    });
    await call(creds);
    assert.deepEqual(seen.pop(), { commonName: "controller-one", authorization: "Bearer token-1" });
    writeFileSync(tokenFile, "token-2-rotated\n");
    await call(creds);
    assert.deepEqual(seen.pop(), { commonName: "controller-one", authorization: "Bearer token-2-rotated" });
  });

  it("presents a rotated certificate on new connections, keeping the last good one", async () => {
    const pairA = issue(ca, "rotating-a");
    const pairB = issue(ca, "rotating-b");
    const certFile = join(dir, "rotating", "tls.crt");
    const keyFile = join(dir, "rotating", "tls.key");
    execFileSync("mkdir", ["-p", join(dir, "rotating")]);
    // Each file replaced whole, as the kubelet swaps a Secret's files (no partial reads).
    const put = (file: string, data: Buffer | string): void => {
      writeFileSync(`${file}.new`, data);
      renameSync(`${file}.new`, file);
    };
    const install = (pair: { cert: string; key: string }): void => {
      put(certFile, readFileSync(pair.cert));
      put(keyFile, readFileSync(pair.key));
    };
    install(pairA);
    const creds = securityFromEnv({
      STEWARD_TLS_CA_FILE: `${ca}.crt`,
      STEWARD_TLS_CERT_FILE: certFile,
      STEWARD_TLS_KEY_FILE: keyFile,
      STEWARD_TLS_SERVER_NAME: "steward.test",
    });

    // A long-lived channel dials through a proxy whose connections the test can cut, so it
    // reconnects with the same credentials.
    const links = new Set<Socket>();
    const proxy = createServer((down) => {
      const up = connect(Number(target.split(":")[1]), "127.0.0.1");
      links.add(down).add(up);
      down.pipe(up).pipe(down);
      const close = (): void => {
        down.destroy();
        up.destroy();
      };
      down.on("error", close).on("close", close);
      up.on("error", close).on("close", close);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const proxied = `127.0.0.1:${(proxy.address() as { port: number }).port}`;
    const longLived = new Client(proxied, creds, { "grpc.use_local_subchannel_pool": 1 });
    const reconnect = async (): Promise<void> => {
      const channel = longLived.getChannel();
      assert.equal(channel.getConnectivityState(false), ConnectivityState.READY);
      for (const link of links) link.destroy();
      await new Promise<void>((resolve, reject) =>
        channel.watchConnectivityState(ConnectivityState.READY, Date.now() + 10_000, (err) =>
          err ? reject(err) : resolve()),
      );
      await callOn(longLived);
    };

    const warnings: string[] = [];
    const write = process.stderr.write;
    process.stderr.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
      if (String(chunk).includes(" WARN ")) warnings.push(String(chunk));
      return write.call(process.stderr, chunk, ...rest);
    }) as typeof process.stderr.write;
    try {
      await call(creds);
      assert.equal(seen.pop()?.commonName, "rotating-a");
      await callOn(longLived);
      assert.equal(seen.pop()?.commonName, "rotating-a");

      install(pairB);
      await call(creds); // a new channel
      assert.equal(seen.pop()?.commonName, "rotating-b");
      await callOn(longLived); // its connection is still open: the pair it was made with
      assert.equal(seen.pop()?.commonName, "rotating-a");
      await reconnect(); // a reconnection
      assert.equal(seen.pop()?.commonName, "rotating-b");
      assert.deepEqual(warnings, []);

      // Garbage: the last good pair (B) is kept, with one warning however many connections.
      put(certFile, "not a certificate\n");
      put(keyFile, "not a key either\n");
      await call(creds);
      assert.equal(seen.pop()?.commonName, "rotating-b");
      await call(creds);
      assert.equal(seen.pop()?.commonName, "rotating-b");
      await reconnect();
      assert.equal(seen.pop()?.commonName, "rotating-b");
      assert.equal(warnings.length, 1, warnings.join(""));
      assert.match(warnings[0]!, /keeping the current client certificate: .*rotating\/tls\.crt holds no PEM data/);

      // Half-rotated: A's certificate with B's key does not pair; still B, and a new warning.
      put(certFile, readFileSync(pairA.cert));
      put(keyFile, readFileSync(pairB.key));
      await call(creds);
      assert.equal(seen.pop()?.commonName, "rotating-b");
      assert.equal(warnings.length, 2, warnings.join(""));
      assert.match(warnings[1]!, /cannot be used/);

      // Completed: A again.
      put(keyFile, readFileSync(pairA.key));
      await call(creds);
      assert.equal(seen.pop()?.commonName, "rotating-a");
      assert.equal(warnings.length, 2, warnings.join(""));
    } finally {
      process.stderr.write = write;
      longLived.close();
      for (const link of links) link.destroy();
      await new Promise((resolve) => proxy.close(resolve));
    }
  });
});
