/**
 * A test helper, not a test: a local HTTPS server that records the requests a KubeClient
 * sends, and a kubeconfig pointing at it.
 */

import { execFileSync } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeClient, type KubeClientOptions } from "../kube";

/**
 * A local HTTPS server that only records which requests reached it and answers `{}` to
 * each: it observes what the client sends, it does not play the API server. Once started,
 * `kubeconfig` is a file that points at it (with a bearer token), in `dir`.
 */
export class Arrivals {
  readonly seen: string[] = [];
  readonly dir = mkdtempSync(join(tmpdir(), "steward-arrivals-"));
  private server: https.Server | undefined;
  ca: Buffer = Buffer.alloc(0);
  url = "";
  kubeconfig = "";

  async start(): Promise<void> {
    const key = join(this.dir, "server.key");
    const cert = join(this.dir, "server.crt");
    execFileSync(
      "openssl",
      ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1",
        "-keyout", key, "-out", cert],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    this.ca = readFileSync(cert);
    this.server = https.createServer({ key: readFileSync(key), cert: this.ca }, (req, res) => {
      this.seen.push(`${req.method} ${(req.url ?? "").split("?")[0]}`);
      req.resume();
      req.on("end", () => {
        res.setHeader("content-type", "application/json");
        res.end("{}");
      });
    });
    this.server.listen(0, "127.0.0.1");
    await once(this.server, "listening");
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    this.kubeconfig = join(this.dir, "kubeconfig");
    writeFileSync(
      this.kubeconfig,
      [
        "apiVersion: v1",
        "kind: Config",
        "current-context: test",
        "contexts: [{name: test, context: {cluster: test, user: test}}]",
        `clusters: [{name: test, cluster: {server: "${this.url}", certificate-authority-data: "${this.ca.toString("base64")}"}}]`,
        "users: [{name: test, user: {token: secret}}]",
        "",
      ].join("\n"),
    );
  }

  client(options: KubeClientOptions = {}): KubeClient {
    return new KubeClient({ server: this.url, ca: this.ca }, "steward-test", options);
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    this.server?.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
