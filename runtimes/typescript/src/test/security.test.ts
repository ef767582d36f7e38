/** Unit tests of the client security: settings, errors, the token file, and a real mTLS call. */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  type ChannelCredentials,
  Client,
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

  async function call(creds: ChannelCredentials): Promise<void> {
    const c = new Client(target, creds);
    try {
      await new Promise<void>((resolve, reject) => {
        const deadline = new Date(Date.now() + 10_000);
        c.makeUnaryRequest(path, identity, identity, Buffer.from("hi"), new Metadata(), { deadline },
          (err: ServiceError | null) => (err ? reject(err) : resolve()));
      });
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
});
