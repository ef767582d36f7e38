"""``steward deploy``: Steward's Kubernetes manifests, rendered from ``deploy/`` with
``kubectl kustomize``.

``deploy/base`` holds every service as a Deployment under its own ServiceAccount, bound to
its role of ``deploy/rbac``; ``deploy/overlays/local`` (one replica each, images
``steward-<service>:dev``) and ``deploy/overlays/production`` (two replicas each,
PodDisruptionBudgets, topology spread, standby controllers) adapt it, and the component
``deploy/components/jaeger`` adds Jaeger all-in-one and points every service's OTLP
exporter at it.

# Errors
:class:`DeployError` when kubectl is missing, the overlay is unknown, the checkout's
``deploy/`` directory cannot be found, or kustomize fails (its message is included).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OVERLAYS = ("local", "production")
"""The overlays under ``deploy/overlays/``."""

JAEGER_COMPONENT = "components/jaeger"
"""The component ``--with-jaeger`` adds, relative to ``deploy/``."""

BOOTSTRAP_TOKENS_COMPONENT = "components/bootstrap-tokens"
"""The component ``--with-bootstrap-tokens`` adds, relative to ``deploy/``: the
bootstrapsigner and tokencleaner controllers, off by default as upstream's."""


class DeployError(Exception):
    """Rendering failed; the message says why and what to do."""


def deploy_dir() -> Path:
    """The checkout's ``deploy/`` directory (``$STEWARD_REPO`` overrides the checkout).

    Raises:
        DeployError: no checkout with ``deploy/base`` was found.
    """
    from steward.cluster import binaries
    from steward.cluster.errors import ClusterError

    try:
        root = binaries.repo_root() / "deploy"
    except ClusterError as err:
        raise DeployError(str(err)) from err
    if not (root / "base" / "kustomization.yaml").is_file():
        raise DeployError(f"{root}/base/kustomization.yaml is missing; is this a Steward checkout?")
    return root


def find_kubectl() -> str:
    """kubectl next to this Python (the project's ``.venv/bin/kubectl``), else on ``PATH``.

    Raises:
        DeployError: neither has one.
    """
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("kubectl")
    if found is None:
        raise DeployError(
            "kubectl not found (it renders the manifests with its built-in kustomize): "
            "run `make venv` to install it into .venv/bin, or put kubectl on PATH"
        )
    return found


def render(
    overlay: str = "local",
    *,
    with_jaeger: bool = False,
    with_bootstrap_tokens: bool = False,
    kubectl: str | None = None,
    root: Path | None = None,
) -> str:
    """The manifests of ``deploy/overlays/<overlay>`` (plus the Jaeger component when
    ``with_jaeger``, the bootstrap-token controllers when ``with_bootstrap_tokens``) as
    one multi-document YAML string, ready for ``kubectl apply -f -``.

    Raises:
        DeployError: unknown overlay, no kubectl, no ``deploy/`` directory, or kustomize
            failed (its error output is in the message).
    """
    if overlay not in OVERLAYS:
        raise DeployError(f"unknown overlay {overlay!r}: expected one of {', '.join(OVERLAYS)}")
    base = root if root is not None else deploy_dir()
    tool = kubectl or find_kubectl()
    target = base / "overlays" / overlay
    with tempfile.TemporaryDirectory(prefix="steward-deploy-") as tmp:
        components = [
            c
            for c, wanted in (
                (JAEGER_COMPONENT, with_jaeger),
                (BOOTSTRAP_TOKENS_COMPONENT, with_bootstrap_tokens),
            )
            if wanted
        ]
        if components:
            # kustomize takes relative paths only: a throw-away kustomization naming the
            # overlay and the components from where they lie.
            rel = Path(os.path.relpath(base, tmp))
            (Path(tmp) / "kustomization.yaml").write_text(
                "apiVersion: kustomize.config.k8s.io/v1beta1\n"
                "kind: Kustomization\n"
                f"resources:\n  - {(rel / 'overlays' / overlay).as_posix()}\n"
                "components:\n" + "".join(f"  - {(rel / c).as_posix()}\n" for c in components)
            )
            target = Path(tmp)
        try:
            done = subprocess.run(
                [tool, "kustomize", str(target)],
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise DeployError(f"cannot run {tool} kustomize: {err}") from err
    if done.returncode != 0:
        raise DeployError(
            f"{tool} kustomize {target} failed (exit {done.returncode}): {done.stderr.strip()}"
        )
    return done.stdout


_DESCRIPTION = """\
Print Steward's Kubernetes manifests, rendered with `kubectl kustomize` from deploy/:
a namespace `steward` enforcing the restricted Pod Security Standard; the informer, the
manager and the Job, ReplicaSet, Deployment, Endpoints, EndpointSlice, DaemonSet and
HorizontalPodAutoscaler controllers as Deployments, each under its own ServiceAccount
bound to exactly its role of deploy/rbac (the informer: list/watch cluster-wide; the
manager: Leases in `steward` only; the Job controller: Jobs' status, pods, events; the
ReplicaSet controller: ReplicaSets' status, pods, events; the Deployment controller:
Deployments' status, ReplicaSets, events; the Endpoints controller: Endpoints, events;
the EndpointSlice controller: EndpointSlices, events; the DaemonSet controller:
DaemonSets' status, pods, ControllerRevisions, events; the HorizontalPodAutoscaler
controller: HPAs' status, the scale of their targets, the metrics APIs, events);
Services for the informer (50061) and the manager (50062, the leader only is ready), both
mutual TLS from the Secrets steward-<service>-tls (see deploy/README.md);
network policies (only controller pods reach the informer and the manager; egress to DNS
and the API server only); HTTP health probes, requests and limits, OTEL_* variables.

The ReplicaSet, Deployment, Endpoints, DaemonSet and HorizontalPodAutoscaler controllers
take every ReplicaSet, Deployment, Service's Endpoints, DaemonSet and HPA (these have no
spec.managedBy), the garbage collector and the namespace controller every object and
namespace: apply them only where kube-controller-manager runs without its own
(--controllers=*,-replicaset,-deployment,-endpoint,-daemonset,-horizontalpodautoscaling,
-garbagecollector,-namespace), or delete those seven Deployments. The EndpointSlice
controller writes only slices labelled with its --managed-by value; the manifests give it its own
(endpointslice-controller.steward.io), so it runs beside kube-controller-manager's
endpointslice-controller. Without that flag it writes upstream's value, in the place of
upstream's.

overlays:
  local        one replica each, images steward-<service>:dev (deploy/images/build.sh)
  production   two replicas each (managers elect a leader, controllers stand by),
               PodDisruptionBudgets, topology spread over nodes and zones
"""

_STATIC_DESCRIPTION = """\
Print (or write) the static pods of Steward's core: the informer, the manager and the
ReplicaSet and Deployment controllers, which the kubelet of each control-plane node then
keeps alive without any controller's help, so that no set of deleted pods can leave
Steward unable to recreate its own. In kube-system (like kubeadm's control plane), with
host networking (no Service, EndpointSlice, kube-proxy rule or DNS name on their path),
the same images, probes and restricted container security context as the Deployments,
and credentials from the node's disk: <host dir>/<component>/ holds kubeconfig (a
client certificate of the user steward:informer, steward:manager,
steward:controller:replicaset or steward:controller:deployment), ca.crt, and tls.crt and
tls.key (serving certificates naming the control-plane address and 127.0.0.1 for the
informer and the manager; client certificates of the user for the controllers), owned by
UID 65532, mode 0400. Host ports: informer 10361 (gRPC), manager 10362 (gRPC), metrics
10371-10374, health 10381-10384 on 127.0.0.1.

Apply the rest with `steward deploy render --control-plane ADDRESS`: the other
controllers as Deployments reaching the core at ADDRESS, and the core's users bound to
their roles.
"""

_STATIC_EPILOG = """\
examples:
  steward deploy static-pods --control-plane 10.0.0.10 --out /etc/kubernetes/manifests
  steward deploy render --overlay production --control-plane 10.0.0.10 | kubectl apply -f -
"""

_EPILOG = """\
examples:
  steward deploy render | kubectl apply --server-side -f -
  steward deploy render --overlay production --with-jaeger > steward.yaml
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``deploy`` (with ``render``) to the ``steward`` command's subcommands; run
    the parsed command with :func:`main`."""
    deploy = subparsers.add_parser(
        "deploy",
        help="render Steward's Kubernetes manifests (Deployments, RBAC, network policies)",
        description="Steward as pods: manifests from deploy/ (see `steward deploy render "
        "--help`). Images: deploy/images/build.sh.",
    )
    actions = deploy.add_subparsers(dest="deploy_action", required=True, metavar="ACTION")
    render_cmd = actions.add_parser(
        "render",
        help="print the manifests of an overlay as YAML",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    render_cmd.add_argument(
        "--overlay",
        choices=OVERLAYS,
        default="local",
        help="which overlay of deploy/overlays/ (default: %(default)s)",
    )
    render_cmd.add_argument(
        "--with-jaeger",
        action="store_true",
        help="add Jaeger all-in-one (deploy/components/jaeger) and send every service's "
        "spans to it (OTEL_EXPORTER_OTLP_ENDPOINT)",
    )
    render_cmd.add_argument(
        "--with-bootstrap-tokens",
        action="store_true",
        help="add the bootstrapsigner and tokencleaner controllers "
        "(deploy/components/bootstrap-tokens), off by default as kube-controller-manager's, "
        "and turn them on at the manager",
    )
    render_cmd.add_argument(
        "--control-plane",
        metavar="ADDRESS",
        help="render for a static core (see `steward deploy static-pods --help`): leave "
        "out the informer, the manager and the ReplicaSet and Deployment controllers, point "
        "the other controllers at ADDRESS (the control-plane nodes' address, an IP), and "
        "bind the core's users to their roles",
    )
    static_cmd = actions.add_parser(
        "static-pods",
        help="write the static pods of Steward's core for a control-plane node",
        description=_STATIC_DESCRIPTION,
        epilog=_STATIC_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    static_cmd.add_argument(
        "--control-plane",
        metavar="ADDRESS",
        required=True,
        help="the address the other controllers reach the core at (the serving "
        "certificates must name it)",
    )
    static_cmd.add_argument(
        "--overlay",
        choices=OVERLAYS,
        default="production",
        help="which overlay's images, resources and flags (default: %(default)s)",
    )
    static_cmd.add_argument(
        "--host-dir",
        default=None,
        help="where the credentials lie on the node, <dir>/<component>/ (default: /etc/steward)",
    )
    static_cmd.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write steward-<component>.yaml files into this directory (the kubelet's "
        "staticPodPath, e.g. /etc/kubernetes/manifests) instead of printing them",
    )


def render_static_core(
    overlay: str,
    *,
    control_plane: str,
    with_jaeger: bool = False,
    host_dir: str | None = None,
) -> tuple[str, dict[str, str]]:
    """For a cluster whose core runs as static pods (:mod:`steward.static_core`): the
    manifests to apply (the overlay without the core, its controllers pointed at
    ``control_plane``, the core's users bound to its roles) as YAML, and the static pods
    by file name, each YAML.

    Raises:
        DeployError: as :func:`render`, or ``control_plane`` is not an address.
    """
    import yaml

    from steward import static_core

    docs = [d for d in yaml.safe_load_all(render(overlay, with_jaeger=with_jaeger)) if d]
    try:
        applied = [
            *static_core.deployed(docs, control_plane=control_plane),
            *static_core.user_bindings(docs),
        ]
        pods = static_core.static_pods(docs, host_dir=host_dir or static_core.DEFAULT_HOST_DIR)
    except static_core.StaticCoreError as err:
        raise DeployError(str(err)) from err
    text = yaml.safe_dump_all(applied, sort_keys=False)
    return text, {name: yaml.safe_dump(pod, sort_keys=False) for name, pod in pods.items()}


def main(args: argparse.Namespace) -> int:
    """Run a parsed ``steward deploy`` command: 0, or 1 with one error line on stderr."""
    try:
        if args.deploy_action == "static-pods":
            _, pods = render_static_core(
                args.overlay, control_plane=args.control_plane, host_dir=args.host_dir
            )
            if args.out is None:
                sys.stdout.write("---\n".join(pods.values()))
            else:
                args.out.mkdir(parents=True, exist_ok=True)
                for name, text in pods.items():
                    (args.out / name).write_text(text)
                    print(args.out / name)
        elif args.control_plane:
            text, _ = render_static_core(
                args.overlay, control_plane=args.control_plane, with_jaeger=args.with_jaeger
            )
            sys.stdout.write(text)
        else:
            sys.stdout.write(
                render(
                    args.overlay,
                    with_jaeger=args.with_jaeger,
                    with_bootstrap_tokens=args.with_bootstrap_tokens,
                )
            )
    except (DeployError, OSError) as err:
        print(f"steward deploy: error: {err}", file=sys.stderr)
        return 1
    return 0
