"""Real nodes of the local control plane: containerd, runc and a kubelet per node, one
kube-proxy and one CoreDNS for the cluster, all on this machine beside kwok's nodes.

A real node ``steward-node-<i>`` keeps everything of its own under
``<state dir>/nodes/<name>/``: containerd's root, state and socket, runc's root, the
kubelet's root, certificates and pod logs, the CNI configuration and its IP allocations.
Each node has a bridge of its own (``stw<digest><i>``) with a /24 of :data:`POD_CIDR`
and is registered with the taint and label :data:`REAL_NODE_LABEL`, so the scheduler
puts only pods that ask for a real node there (Steward's own pods do) and every other
workload stays on kwok's nodes. kwok manages only the nodes annotated as its own.

# Identities
Each kubelet has a client certificate ``system:node:<name>`` in ``system:nodes`` from the
cluster CA (kube-apiserver runs the Node authorizer and the NodeRestriction admission
plugin) and serves its API with a certificate of the same CA; it authenticates callers by
certificate only and authorizes them by SubjectAccessReview, and kube-apiserver calls it
with a client certificate of its own. With the metrics pipeline, metrics-server scrapes
its ``/metrics/resource`` the same way: the cluster CA to trust the serving certificate
(which names the node address), a client certificate of that CA, ``nodes/metrics``
granted by RBAC. kube-proxy is ``system:kube-proxy``, CoreDNS
``steward:coredns``, each bound to no more than it needs.

# Pod and Service traffic
All nodes share the machine's network namespace: each bridge's /24 is a connected route,
so pods reach pods of every node directly. The bridge plugin does not masquerade
(its ``ipMasq`` would rewrite pod-to-pod traffic between two bridges to the gateway's
address, so a pod would not see its peer's IP); one rule of the cluster's own
(:func:`cluster_rules`) masquerades what leaves :data:`POD_CIDR` for anywhere else.
Traffic still addressed to the Service range once kube-proxy's rules had their turn
(an address or a port no Service has, or no longer has) is refused by two filter rules
of the cluster's (``OUTPUT`` and ``FORWARD``, :func:`cluster_rules`) instead of leaving
by the default route, where this machine's network may answer any connection (a deleted
Service would still be "reachable"). A route could not do it: the machine's own
connections are routed before kube-proxy's ``OUTPUT`` rules rewrite them. The one
kube-proxy (iptables mode, node ``steward-node-0``) serves every node: traffic policies
``Local`` cannot tell the nodes apart.

# The machine
Only one cluster with real nodes runs on a machine at a time (kube-proxy's chains are
global); a second is refused with the first one's directory. What a real node changes on
the machine is recorded in ``<state dir>/host-footprint.json`` before it is changed, so
that ``down`` (from any process) puts it back: the sysctls kubelet, kube-proxy and the
CNI bridge set, the directories they create outside the state directory, the cgroups
under :data:`CGROUP_PARENT`, the mounts under the nodes' directories, the bridges,
kube-proxy's rules (``kube-proxy --cleanup``) and the CNI plugin's rules (matched by the
network's own name) and the rules of :func:`cluster_rules`. Nothing else is touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from steward.cluster.errors import ClusterError
from steward.cluster.progress import Progress

POD_CIDR = "10.245.0.0/16"
"""The real nodes' pods: node ``i`` has ``10.245.<i>.0/24`` (kwok's pods are in
10.244.0.0/16)."""

CLUSTER_DOMAIN = "cluster.local"

REAL_NODE_LABEL = "node.steward.io/real"
"""Label and taint (``NoSchedule``) of every real node."""

SANDBOX_IMAGE = "registry.k8s.io/pause:3.10.2"
"""The pod sandbox image containerd runs (built locally; never pulled)."""

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "steward"
"""Every real node's pods live in ``/steward/<node>`` of each cgroup hierarchy."""

SYSCTLS = (
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.forwarding",
    "net.ipv4.conf.all.route_localnet",
    "net.ipv6.conf.all.forwarding",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
)
"""The sysctls kubelet, kube-proxy and the CNI bridge plugin may change; recorded before
the first node starts and put back by ``down``."""

HOST_DIRS = (
    "/var/log/containers",
    "/var/lib/cni",
    "/run/containerd",
    "/var/lib/kubelet",
    "/etc/cni",
    "/opt/cni",
)
"""Directories outside the state directory that kubelet, containerd or the CNI plugins
may create; ``down`` removes those that did not exist before, and our entries in those
that did."""

LOCK = Path("/run/steward-real-nodes.json")
"""Names the state directory of the cluster whose real nodes run on this machine."""

RUNTIME_ROOT = Path("/run/steward-nodes")
"""The real nodes' socket directories (``<digest>-<i>``), removed by ``down``."""

CONTAINERD = "/usr/bin/containerd"
RUNC = "/usr/sbin/runc"
CNI_BIN = Path("/usr/lib/cni")


class RealNodeError(ClusterError):
    """A real node could not be started or cleaned up."""


@dataclass
class RealNode:
    """One real node: its name, directory, pod range, bridge and ports."""

    name: str
    index: int
    directory: Path
    pod_cidr: str
    bridge: str
    network: str
    kubelet_port: int
    kubelet_healthz_port: int
    runtime_dir: Path
    """Where containerd's sockets and the kubelet's root are: a short path under
    :data:`RUNTIME_ROOT`, since a Unix socket's path may not exceed 104 bytes and a state
    directory can be deep. The kubelet keeps only volumes there (Secrets and tokens are
    tmpfs anyway); images, container file systems and logs stay in the node's directory."""

    @property
    def containerd_socket(self) -> Path:
        return self.runtime_dir / "containerd.sock"

    @property
    def containerd_root(self) -> Path:
        return self.directory / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.directory / "containerd" / "state"

    @property
    def kubelet_root(self) -> Path:
        # The kubelet binds Unix sockets below its root (pods-api/, plugins_registry/…):
        # under the short runtime directory, however deep the state directory is.
        return self.runtime_dir / "kubelet"

    @property
    def cgroup(self) -> str:
        return f"/{CGROUP_PARENT}/{self.name}"

    @property
    def static_pods(self) -> Path:
        """The kubelet's ``staticPodPath``: the pods it runs from files, without the API
        server (Steward's static core, :mod:`steward.static_core`)."""
        return self.directory / "manifests"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["directory"] = str(self.directory)
        data["runtime_dir"] = str(self.runtime_dir)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RealNode:
        return cls(
            **{
                **data,
                "directory": Path(data["directory"]),
                "runtime_dir": Path(data["runtime_dir"]),
            }
        )


def plan(state_dir: Path, count: int, ports: Iterator[int]) -> list[RealNode]:
    """The real nodes of the cluster in ``state_dir``: names, ranges, bridges, ports."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:6]
    net = ipaddress.ip_network(POD_CIDR)
    subnets = net.subnets(new_prefix=24)
    nodes = []
    for i in range(count):
        name = f"steward-node-{i}"
        nodes.append(
            RealNode(
                name=name,
                index=i,
                directory=state_dir / "nodes" / name,
                runtime_dir=RUNTIME_ROOT / f"{digest}-{i}",
                pod_cidr=str(next(subnets)),
                bridge=f"stw{digest}{i}"[:15],
                network=f"steward-{digest}-{i}",
                kubelet_port=next(ports),
                kubelet_healthz_port=next(ports),
            )
        )
    return nodes


# ----------------------------------------------------------------- the machine's state


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctls(names: Iterable[str] = SYSCTLS) -> dict[str, str]:
    """The current value of each sysctl in ``names`` that this kernel has."""
    values = {}
    for name in names:
        with contextlib.suppress(OSError):
            values[name] = _sysctl_path(name).read_text().strip()
    return values


def iptables_rules() -> dict[str, list[str]]:
    """``iptables -S`` per table (IPv4), for comparing the machine before and after."""
    rules = {}
    for table in ("filter", "nat", "mangle"):
        done = subprocess.run(
            ["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True, check=False
        )
        rules[table] = done.stdout.splitlines() if done.returncode == 0 else []
    return rules


def links() -> list[str]:
    """Names of the machine's network interfaces."""
    return sorted(p.name for p in Path("/sys/class/net").iterdir())


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first."""
    prefix = str(root.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


@dataclass
class HostFootprint:
    """What the real nodes may change on the machine, as it was before they started."""

    sysctls: dict[str, str] = field(default_factory=dict)
    existing_dirs: list[str] = field(default_factory=list)
    cgroup_parent_existed: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    bridges: list[str] = field(default_factory=list)
    iptables: dict[str, list[str]] = field(default_factory=dict)
    state_dir: str = ""
    rules: list[list[str]] = field(default_factory=list)
    """The rules ``up`` appends (:func:`cluster_rules`: table, chain, match and target),
    deleted by ``down``."""

    @classmethod
    def take(cls, state_dir: Path, nodes: list[RealNode]) -> HostFootprint:
        return cls(
            sysctls=read_sysctls(),
            existing_dirs=[d for d in HOST_DIRS if Path(d).exists()],
            cgroup_parent_existed=[str(h) for h in _hierarchies() if (h / CGROUP_PARENT).exists()],
            networks=[n.network for n in nodes],
            bridges=[n.bridge for n in nodes],
            iptables=iptables_rules(),
            state_dir=str(state_dir),
        )

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> HostFootprint | None:
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None


def _hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, the named systemd one, unified)."""
    if not CGROUP_ROOT.is_dir():
        return []
    return sorted(p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink())


def claim_machine(state_dir: Path) -> None:
    """Record that this cluster's real nodes run here, or refuse if another's do."""
    try:
        other = json.loads(LOCK.read_text())
    except (FileNotFoundError, ValueError):
        other = None
    if (
        other
        and other.get("state_dir") != str(state_dir)
        and Path(other["state_dir"], "state.json").exists()
    ):
        raise RealNodeError(
            "another local cluster runs real nodes on this machine "
            f"({other['state_dir']}); only one can (kube-proxy's rules are global): "
            "stop it with `steward cluster down` first"
        )
    LOCK.write_text(json.dumps({"state_dir": str(state_dir), "pid": os.getpid()}) + "\n")


def release_machine(state_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError, ValueError):
        if json.loads(LOCK.read_text()).get("state_dir") == str(state_dir):
            LOCK.unlink()


# ------------------------------------------------------------------ configuration files


def containerd_config(node: RealNode) -> str:
    """containerd's configuration (version 2): everything under the node's directory."""
    d = node.directory
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    lines = [
        "version = 2",
        f'root = "{node.containerd_root}"',
        f'state = "{node.containerd_state}"',
        "oom_score = 0",
        "[grpc]",
        f'  address = "{node.containerd_socket}"',
        "[ttrpc]",
        f'  address = "{node.containerd_socket}.ttrpc"',
        "[metrics]",
        '  address = ""',
        '[plugins."io.containerd.internal.v1.opt"]',
        f'  path = "{d / "containerd" / "opt"}"',
        f"[{cri}]",
        f'  sandbox_image = "{SANDBOX_IMAGE}"',
        # This VM has no CAP_SYS_RESOURCE: runc could not lower oom_score_adj otherwise.
        "  restrict_oom_score_adj = true",
        "  netns_mounts_under_state_dir = true",
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "  enable_selinux = false",
        "  disable_apparmor = true",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        f'  BinaryName = "{RUNC}"',
        f'  Root = "{d / "runc"}"',
        "  SystemdCgroup = false",
        # Images are imported, never pulled: every registry (those named, and any other
        # through _default) is loopback's discard port, refused at once, so a pull of a
        # missing image fails here instead of reaching for the network.
        f"[{cri}.registry]",
        f'  config_path = "{d / "containerd" / "certs.d"}"',
        f"[{cri}.cni]",
        f'  bin_dir = "{CNI_BIN}"',
        f'  conf_dir = "{d / "cni" / "net.d"}"',
        "  max_conf_num = 1",
    ]
    return "\n".join(lines) + "\n"


NO_REGISTRY = "http://127.0.0.1:9"
"""Where the nodes' containerd looks for any registry: nothing listens there."""

REGISTRY_HOSTS = ("_default", "docker.io", "registry.k8s.io", "gcr.io", "quay.io", "ghcr.io")
"""Registries given :data:`NO_REGISTRY` by name (``_default`` covers the rest where
containerd reads it)."""


def registry_hosts(node: RealNode) -> None:
    """Write the node's ``hosts.toml`` files (containerd's registry host configuration)."""
    for host in REGISTRY_HOSTS:
        directory = node.directory / "containerd" / "certs.d" / host
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "hosts.toml").write_text(
            f'server = "{NO_REGISTRY}"\n\n'
            f'[host."{NO_REGISTRY}"]\n  capabilities = ["pull", "resolve"]\n'
        )


def cni_config(node: RealNode) -> dict[str, Any]:
    """One bridge network with host-local addresses of the node's /24."""
    return {
        "cniVersion": "1.0.0",
        "name": node.network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": True,
                # Not ipMasq: pod-to-pod traffic between bridges keeps its source
                # (cluster_rules masquerades the rest).
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node.directory / "cni" / "ipam"),
                },
            }
        ],
    }


def cluster_rules(state_dir: Path, *, service_cidr: str) -> list[list[str]]:
    """The rules the cluster appends (table, chain, then as ``iptables -A`` takes the
    rest), each commented with the cluster's digest: the masquerade of what leaves
    :data:`POD_CIDR` for anywhere else, and the refusal (filter ``OUTPUT`` and
    ``FORWARD``) of what is still addressed to ``service_cidr`` after kube-proxy's
    rules."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:6]
    tag = f"steward-{digest}"
    egress = ["-s", POD_CIDR, "!", "-d", POD_CIDR]
    masquerade = ["-m", "comment", "--comment", f"{tag}: pod egress", "-j", "MASQUERADE"]
    refuse = [
        "-d",
        service_cidr,
        "-m",
        "comment",
        "--comment",
        f"{tag}: no Service here",
        "-j",
        "REJECT",
    ]
    return [
        ["nat", "POSTROUTING", *egress, *masquerade],
        ["filter", "OUTPUT", *refuse],
        ["filter", "FORWARD", *refuse],
    ]


def add_cluster_rules(footprint: HostFootprint, rules: list[list[str]], save: Path) -> None:
    """Append ``rules`` (:func:`cluster_rules`) where absent, each recorded in
    ``footprint`` (saved to ``save``) before it is added, so that ``down`` deletes
    exactly them."""
    for rule in rules:
        if rule not in footprint.rules:
            footprint.rules.append(rule)
            footprint.save(save)
        table, *spec = rule
        check = subprocess.run(["iptables", "-w", "-t", table, "-C", *spec], capture_output=True)
        if check.returncode == 0:
            continue
        done = subprocess.run(
            ["iptables", "-w", "-t", table, "-A", *spec], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RealNodeError(f"iptables -t {table} -A {' '.join(spec)}: {done.stderr.strip()}")


def remove_cluster_rules(footprint: HostFootprint) -> None:
    """Delete what :func:`add_cluster_rules` added (whatever of it is still there)."""
    for table, *spec in footprint.rules:
        for _ in range(5):  # each -D deletes one copy
            done = subprocess.run(["iptables", "-w", "-t", table, "-D", *spec], capture_output=True)
            if done.returncode != 0:
                break


def kubelet_config(
    node: RealNode,
    *,
    node_ip: str,
    ca: Path,
    serving: tuple[Path, Path],
    tainted: bool = True,
    rotate: bool = False,
) -> dict[str, Any]:
    """The KubeletConfiguration of ``node``; ``tainted``: registered with the taint
    :data:`REAL_NODE_LABEL` (``NoSchedule``), so only pods that tolerate it run there;
    ``rotate``: its client certificate renewed through CertificateSigningRequests."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": node.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.kubelet_healthz_port,
        "tlsCertFile": str(serving[0]),
        "tlsPrivateKeyFile": str(serving[1]),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup,
        # Kubernetes 1.37 refuses cgroup v1 unless told otherwise; these hosts have it.
        "failCgroupV1": False,
        "failSwapOn": False,
        "podCIDR": node.pod_cidr,
        "staticPodPath": str(node.static_pods),
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [node_ip],
        "resolvConf": "",
        "podLogsDir": str(node.directory / "pod-logs"),
        "makeIPTablesUtilChains": False,
        "registerNode": True,
        "registerWithTaints": (
            [{"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}] if tainted else []
        ),
        "maxPods": 110,
        "serializeImagePulls": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "enforceNodeAllocatable": ["pods"],
        "rotateCertificates": rotate,
        "serverTLSBootstrap": False,
        "shutdownGracePeriod": "0s",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
    }


def kube_proxy_config(
    *, kubeconfig: Path, node: RealNode, healthz_port: int, metrics_port: int
) -> dict[str, Any]:
    """kube-proxy in iptables mode, changing no sysctl it can leave alone."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name,
        "mode": "iptables",
        "clusterCIDR": POD_CIDR,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        # 0: leave nf_conntrack_max and the TCP timeouts as they are.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        # NodePorts on loopback would need route_localnet.
        "iptables": {"localhostNodePorts": False},
    }


def corefile(*, node_ip: str, kubeconfig: Path, health_port: int, ready_port: int) -> str:
    """CoreDNS answering the cluster's names on the node address (the kubelets'
    ``clusterDNS``); every other name is refused (this machine has no upstream DNS)."""
    return (
        f"{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{\n"
        f"    bind {node_ip}\n"
        "    errors\n"
        f"    health 127.0.0.1:{health_port}\n"
        f"    ready 127.0.0.1:{ready_port}\n"
        f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {kubeconfig}\n"
        "        pods insecure\n"
        "        fallthrough in-addr.arpa ip6.arpa\n"
        "    }\n"
        "    cache 5\n"
        "}\n"
        ".:53 {\n"
        f"    bind {node_ip}\n"
        "    errors\n"
        "    template ANY ANY {\n"
        "        rcode REFUSED\n"
        "    }\n"
        "}\n"
    )


def write_node_files(node: RealNode) -> Path:
    """Create the node's directories and its containerd and CNI configuration; return
    containerd's configuration file."""
    for sub in ("containerd", "runc", "pod-logs", "cni/net.d", "cni/ipam", "pki", "manifests"):
        (node.directory / sub).mkdir(parents=True, exist_ok=True)
    conf = node.directory / "containerd" / "config.toml"
    conf.write_text(containerd_config(node))
    registry_hosts(node)
    (node.directory / "cni" / "net.d" / "10-steward.conflist").write_text(
        json.dumps(cni_config(node), indent=2) + "\n"
    )
    return conf


def make_cgroups(node: RealNode) -> None:
    """Create the node's cgroup in every hierarchy; cpuset needs its CPUs and memory
    nodes filled in from the parent before a process may join a child."""
    for hierarchy in _hierarchies():
        parent = hierarchy
        for part in node.cgroup.strip("/").split("/"):
            path = parent / part
            path.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (path / knob).exists() and not (path / knob).read_text().strip():
                    (path / knob).write_text((parent / knob).read_text())
            parent = path


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def wait_for_socket(socket: Path, ctr: str, timeout: float, alive: Any) -> None:
    started = time.monotonic()
    while True:
        done = subprocess.run(
            [ctr, "--address", str(socket), "version"], capture_output=True, check=False
        )
        if done.returncode == 0:
            return
        if not alive():
            raise RealNodeError(f"containerd exited during start-up ({socket})")
        if time.monotonic() - started > timeout:
            raise RealNodeError(f"containerd did not answer on {socket} in {timeout:.0f}s")
        time.sleep(0.2)


def import_images(node: RealNode, archive: Path, out: Progress) -> None:
    """Import an OCI image archive into the node's containerd (namespace ``k8s.io``)."""
    started = time.monotonic()
    done = subprocess.run(
        [
            "ctr",
            "--address",
            str(node.containerd_socket),
            "-n",
            "k8s.io",
            "images",
            "import",
            str(archive),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RealNodeError(
            f"ctr images import {archive} into {node.name} failed: {done.stderr.strip()}"
        )
    out.say(f"{node.name}: images of {archive.name} imported in {time.monotonic() - started:.1f}s")


# ------------------------------------------------------------------------------ down


def _our_processes(nodes: list[RealNode]) -> list[int]:
    """Pids of processes left from the nodes: containerd's shims and what runs in the
    containers (found by the node's socket or directory in their command line), newest
    first."""
    marks = [str(n.directory) for n in nodes] + [str(n.runtime_dir) for n in nodes]
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(m in cmdline for m in marks):
            found.append(int(proc.name))
    return sorted(found, reverse=True)


def _pids_in_cgroups(nodes: list[RealNode]) -> list[int]:
    pids: set[int] = set()
    for hierarchy in _hierarchies():
        for node in nodes:
            base = hierarchy / node.cgroup.strip("/")
            if not base.is_dir():
                continue
            for procs in base.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids.update(int(x) for x in procs.read_text().split())
    return sorted(pids)


def kill_leftovers(nodes: list[RealNode]) -> int:
    """SIGKILL every process still in the nodes' cgroups or started for them (shims)."""
    killed = 0
    for _ in range(50):
        pids = set(_pids_in_cgroups(nodes)) | set(_our_processes(nodes))
        pids.discard(os.getpid())
        if not pids:
            return killed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    left = sorted(set(_pids_in_cgroups(nodes)) | set(_our_processes(nodes)))
    raise RealNodeError(f"processes of the real nodes would not die: {left}")


def unmount_all(root: Path) -> None:
    """Unmount everything mounted at or below ``root``, deepest first."""
    for _ in range(5):
        points = mounts_under(root)
        if not points:
            return
        for point in points:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    left = mounts_under(root)
    if left:
        raise RealNodeError(f"could not unmount: {left}")


def remove_cgroups(nodes: list[RealNode], footprint: HostFootprint) -> None:
    """Remove the nodes' cgroups (deepest first) and the parent if we made it."""
    for hierarchy in _hierarchies():
        for node in nodes:
            base = hierarchy / node.cgroup.strip("/")
            if not base.is_dir():
                continue
            dirs = sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for path in [*dirs, base]:
                with contextlib.suppress(OSError):
                    path.rmdir()
        parent = hierarchy / CGROUP_PARENT
        if str(hierarchy) not in footprint.cgroup_parent_existed and parent.is_dir():
            with contextlib.suppress(OSError):
                parent.rmdir()


def remove_cni_rules(networks: Iterable[str]) -> None:
    """Delete the bridge plugin's masquerade rules and chains of our networks only (each
    rule carries ``name: "<network>"`` in its comment)."""
    names = [f'name: \\"{n}\\"' for n in networks] + [f'name: "{n}"' for n in networks]
    listing = subprocess.run(
        ["iptables", "-w", "-t", "nat", "-S"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    chains: set[str] = set()
    for rule in listing:
        if rule.startswith("-A ") and any(n in rule for n in names):
            match = re.search(r"-j (CNI-[0-9a-f]+)", rule)
            if match:
                chains.add(match.group(1))
            args = rule[3:].split(" ", 1)
            subprocess.run(
                ["sh", "-c", f"iptables -w -t nat -D {args[0]} {args[1]}"],
                capture_output=True,
                check=False,
            )
    for chain in chains:
        subprocess.run(["iptables", "-w", "-t", "nat", "-F", chain], capture_output=True)
        subprocess.run(["iptables", "-w", "-t", "nat", "-X", chain], capture_output=True)


OWN_CHAINS = re.compile(r"^(KUBE-|CNI-)")
"""Chains kubelet, kube-proxy and the CNI plugins create."""


def remove_new_rules(before: dict[str, list[str]]) -> None:
    """Delete the rules and chains that appeared since ``before`` and belong to
    kube-proxy, kubelet or the CNI plugins (a chain named ``KUBE-*`` or ``CNI-*``, or a
    rule in one or jumping to one); every other rule stays as it is."""
    for table, old in before.items():
        now = iptables_rules().get(table, [])
        known = set(old)
        new_chains = [
            line.split()[1]
            for line in now
            if line.startswith("-N ") and line not in known and OWN_CHAINS.match(line.split()[1])
        ]
        for line in now:
            if not line.startswith("-A ") or line in known:
                continue
            parts = line.split()
            chain = parts[1]
            target = parts[parts.index("-j") + 1] if "-j" in parts else ""
            if OWN_CHAINS.match(chain) or OWN_CHAINS.match(target):
                subprocess.run(
                    ["sh", "-c", f"iptables -w -t {table} -D {line[3:]}"],
                    capture_output=True,
                    check=False,
                )
        for chain in new_chains:
            subprocess.run(["iptables", "-w", "-t", table, "-F", chain], capture_output=True)
        for chain in new_chains:
            subprocess.run(["iptables", "-w", "-t", table, "-X", chain], capture_output=True)


def restore_host(
    nodes: list[RealNode],
    footprint: HostFootprint,
    *,
    kube_proxy: Path | None,
    out: Progress,
) -> list[str]:
    """Put the machine back as :class:`HostFootprint` recorded it, after every process of
    the nodes stopped. Returns what could not be undone (empty when all was)."""
    problems: list[str] = []
    killed = kill_leftovers(nodes)
    if killed:
        out.say(f"stopped {killed} processes left by the real nodes' containers")
    for node in nodes:
        for root in (node.directory, node.runtime_dir):
            try:
                unmount_all(root)
            except RealNodeError as err:
                problems.append(str(err))
        shutil.rmtree(node.runtime_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        RUNTIME_ROOT.rmdir()  # only when no other cluster's node is left in it
    remove_cgroups(nodes, footprint)
    if kube_proxy is not None:
        subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, check=False)
    remove_cni_rules(footprint.networks)
    remove_cluster_rules(footprint)
    if footprint.iptables:
        remove_new_rules(footprint.iptables)
    for bridge in footprint.bridges:
        if Path("/sys/class/net", bridge).exists():
            subprocess.run(["ip", "link", "delete", bridge], capture_output=True, check=False)
    for name, value in footprint.sysctls.items():
        path = _sysctl_path(name)
        with contextlib.suppress(OSError):
            if path.read_text().strip() != value:
                path.write_text(value + "\n")
    marks = [str(n.directory) for n in nodes] + footprint.networks
    for directory in HOST_DIRS:
        path = Path(directory)
        if not path.exists():
            continue
        if directory not in footprint.existing_dirs:
            shutil.rmtree(path, ignore_errors=True)
            continue
        # Only what points into our nodes or is named after our networks.
        for entry in path.rglob("*"):
            target = os.readlink(entry) if entry.is_symlink() else ""
            if any(m in target or m in entry.name for m in marks):
                with contextlib.suppress(OSError):
                    entry.unlink()
    changed = {
        k: v for k, v in read_sysctls(footprint.sysctls).items() if footprint.sysctls[k] != v
    }
    if changed:
        problems.append(f"sysctls not restored: {changed}")
    if footprint.iptables:
        added = {
            table: [r for r in rules if r not in footprint.iptables.get(table, [])]
            for table, rules in iptables_rules().items()
        }
        added = {t: r for t, r in added.items() if r}
        if added:
            problems.append(f"iptables rules left: {added}")
    left_links = [b for b in footprint.bridges if Path("/sys/class/net", b).exists()]
    if left_links:
        problems.append(f"bridges not removed: {left_links}")
    return problems


def pods_on(api: Any, nodes: list[RealNode]) -> list[tuple[str, str]]:
    """(namespace, name) of the pods bound to the real nodes."""
    names = {n.name for n in nodes}
    listing = api("GET", "/api/v1/pods")
    return [
        (p["metadata"]["namespace"], p["metadata"]["name"])
        for p in listing.get("items", [])
        if (p.get("spec") or {}).get("nodeName") in names
    ]


def drain(api: Any, nodes: list[RealNode], *, timeout: float, out: Progress) -> None:
    """Remove the real nodes' static pods, delete their other pods and wait (up to
    ``timeout``) until their kubelets removed them all, so their containers stop and their
    network is released cleanly."""
    # Static pods first: their kubelet stops them (and deletes their mirror pods) once
    # their files are gone; deleting a mirror pod would not stop anything.
    for node in nodes:
        for manifest in node.static_pods.glob("*.yaml"):
            manifest.unlink(missing_ok=True)
    pods = pods_on(api, nodes)
    if not pods:
        return
    out.say(f"stopping {len(pods)} pods on the real nodes")
    for ns, name in pods:
        with contextlib.suppress(Exception):
            api(
                "DELETE",
                f"/api/v1/namespaces/{ns}/pods/{name}",
                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 2},
                ok=(200, 202, 404),
            )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if not pods_on(api, nodes):
                return
        time.sleep(0.5)
    out.say("some pods on the real nodes did not stop in time; their processes are killed")


def node_ready(node: dict[str, Any]) -> bool:
    """Whether a Node object's condition ``Ready`` is ``True``."""
    for cond in node.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False
