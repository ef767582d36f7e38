"""Example: copy ConfigMaps' label into an annotation (``python -m examples.labeller -h``)."""

import steward

CONFIGMAPS = steward.resource_type("", "v1", "configmaps")
LABEL, ANNOTATION = "steward.io/copy", "steward.io/copied"


async def reconcile(ctx: steward.Context, request: steward.Request) -> steward.Result:
    """The ConfigMap's annotation must equal its label (or be absent with it)."""
    obj = ctx.mirror.get(CONFIGMAPS, request.namespace, request.name)
    have = (obj.object["metadata"].get("annotations") or {}).get(ANNOTATION) if obj else None
    if obj is None or (want := obj.meta.labels.get(LABEL)) == have:
        return steward.Result()  # deleted, or nothing to do
    # Only if nobody changed it since the mirror saw it (a conflict: the new state comes).
    patch = {
        "metadata": {"annotations": {ANNOTATION: want}, "resourceVersion": obj.resource_version}
    }
    path = steward.api_path(CONFIGMAPS, request.namespace, request.name)
    try:
        await ctx.api.arequest("PATCH", path, patch, content_type="application/merge-patch+json")
    except steward.ConflictError:
        return steward.Result(requeue=True)
    except steward.NotFoundError:
        pass  # deleted meanwhile
    return steward.Result()


LABELLER = (
    steward.ControllerBuilder("configmap-labeller")
    .for_(CONFIGMAPS, steward.labels_changed, kind="ConfigMap")
    .describe(
        "Copies each ConfigMap's steward.io/copy label into its steward.io/copied annotation."
    )
    .complete(reconcile)
)

if __name__ == "__main__":
    raise SystemExit(steward.run(LABELLER))
