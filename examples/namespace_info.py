"""Tutorial: a ConfigMap ``namespace-info`` in every Namespace, an orphan adopted
(``python -m examples.namespace_info -h``)."""

import steward

NAME, LABELS = "namespace-info", {"steward.io/namespace-info": "true"}


async def reconcile(ctx: steward.Context, request: steward.Request) -> steward.Result:
    """Each Namespace controls one ConfigMap of ours: adopt one that matches, else create it."""
    ns = ctx.mirror.get(steward.NAMESPACES, "", request.name)
    if ns is None or ns.meta.HasField("deletion_timestamp"):
        return steward.Result()  # gone or going: its ConfigMaps go with it
    children = ctx.children(steward.CONFIGMAPS, events=ctx.event_recorder(NAME))
    candidates = [o.object for o in ctx.mirror.objects(steward.CONFIGMAPS, request.name)]
    owned = await children.claim(ns.object, candidates, {"matchLabels": LABELS})
    if owned or not ctx.expectations.satisfied(("", request.name)):
        return steward.Result()  # it exists, or our creation is on its way to the mirror
    meta = {"name": NAME, "namespace": request.name, "labels": LABELS}
    body = {"metadata": {**meta, "ownerReferences": [children.ref(ns.object)]}}
    outcome = await children.create_all(ns.object, [{**body, "data": {"namespace": ns.name}}])
    if outcome.errors:
        raise outcome.errors[0]  # retried with backoff; the Event says why
    return steward.Result()


def namespace_of_orphan(_: object, cm: steward.MirrorObject) -> list[steward.Request]:
    """An orphan ConfigMap queues its Namespace, which may adopt it."""
    return [] if cm.controller_owner() else [steward.Request("", cm.namespace)]


NAMESPACE_INFO = (
    steward.ControllerBuilder("namespace-info")
    .for_(steward.NAMESPACES)
    .owns(steward.CONFIGMAPS, expect=True)  # a ConfigMap's change queues its Namespace
    .watches(steward.CONFIGMAPS, namespace_of_orphan)
    .describe("Keeps a ConfigMap namespace-info in every Namespace, adopting an orphan.")
    .complete(reconcile)
)

if __name__ == "__main__":
    raise SystemExit(steward.run(NAMESPACE_INFO))
