"""Starting the controllers that hold the cluster's keys as the manifests describe them.

:class:`tests.deploy.harness.Launcher` stands in for what a pod gets from its surroundings
as far as Steward's own credentials go (a TLS Secret, a projected token for the audience
steward). Three controllers also mount what an operator puts in Secrets of the cluster's
keys (deploy/README.md, "Secrets"), and read the files of a pod's service account volume:

- ``steward-cluster-signing`` (``tls.crt``, ``tls.key``): the cluster's CA, what
  ``csrsigning`` signs with (kube-controller-manager's ``--cluster-signing-*-file``);
- ``steward-service-account-key`` (``sa.key``): the private half of kube-apiserver's
  ``--service-account-key-file``, what ``serviceaccount-token`` signs legacy tokens with;
- ``steward-root-ca`` (``ca.crt``): the CA bundle ``root-ca-cert-publisher`` publishes;
- the service account volume at ``/var/run/secrets/kubernetes.io/serviceaccount``
  (``token``, ``ca.crt``, ``namespace``): mounted by the kubelet unless the pod says
  ``automountServiceAccountToken: false``, or a projected volume of the pod's own there
  (the publisher's: a token for the API server, ``ca.crt`` from ``steward-root-ca``, the
  namespace from the downward API).

:class:`KeyedLauncher` makes those locally from the local control plane's state directory
(``pki/ca.crt``, ``pki/ca.key``, ``pki/sa.key``: the files its kube-apiserver and
kube-controller-manager are given), so the signed certificates and tokens are the ones
this cluster trusts.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.deploy.harness import Doc, Launcher, Pod, Process, container, field_ref

SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where the kubelet mounts a pod's service account volume."""

CLUSTER_KEYS: dict[str, dict[str, str]] = {
    "steward-cluster-signing": {"tls.crt": "ca.crt", "tls.key": "ca.key"},
    "steward-service-account-key": {"sa.key": "sa.key"},
    "steward-root-ca": {"ca.crt": "ca.crt"},
}
"""Secret of the cluster's keys → its keys → the file of the cluster's ``pki`` holding each."""


@dataclass
class KeyedLauncher(Launcher):
    """A :class:`Launcher` that also makes the Secrets of the cluster's keys, projected
    ``secret`` items and ``downwardAPI`` sources, and the kubelet's service account
    volume."""

    _pod: Pod = field(default_factory=lambda: Pod(name="none"), init=False, repr=False)
    """The pod of the process being prepared (for the downward API)."""

    def prepare(
        self,
        deployment_name: str,
        kubeconfig: Path,
        pod: Pod | None = None,
        service_account: str | None = None,
    ) -> Process:
        pod = pod or Pod(name=f"{deployment_name}-{uuid.uuid4().hex[:5]}")
        self._pod = pod
        return super().prepare(deployment_name, kubeconfig, pod, service_account)

    def _volumes(self, deployment: Doc, service_account: str, into: Path) -> dict[str, Path]:
        spec = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in container(deployment).get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            local = into / mount["name"]
            assert "subPath" not in mount, f"{mount}: subPath is not supported here"
            if "secret" in volume:
                source = volume["secret"]
                self._keyed_secret(deployment, source, source["secretName"], local)
            elif "projected" in volume:
                for source in volume["projected"]["sources"]:
                    if "secret" in source:
                        secret = source["secret"]
                        self._keyed_secret(deployment, secret, secret["name"], local)
                    elif "serviceAccountToken" in source:
                        self._token(source["serviceAccountToken"], service_account, local)
                    elif "downwardAPI" in source:
                        self._downward(source["downwardAPI"], local)
                    else:
                        raise AssertionError(f"no local equivalent for the source {source}")
            else:
                continue  # emptyDir and the like: nothing a pod gets from its surroundings
            mounts[mount["mountPath"]] = local
        if SERVICE_ACCOUNT_MOUNT not in mounts and spec.get("automountServiceAccountToken", True):
            local = into / "kube-api-access"
            self._token({"path": "token", "expirationSeconds": 3607}, service_account, local)
            shutil.copyfile(self.cluster.directory / "pki" / "ca.crt", local / "ca.crt")
            (local / "namespace").write_text(self._pod.namespace)
            mounts[SERVICE_ACCOUNT_MOUNT] = local
        return mounts

    def _keyed_secret(self, deployment: Doc, source: Doc, name: str, into: Path) -> None:
        """A Secret of the cluster's keys from the cluster's files (only the ``items``
        given, at their paths, when it names some); any other as the harness makes it."""
        keys = CLUSTER_KEYS.get(name)
        if keys is None:
            self._secret(deployment, source, name, into)
            return
        into.mkdir(parents=True, exist_ok=True)
        items = source.get("items") or [{"key": k, "path": k} for k in keys]
        for item in items:
            assert item["key"] in keys, f"Secret {name} has no key {item['key']}"
            target = into / item["path"]
            shutil.copyfile(self.cluster.directory / "pki" / keys[item["key"]], target)
            target.chmod(0o600)

    def _downward(self, source: Doc, into: Path) -> None:
        into.mkdir(parents=True, exist_ok=True)
        for item in source.get("items") or []:
            assert "fieldRef" in item, f"no local equivalent for the downward API item {item}"
            (into / item["path"]).write_text(field_ref(item["fieldRef"]["fieldPath"], self._pod))


__all__ = ["CLUSTER_KEYS", "SERVICE_ACCOUNT_MOUNT", "KeyedLauncher"]
