/**
 * Example controller: label namespaces by rules on their names.
 *
 * Each `--rule 'KEY=VALUE:REGEX'` gives every namespace whose name matches REGEX the label
 * KEY=VALUE. The controller remembers which labels it set (annotation
 * `steward.dev/namespace-labeller-keys`), so a namespace that stops matching (the rules
 * changed) loses exactly those labels, and a label someone removed is put back. It watches
 * namespaces through the informer, reconciles only while the manager makes it the active
 * instance, and writes merge PATCHes to kube-apiserver with the kubeconfig's credentials,
 * each carrying the reconcile's `traceparent`.
 */

import { parseArgs } from "node:util";
import {
  ApiStatusError,
  ControllerBuilder,
  KubeClient,
  type Mirror,
  type ReconcileInfo,
  type Reconciler,
  RegistrationRefusedError,
  type Request,
  type Result,
  SecurityConfigError,
  channelCredentials,
  clientSecurityFromEnv,
  configureTracing,
  labelsChanged,
  loadKubeconfig,
  log,
  resourceType,
} from "@steward/runtime";

const NAMESPACES = resourceType("", "v1", "namespaces");
const OWNED = "steward.dev/namespace-labeller-keys";

const HELP = `usage: node dist/examples/namespace-labeller.js --rule KEY=VALUE:REGEX [--rule ...]
       [--informer HOST:PORT] [--manager HOST:PORT] [--kubeconfig FILE] [--name NAME] [--standby]
       [--tls-ca-file FILE --tls-cert-file FILE --tls-key-file FILE] [--token-file FILE]
       [--tls-server-name NAME] [--insecure-plaintext]

Labels namespaces by their names: with --rule 'team=payments:^pay-', every namespace whose
name matches ^pay- gets the label team=payments. When a namespace stops matching a rule
(say the rules changed), the label that rule set is removed; labels it did not set are
never touched. The first matching rule wins for a label key.

  --rule KEY=VALUE:REGEX  a rule (repeatable, at least one); REGEX is a JavaScript regex
  --informer HOST:PORT    the Steward informer (default 127.0.0.1:50061)
  --manager HOST:PORT     the Steward manager; without it the controller runs alone
  --kubeconfig FILE       API server credentials (default $KUBECONFIG, ~/.kube/config)
  --name NAME             controller name registered with the manager
                          (default namespace-labeller)
  --standby               wait as a standby if another instance holds the name
                          (otherwise such a registration is refused)
  -h, --help              this text

Security: the informer and the manager are dialed with mutual TLS.
  --tls-ca-file FILE      CA of their certificates (default $STEWARD_TLS_CA_FILE)
  --tls-cert-file FILE    client certificate (default $STEWARD_TLS_CERT_FILE)
  --tls-key-file FILE     its key (default $STEWARD_TLS_KEY_FILE)
  --token-file FILE       bearer token presented as this controller's identity, re-read
                          when it changes (default $STEWARD_TOKEN_FILE)
  --tls-server-name NAME  name their certificates carry, when not the dialed host
                          (default $STEWARD_TLS_SERVER_NAME)
  --insecure-plaintext    dial without TLS, development only
                          (default $STEWARD_INSECURE_PLAINTEXT=true)
Without the TLS files or plaintext it exits 2 at once, naming the variables.

Tracing: spans go over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (service name
steward-controller-NAME). Logs go to stderr. SIGTERM deregisters and exits 0.`;

/** One rule: the label to give and the names that get it. */
export interface Rule {
  key: string;
  value: string;
  pattern: RegExp;
}

/** Parse `KEY=VALUE:REGEX` (the first ':' separates the label from the regex). */
export function parseRule(text: string): Rule {
  const colon = text.indexOf(":");
  const eq = text.indexOf("=");
  if (colon < 0 || eq < 0 || eq > colon || eq === 0) {
    throw new Error(`a rule is KEY=VALUE:REGEX, not ${JSON.stringify(text)}`);
  }
  return { key: text.slice(0, eq), value: text.slice(eq + 1, colon), pattern: new RegExp(text.slice(colon + 1)) };
}

/** Reconciles one namespace: the labels of matching rules present, the ones it set and no
 * longer wants absent. */
class NamespaceLabeller implements Reconciler {
  constructor(
    private readonly mirror: Mirror,
    private readonly api: KubeClient,
    private readonly rules: readonly Rule[],
  ) {}

  async reconcile(request: Request, info: ReconcileInfo): Promise<Result> {
    const ns = this.mirror.get(NAMESPACES, "", request.name);
    if (ns === undefined || ns.meta.deletionTimestamp !== undefined) return {}; // gone or going
    const want = new Map<string, string>();
    for (const rule of this.rules) {
      if (!want.has(rule.key) && rule.pattern.test(ns.name)) want.set(rule.key, rule.value);
    }
    const annotations =
      ((ns.object["metadata"] as { annotations?: Record<string, string> }).annotations ?? {});
    const owned: string[] = annotations[OWNED] ? (JSON.parse(annotations[OWNED]) as string[]) : [];
    const labels = ns.meta.labels;
    const patchLabels: Record<string, string | null> = {};
    for (const [key, value] of want) if (labels[key] !== value) patchLabels[key] = value;
    for (const key of owned) if (!want.has(key) && key in labels) patchLabels[key] = null;
    const ownedNow = JSON.stringify([...want.keys()].sort());
    const ownedChanged = ownedNow !== (annotations[OWNED] ?? "[]");
    if (Object.keys(patchLabels).length === 0 && !ownedChanged) return {};
    const patch = {
      metadata: {
        labels: patchLabels,
        annotations: { [OWNED]: want.size > 0 ? ownedNow : null },
        // Only if nobody changed it since the mirror saw it (else: retried on the new state).
        resourceVersion: ns.resourceVersion,
      },
    };
    info.span.setAttribute("steward.labels_patched", Object.keys(patchLabels).join(","));
    try {
      await this.api.request("PATCH", `/api/v1/namespaces/${request.name}`, patch, "application/merge-patch+json");
    } catch (err) {
      if (err instanceof ApiStatusError && err.status === 404) return {};
      if (err instanceof ApiStatusError && err.status === 409) return { requeue: true };
      throw err;
    }
    log.info(`labelled namespace ${request.name}: ${JSON.stringify(patchLabels)}`);
    return {};
  }
}

async function main(argv: string[]): Promise<number> {
  let values;
  try {
    values = parseArgs({
      args: argv,
      options: {
        rule: { type: "string", multiple: true, default: [] },
        informer: { type: "string", default: "127.0.0.1:50061" },
        manager: { type: "string" },
        kubeconfig: { type: "string" },
        name: { type: "string", default: "namespace-labeller" },
        standby: { type: "boolean", default: false },
        "tls-ca-file": { type: "string" },
        "tls-cert-file": { type: "string" },
        "tls-key-file": { type: "string" },
        "token-file": { type: "string" },
        "tls-server-name": { type: "string" },
        "insecure-plaintext": { type: "boolean" },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
    }).values;
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n\n${HELP}\n`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(`${HELP}\n`);
    return 0;
  }
  let rules: Rule[];
  try {
    rules = (values.rule ?? []).map(parseRule);
    if (rules.length === 0) throw new Error("at least one --rule is needed");
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n\n${HELP}\n`);
    return 2;
  }
  const env = clientSecurityFromEnv();
  let credentials;
  try {
    credentials = channelCredentials({
      caFile: values["tls-ca-file"] ?? env.caFile,
      certFile: values["tls-cert-file"] ?? env.certFile,
      keyFile: values["tls-key-file"] ?? env.keyFile,
      tokenFile: values["token-file"] ?? env.tokenFile,
      serverName: values["tls-server-name"] ?? env.serverName,
      insecurePlaintext: values["insecure-plaintext"] ?? env.insecurePlaintext,
    });
  } catch (err) {
    if (!(err instanceof SecurityConfigError)) throw err;
    process.stderr.write(`namespace-labeller: ${err.message}\n`);
    return 2;
  }
  const name = values.name ?? "namespace-labeller";
  const shutdownTracing = configureTracing(`steward-controller-${name}`);
  const api = new KubeClient(loadKubeconfig(values.kubeconfig), name);
  const controller = new ControllerBuilder(name)
    .for(NAMESPACES, labelsChanged)
    .withOptions({ credentials })
    .complete(values.informer ?? "127.0.0.1:50061", (mirror) => new NamespaceLabeller(mirror, api, rules));
  controller.fence(api); // api's writes are refused while this instance holds no lease
  const stop = new AbortController();
  process.on("SIGTERM", () => stop.abort());
  process.on("SIGINT", () => stop.abort());
  try {
    await controller.run({
      signal: stop.signal,
      ...(values.manager ? { manager: values.manager, session: { standby: values.standby ?? false } } : {}),
    });
  } catch (err) {
    process.stderr.write(`namespace-labeller: ${err instanceof Error ? err.message : String(err)}\n`);
    return err instanceof RegistrationRefusedError ? 3 : 1;
  } finally {
    api.close();
    await shutdownTracing().catch(() => undefined);
  }
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`namespace-labeller: ${String(err)}\n`);
    process.exit(1);
  },
);
