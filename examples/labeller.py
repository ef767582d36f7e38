"""Example: copy ConfigMaps' label into an annotation (``python -m examples.labeller -h``)."""

import steward

LABEL, ANNOTATION = "steward.io/copy", "steward.io/copied"


async def reconcile(ctx: steward.Context, request: steward.Request) -> steward.Result:
    """The ConfigMap's annotation must equal its label (or be absent with it)."""
    obj = ctx.mirror.get(steward.CONFIGMAPS, request.namespace, request.name)
    have = (obj.object["metadata"].get("annotations") or {}).get(ANNOTATION) if obj else None
    if obj is None or (want := obj.meta.labels.get(LABEL)) == have:
        return steward.Result()  # deleted, or nothing to do
    # Only if nobody changed it since the mirror saw it (a conflict: the new state comes).
    patch = {
        "metadata": {"annotations": {ANNOTATION: want}, "resourceVersion": obj.resource_version}
    }
    configmaps = ctx.client(steward.CONFIGMAPS)
    try:
        await configmaps.patch(request.namespace, request.name, patch, patch_type="merge")
    except steward.ConflictError:
        return steward.Result(requeue=True)
    except steward.NotFoundError:
        pass  # deleted meanwhile
    return steward.Result()


LABELLER = (
    steward.ControllerBuilder("configmap-labeller")
    .for_(steward.CONFIGMAPS, steward.labels_changed)
    .describe(
        "Copies each ConfigMap's steward.io/copy label into its steward.io/copied annotation."
    )
    .complete(reconcile)
)

if __name__ == "__main__":
    raise SystemExit(steward.run(LABELLER))
