"""The legacy token cleaner's decisions (upstream's ``evaluateSATokens``), pure: which
auto-generated legacy tokens are kept, labelled invalid, or deleted, on what date.

Dates are the ``YYYY-MM-DD`` of the labels (UTC), compared as strings, as upstream
does. With ``period`` the clean-up period (``--legacy-service-account-token-clean-up-period``):

- nothing happens until the API server has tracked token use for a period: ``now`` must
  not be before the day after the tracking ConfigMap's ``since`` date, plus the period;
- a token Secret is a candidate when it was created more than a period ago, is not being
  deleted, has no ``kubernetes.io/legacy-token-last-used`` label or one (a well-formed
  date; a malformed one keeps it) earlier than ``now - period``, names a service account
  that exists (its UID too, when given) and lists it in ``secrets`` (so it was
  auto-generated), and no pod of its namespace uses it (volumes, env, envFrom, image
  pull secrets: :func:`pod_secret_names`);
- a candidate without a well-formed ``kubernetes.io/legacy-token-invalid-since`` label
  gets one, today's date; one whose label is earlier than ``now - period`` is deleted
  (resource version precondition); else it is kept.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

DATE_FORMAT = "%Y-%m-%d"
LAST_USED_LABEL = "kubernetes.io/legacy-token-last-used"
"""Set by kube-apiserver on the day a legacy token authenticates (``LastUsedLabelKey``)."""
INVALID_SINCE_LABEL = "kubernetes.io/legacy-token-invalid-since"
"""Set by the cleaner on a token it will delete (``InvalidSinceLabelKey``); kube-apiserver
refuses a token so labelled."""
TRACKING_CONFIGMAP = "kube-apiserver-legacy-service-account-token-tracking"
"""The kube-system ConfigMap saying since when kube-apiserver tracks token use."""
TRACKING_KEY = "since"
DEFAULT_PERIOD = timedelta(days=365)
"""``--legacy-service-account-token-clean-up-period``'s default."""
SYNC_INTERVAL = timedelta(hours=24)
"""How often every token is evaluated (upstream's ``DefaultCleanerSyncInterval``)."""


def parse_date(text: str | None) -> date | None:
    """A label's date, None when absent or malformed."""
    if not text:
        return None
    try:
        return datetime.strptime(text, DATE_FORMAT).date()
    except ValueError:
        return None


def format_date(when: datetime) -> str:
    return when.astimezone(UTC).strftime(DATE_FORMAT)


def tracked_long_enough(since: str, now: datetime, period: timedelta) -> bool:
    """Whether use has been tracked for a period: ``now`` not before 00:00 UTC of the day
    after ``since``, plus ``period``.

    Raises:
        ValueError: ``since`` is not a date.
    """
    day = datetime.strptime(since, DATE_FORMAT).replace(tzinfo=UTC) + timedelta(days=1)
    return not now < day + period


class Action(enum.Enum):
    KEEP = "keep"
    LABEL = "label"
    DELETE = "delete"


@dataclass(frozen=True)
class Verdict:
    """What to do with one token Secret, and why (for the log)."""

    action: Action
    reason: str
    invalid_since: str = ""
    """For LABEL: the date to write."""


def evaluate(
    secret: Mapping[str, Any],
    now: datetime,
    period: timedelta,
    *,
    listed_by_account: bool,
    mounted: bool,
) -> Verdict:
    """The verdict on one token Secret (metadata only is read) whose service account, as
    its annotations name it, exists and lists it (``listed_by_account``) and which a pod
    of its namespace uses, or not (``mounted``)."""
    meta = secret.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    created = _timestamp(meta.get("creationTimestamp"))
    if created is None or not created < now - period:
        return Verdict(Action.KEEP, "created within the period")
    if meta.get("deletionTimestamp"):
        return Verdict(Action.KEEP, "being deleted")
    preserve_used_on_or_after = format_date(now - period)
    if LAST_USED_LABEL in labels:
        last_used = labels[LAST_USED_LABEL]
        if parse_date(last_used) is None:
            return Verdict(Action.KEEP, f"malformed {LAST_USED_LABEL} {last_used!r}")
        if last_used >= preserve_used_on_or_after:
            return Verdict(Action.KEEP, f"used on {last_used}")
    if not listed_by_account:
        return Verdict(Action.KEEP, "not listed by an existing service account")
    if mounted:
        return Verdict(Action.KEEP, "used by a pod")
    invalid_since = labels.get(INVALID_SINCE_LABEL, "")
    if parse_date(invalid_since) is None:
        return Verdict(Action.LABEL, "unused for the period", format_date(now))
    if invalid_since >= preserve_used_on_or_after:
        return Verdict(Action.KEEP, f"invalid since {invalid_since}")
    return Verdict(Action.DELETE, f"invalid since {invalid_since}")


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _ref_name(ref: object, key: str = "name") -> str:
    return str((ref or {}).get(key) or "") if isinstance(ref, Mapping) else ""


def _container_secret_names(container: Mapping[str, Any]) -> Iterable[str]:
    for env_from in container.get("envFrom") or ():
        yield _ref_name((env_from or {}).get("secretRef"))
    for env in container.get("env") or ():
        source = (env or {}).get("valueFrom") or {}
        yield _ref_name(source.get("secretKeyRef"))


_VOLUME_REFS = (
    ("azureFile", "secretName"),
    ("cephfs", "secretRef"),
    ("cinder", "secretRef"),
    ("flexVolume", "secretRef"),
    ("rbd", "secretRef"),
    ("secret", "secretName"),
    ("scaleIO", "secretRef"),
    ("iscsi", "secretRef"),
    ("storageos", "secretRef"),
    ("csi", "nodePublishSecretRef"),
)
"""Volume sources naming a Secret: (source, field); a ``...Ref`` is an object with a
``name``, a ``secretName`` the name itself."""


def pod_secret_names(pod: Mapping[str, Any]) -> set[str]:
    """The Secrets a pod uses (upstream's ``VisitPodSecretNames``): image pull secrets,
    every container's (init and ephemeral too) ``envFrom`` and ``env`` references, and
    its volumes' (projected sources included)."""
    spec = pod.get("spec") or {}
    names: list[str] = [_ref_name(r) for r in spec.get("imagePullSecrets") or ()]
    for field in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(field) or ():
            names.extend(_container_secret_names(container or {}))
    for volume in spec.get("volumes") or ():
        volume = volume or {}
        for source, ref in _VOLUME_REFS:
            found = volume.get(source)
            if found is None:
                continue
            value = found.get(ref) if isinstance(found, Mapping) else None
            names.append(str(value or "") if ref == "secretName" else _ref_name(value))
        for item in (volume.get("projected") or {}).get("sources") or ():
            names.append(_ref_name((item or {}).get("secret")))
    return {n for n in names if n}


POD_FIELDS = (
    "spec.imagePullSecrets",
    "spec.containers.env",
    "spec.containers.envFrom",
    "spec.initContainers.env",
    "spec.initContainers.envFrom",
    "spec.ephemeralContainers.env",
    "spec.ephemeralContainers.envFrom",
    "spec.volumes",
)
"""What the cleaner reads of a pod: what :func:`pod_secret_names` looks at."""
