/**
 * Health endpoints of a controller process over HTTP, for the kubelet's probes:
 * `GET /healthz` (liveness) and `GET /readyz` (readiness); and, on a server of its own or
 * the same, `GET /metrics` (Prometheus' text format).
 *
 * Node runs the server on the same event loop as the controller, so a loop that is blocked
 * answers nothing and the probe times out, which is what a liveness probe should see.
 * `/healthz` answers 200 `ok` while the process works and 503 with the reason once its
 * `unhealthy` callback names one; `/readyz` answers 200 `ok` unless its `unready` callback
 * names a reason, which it answers with 503. Any other path is 404.
 */

import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";

/** `host:port` → [host, port]; an empty host means 127.0.0.1. Throws on anything else. */
export function splitAddress(address: string): [string, number] {
  const colon = address.lastIndexOf(":");
  const port = address.slice(colon + 1);
  if (colon < 0 || !/^\d+$/.test(port) || Number(port) > 65535) {
    throw new Error(`invalid address ${JSON.stringify(address)}: expected host:port`);
  }
  const host = address.slice(0, colon).replace(/^\[|\]$/g, "");
  return [host || "127.0.0.1", Number(port)];
}

/** What the endpoints report; each callback is asked at every request. */
export interface HealthChecks {
  /** Why the process is not alive any more, or undefined. */
  unhealthy?: () => string | undefined;
  /** Why the process is not ready, or undefined. */
  unready?: () => string | undefined;
  /** The Prometheus text exposition of `/metrics` (omit: 404). */
  metrics?: () => string;
  /** Serve `/healthz` and `/readyz` (default true; false: 404). */
  probes?: boolean;
}

/** A running health server; see the module docs. */
export class HealthServer {
  private constructor(
    private readonly server: http.Server,
    /** The address it listens on, as host:port (the real port when asked for port 0). */
    readonly address: string,
    /** Whether it serves `/metrics`. */
    readonly servesMetrics: boolean,
  ) {}

  /** Listen on `address` (host:port; port 0: a free one). */
  static async start(address: string, checks: HealthChecks): Promise<HealthServer> {
    const [host, port] = splitAddress(address);
    const server = http.createServer((req, res) => {
      const path = (req.url ?? "").split("?")[0];
      let status = 404;
      let body = "not found\n";
      let type = "text/plain; charset=utf-8";
      if (req.method !== "GET" && req.method !== "HEAD") {
        status = 405;
        body = "method not allowed\n";
      } else if ((path === "/healthz" || path === "/readyz") && checks.probes !== false) {
        const reason = path === "/healthz" ? checks.unhealthy?.() : (checks.unhealthy?.() ?? checks.unready?.());
        status = reason === undefined ? 200 : 503;
        body = reason === undefined ? "ok\n" : `${reason}\n`;
      } else if (path === "/metrics" && checks.metrics !== undefined) {
        status = 200;
        body = checks.metrics();
        type = "text/plain; version=0.0.4; charset=utf-8";
      }
      res.writeHead(status, { "content-type": type, "content-length": Buffer.byteLength(body) });
      res.end(req.method === "HEAD" ? undefined : body);
    });
    server.listen(port, host);
    await Promise.race([
      once(server, "listening"),
      once(server, "error").then(([err]) => {
        throw new Error(`cannot listen on ${address}: ${err instanceof Error ? err.message : String(err)}`);
      }),
    ]);
    const bound = server.address() as AddressInfo;
    const shown = bound.family === "IPv6" ? `[${bound.address}]` : bound.address;
    return new HealthServer(server, `${shown}:${bound.port}`, checks.metrics !== undefined);
  }

  /** Stop listening and close the open connections. */
  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
