/**
 * Unit tests of the API client's credentials as client-go finds them: a token file read
 * again when it is rotated, a `$KUBECONFIG` list merged, and exec credential plugins (tiny
 * shell scripts) giving a token or a client certificate, cached until they expire and run
 * again after a 401. The server is a local HTTPS server that records what the client sends
 * and answers 401 to what the test revoked, as kube-apiserver does to an expired credential.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import type { TLSSocket } from "node:tls";
import { after, before, describe, it } from "node:test";
import { ExecCredentialError, ExecCredentials } from "../credentials";
import { ApiStatusError, KubeClient, clusterAccess, loadKubeconfig } from "../kube";

const dir = mkdtempSync(join(tmpdir(), "steward-credentials-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function openssl(...args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
}

/** A self-signed certificate for `cn` (a client's, or the server's for 127.0.0.1). */
function selfSigned(cn: string, server = false): { cert: string; key: string } {
  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-subj", `/CN=${cn}`, ...(server ? ["-addext", "subjectAltName=IP:127.0.0.1"] : []),
    "-days", "1", "-keyout", `${cn}.key`, "-out", `${cn}.crt`);
  return { cert: readFileSync(join(dir, `${cn}.crt`), "utf8"), key: readFileSync(join(dir, `${cn}.key`), "utf8") };
}

/** Records each request's bearer token (or client certificate CN); 401 to the revoked ones. */
class Recorder {
  readonly seen: string[] = [];
  readonly revoked = new Set<string>();
  url = "";
  ca = Buffer.alloc(0);
  private server: https.Server | undefined;

  async start(): Promise<void> {
    const { cert, key } = selfSigned("server", true);
    this.ca = Buffer.from(cert);
    this.server = https.createServer({ cert, key, requestCert: true, rejectUnauthorized: false }, (req, res) => {
      const peer = (req.socket as TLSSocket).getPeerCertificate();
      const token = (req.headers.authorization ?? "").replace(/^Bearer /, "");
      const who = token || (peer.subject ? `cn:${String(peer.subject.CN)}` : "");
      this.seen.push(who);
      req.resume();
      res.setHeader("content-type", "application/json");
      if (this.revoked.has(who)) {
        res.statusCode = 401;
        res.end('{"kind":"Status","reason":"Unauthorized","message":"Unauthorized"}');
        return;
      }
      res.end("{}");
    });
    this.server.listen(0, "127.0.0.1");
    await once(this.server, "listening");
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** A kubeconfig in `where` for this server whose user is the YAML `user` (flow style). */
  kubeconfig(where: string, user: string): string {
    mkdirSync(where, { recursive: true });
    const file = join(where, "kubeconfig");
    writeFileSync(
      file,
      [
        "apiVersion: v1",
        "kind: Config",
        "current-context: c",
        "contexts: [{name: c, context: {cluster: k, user: u}}]",
        `clusters: [{name: k, cluster: {server: "${this.url}", certificate-authority-data: "${this.ca.toString("base64")}"}}]`,
        `users: [{name: u, user: ${user}}]`,
        "",
      ].join("\n"),
    );
    return file;
  }

  stop(): void {
    this.server?.closeAllConnections();
    this.server?.close();
  }
}

const server = new Recorder();
before(() => server.start());
after(() => server.stop());

function reset(): void {
  server.seen.length = 0;
  server.revoked.clear();
}

/** A plugin counting its runs next to itself, printing a token naming its argument, $GREETING and the run. */
const COUNTING_PLUGIN = `#!/bin/sh
here=$(dirname "$0")
n=$(( $(cat "$here/runs" 2>/dev/null || echo 0) + 1 ))
echo $n > "$here/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$here/info"
expiry=""
[ -n "$EXPIRY" ] && expiry=",\\"expirationTimestamp\\":\\"$EXPIRY\\""
printf '{"apiVersion":"client.authentication.k8s.io/%s","kind":"ExecCredential","status":{"token":"%s-%s-%d"%s}}' "$VERSION" "$1" "$GREETING" "$n" "$expiry"
`;

function plugin(where: string, script: string): string {
  mkdirSync(where, { recursive: true });
  const file = join(where, "plugin.sh");
  writeFileSync(file, script, { mode: 0o755 });
  return file;
}

describe("token file", () => {
  it("is read again when rotated, so the server sees the new token", async () => {
    reset();
    const where = join(dir, "tokenfile");
    const kubeconfig = server.kubeconfig(where, "{tokenFile: token}");
    writeFileSync(join(where, "token"), "first\n");
    const api = new KubeClient(loadKubeconfig(kubeconfig));
    try {
      await api.request("GET", "/api");
      writeFileSync(join(where, "token"), "second-token\n");
      await api.request("GET", "/api");
    } finally {
      api.close();
    }
    assert.deepEqual(server.seen, ["first", "second-token"]);
  });
});

describe("KUBECONFIG list", () => {
  it("is merged: the first file to set a value wins, relative paths from the file that holds them", () => {
    const one = join(dir, "merge-one");
    const two = join(dir, "merge-two");
    mkdirSync(one, { recursive: true });
    mkdirSync(two, { recursive: true });
    writeFileSync(
      join(one, "config"),
      ["current-context: merged", 'clusters: [{name: k, cluster: {server: "https://first.example:6443/"}}]', ""].join("\n"),
    );
    writeFileSync(
      join(two, "config"),
      [
        "current-context: other",
        "contexts: [{name: merged, context: {cluster: k, user: u}}, {name: other, context: {cluster: k, user: x}}]",
        'clusters: [{name: k, cluster: {server: "https://second.example:6443"}}]',
        "users: [{name: u, user: {tokenFile: tok, exec: {apiVersion: client.authentication.k8s.io/v1, command: ./bin/plugin}}}]",
        "",
      ].join("\n"),
    );
    const env = { KUBECONFIG: [join(one, "config"), join(one, "missing"), join(two, "config")].join(delimiter) };
    for (const access of [loadKubeconfig(undefined, undefined, env), clusterAccess(undefined, env)]) {
      assert.equal(access.server, "https://first.example:6443");
      assert.equal(access.tokenFile, join(two, "tok"));
      assert.equal(access.exec?.command, join(two, "bin", "plugin"));
    }
    assert.throws(() => loadKubeconfig(undefined, undefined, { KUBECONFIG: join(one, "missing") }), /missing/);
  });
});

describe("exec credential plugin", () => {
  for (const version of ["v1", "v1beta1"]) {
    it(`${version}: runs with args and env, caches the token, runs again after a 401`, async () => {
      reset();
      const where = join(dir, `exec-${version}`);
      plugin(where, COUNTING_PLUGIN);
      const kubeconfig = server.kubeconfig(
        where,
        `{exec: {apiVersion: client.authentication.k8s.io/${version}, command: ./plugin.sh, args: [arg], ` +
          `env: [{name: GREETING, value: hello}, {name: VERSION, value: ${version}}], ` +
          "interactiveMode: IfAvailable, provideClusterInfo: true}}",
      );
      const api = new KubeClient(loadKubeconfig(kubeconfig));
      try {
        await Promise.all([api.request("GET", "/api"), api.request("GET", "/api")]);
        server.revoked.add("arg-hello-1");
        await api.request("GET", "/api");
        await api.request("GET", "/api");
      } finally {
        api.close();
      }
      // Two at once share one run; the 401 runs it again and the request goes once more.
      assert.deepEqual(server.seen, ["arg-hello-1", "arg-hello-1", "arg-hello-1", "arg-hello-2", "arg-hello-2"]);
      const info = JSON.parse(readFileSync(join(where, "info"), "utf8")) as {
        apiVersion: string;
        kind: string;
        spec: { interactive: boolean; cluster?: { server: string; "certificate-authority-data"?: string } };
      };
      assert.equal(info.apiVersion, `client.authentication.k8s.io/${version}`);
      assert.equal(info.kind, "ExecCredential");
      assert.equal(info.spec.interactive, false);
      assert.equal(info.spec.cluster?.server, server.url);
      assert.equal(info.spec.cluster?.["certificate-authority-data"], server.ca.toString("base64"));
    });
  }

  it("runs again once the credential's expirationTimestamp has passed", async () => {
    const where = join(dir, "exec-expiry");
    const command = plugin(where, COUNTING_PLUGIN);
    let now = Date.parse("2030-01-01T00:00:00Z");
    const creds = new ExecCredentials(
      {
        command,
        args: ["a"],
        apiVersion: "client.authentication.k8s.io/v1",
        env: [
          { name: "VERSION", value: "v1" },
          { name: "GREETING", value: "g" },
          { name: "EXPIRY", value: "2030-01-01T00:10:00Z" },
        ],
      },
      () => now,
    );
    assert.equal((await creds.get()).token, "a-g-1");
    now += 9 * 60_000;
    assert.equal((await creds.get()).token, "a-g-1");
    now += 60_000;
    assert.equal((await creds.get()).token, "a-g-2");
  });

  it("gives a client certificate; a refused one is replaced on a new connection", async () => {
    reset();
    const where = join(dir, "exec-cert");
    mkdirSync(where, { recursive: true });
    ["first", "second"].forEach((cn, i) => {
      const { cert, key } = selfSigned(cn);
      writeFileSync(
        join(where, `cred${i + 1}.json`),
        JSON.stringify({
          apiVersion: "client.authentication.k8s.io/v1",
          kind: "ExecCredential",
          status: { clientCertificateData: cert, clientKeyData: key },
        }),
      );
    });
    plugin(
      where,
      `#!/bin/sh
here=$(dirname "$0")
n=$(( $(cat "$here/runs" 2>/dev/null || echo 0) + 1 ))
echo $n > "$here/runs"
cat "$here/cred$n.json"
`,
    );
    server.revoked.add("cn:first");
    const api = new KubeClient(
      loadKubeconfig(server.kubeconfig(where, "{exec: {apiVersion: client.authentication.k8s.io/v1, command: ./plugin.sh}}")),
    );
    try {
      await api.request("GET", "/api");
      await api.request("GET", "/api");
    } finally {
      api.close();
    }
    assert.deepEqual(server.seen, ["cn:first", "cn:second", "cn:second"]);
  });

  const failures: [string, string, RegExp][] = [
    ["exits non-zero", "#!/bin/sh\necho 'no credentials for you' >&2\nexit 3\n", /no credentials for you/],
    [
      "prints no credential",
      `#!/bin/sh\necho '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}'\n`,
      /neither a token nor a client certificate/,
    ],
    [
      "prints another version",
      `#!/bin/sh\necho '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"x"}}'\n`,
      /printed apiVersion/,
    ],
    ["prints no JSON", "#!/bin/sh\necho hello\n", /not an ExecCredential/],
  ];
  for (const [name, script, want] of failures) {
    it(`fails with an error naming the command when it ${name}`, async () => {
      reset();
      const command = plugin(join(dir, `fail-${name.replace(/ /g, "-")}`), script);
      const api = new KubeClient({ server: server.url, ca: server.ca, exec: { command, apiVersion: "client.authentication.k8s.io/v1" } });
      try {
        await assert.rejects(api.request("GET", "/api"), (err: unknown) => {
          assert.ok(err instanceof ExecCredentialError, String(err));
          assert.match(err.message, new RegExp(command.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")));
          assert.match(err.message, want);
          return true;
        });
      } finally {
        api.close();
      }
      assert.deepEqual(server.seen, []);
    });
  }

  it("shows the install hint of a command that is not there", async () => {
    const api = new KubeClient({
      server: server.url,
      ca: server.ca,
      exec: { command: "steward-no-such-plugin", apiVersion: "client.authentication.k8s.io/v1", installHint: "get it from example.com" },
    });
    try {
      await assert.rejects(api.request("GET", "/api"), /steward-no-such-plugin[\s\S]*get it from example\.com/);
    } finally {
      api.close();
    }
  });

  it("leaves a 401 it cannot fix to the caller", async () => {
    reset();
    const where = join(dir, "static-401");
    const api = new KubeClient(loadKubeconfig(server.kubeconfig(where, "{token: static}")));
    server.revoked.add("static");
    try {
      await assert.rejects(api.request("GET", "/api"), (err: unknown) => err instanceof ApiStatusError && err.status === 401);
    } finally {
      api.close();
    }
    assert.deepEqual(server.seen, ["static"]);
  });
});
