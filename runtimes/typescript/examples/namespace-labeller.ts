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
 *
 * The runtime's host ({@link run}) does the rest: the standard flags (`--help` lists them),
 * mutual TLS to the informer and the manager, tracing, the API client (fenced: no write
 * leaves an instance that does not hold its lease), health endpoints and SIGTERM.
 */

import {
  ApiStatusError,
  type KubeClient,
  type Mirror,
  type ReconcileInfo,
  type Reconciler,
  type Request,
  type Result,
  UsageError,
  labelsChanged,
  log,
  resourceType,
  run,
} from "@steward-dev/runtime";

const NAMESPACES = resourceType("", "v1", "namespaces");
const OWNED = "steward.dev/namespace-labeller-keys";

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

run({
  name: "namespace-labeller",
  description: `Labels namespaces by their names: with --rule 'team=payments:^pay-', every namespace whose
name matches ^pay- gets the label team=payments. When a namespace stops matching a rule
(say the rules changed), the label that rule set is removed; labels it did not set are
never touched. The first matching rule wins for a label key.`,
  flags: {
    rule: {
      type: "string",
      multiple: true,
      metavar: "KEY=VALUE:REGEX",
      help: "a rule (repeatable, at least one); REGEX is a JavaScript regex",
    },
  },
  setup(builder, flags) {
    let rules: Rule[];
    try {
      rules = flags.rule.map(parseRule);
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    if (rules.length === 0) throw new UsageError("at least one --rule is needed");
    builder.for(NAMESPACES, labelsChanged);
    return ({ mirror, api }) => new NamespaceLabeller(mirror, api, rules);
  },
});
