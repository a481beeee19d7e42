"""Katib v0.19.0 whole in a `KubeCluster` of its own (fixture `katib_cluster`): its CRDs, its
controller (`katib-controller`: Experiment, Trial and Suggestion controllers and the webhooks),
its Optuna suggestion service, and what they need, so that an Experiment created there passes
Katib's own defaulting and validation and a grid Experiment runs its first trials' jobs.

Differences from an install, and why:
- Its namespace is `katib-system` (`KATIB_CORE_NAMESPACE`), its config file the standalone
  install's `katib-config.yaml` with the addresses on 127.0.0.1, the Training Operator v1
  kinds as trial resources, and the certificate generator off (certificates provided
  externally, as with its cert-manager install); the same config is its `katib-config`
  ConfigMap, which the webhook reads the suggestion, early stopping and collector settings
  from.
- Its webhook server reads its certificate from `/tmp/cert`, a path compiled into it: the
  certificate is made once and cached beside the build, so every test run on the machine
  writes the same files there.
- The webhooks are registered from its manifests by `clientConfig.url`.
- A suggestion service is a Deployment of one of Katib's images that the controller reaches by
  gRPC at `<experiment>-<algorithm>.<namespace>:6789`. Here kube-controller-manager's
  Deployment and ReplicaSet controllers make the Deployment's pods (kwok runs them, so it
  becomes Available, as the controller waits for), the service itself is Katib's Python code
  run on this machine as its image runs it (`ensure_katib_suggestion`; Optuna, for `grid`),
  and the controller runs in a mount namespace of its own whose /etc/hosts
  (`KatibCluster.hosts`) sends that name to 127.0.0.1 (`resolve_to_loopback`), there being no
  cluster DNS. The service listens on the port compiled into it, so one at a time per machine.
- Only `grid` and `tpe` run trials (`tpe` on the Optuna service's TPE, where Katib's config
  names its hyperopt image): `random` and `tpe` are served by Katib's hyperopt image and
  `bayesianoptimization` by its scikit-optimize one, whose requirements (scikit-learn, scipy,
  forestci, ...) are not installed here. The service keeps one study per process, as one
  Deployment per Experiment does: tests that run trials start it afresh
  (`fresh_suggestion_service`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes

from tests.server_process import free_port

from .binaries import cache_root, file_lock
from .cluster import KubeCluster
from .controller_builds import (
    KATIB_CONFIG,
    KATIB_CRDS,
    KATIB_OPTUNA,
    KATIB_VERSION,
    KATIB_WEBHOOKS,
    KatibBinaries,
)
from .processes import Component, http_ok, unverified_loopback_context
from .real_controllers import (
    apply_crds,
    ensure_namespace,
    environment,
    register_webhooks,
    serves,
    start,
    write_config,
)
from .webhook_certs import make_certs

KATIB_NAMESPACE = "katib-system"
KATIB_CERT_DIR = Path("/tmp/cert")  # consts.CertDir, compiled into katib-controller
KATIB_SERVICE = "katib-controller"  # what its manifests' webhooks name
CERT_MAX_AGE = 300 * 24 * 3600.0  # seconds; the certificates are valid for 365 days
TRIAL_RESOURCES = (
    "Job.v1.batch",
    "TFJob.v1.kubeflow.org",
    "PyTorchJob.v1.kubeflow.org",
    "MPIJob.v1.kubeflow.org",
    "XGBoostJob.v1.kubeflow.org",
    "PaddleJob.v1.kubeflow.org",
    "JAXJob.v1.kubeflow.org",
)
WEBHOOK_PATHS = ("/validate-experiment", "/mutate-experiment", "/mutate-pod")
INJECTION_LABELS = {"katib.kubeflow.org/metrics-collector-injection": "enabled"}
SUGGESTION_PORT = 6789  # consts.DefaultSuggestionPort, and the service's own DEFAULT_PORT


@dataclass(frozen=True)
class KatibCluster:
    cluster: KubeCluster
    katib: KatibBinaries
    hosts: Path  # the controller's /etc/hosts
    trials: str  # a namespace labelled for Katib, whose jobs the Training Operator runs
    suggestion: Component  # the one suggestion service (fresh_suggestion_service)


def start_katib(cluster: KubeCluster, katib: KatibBinaries, hosts: Path) -> Component:
    """Katib's CRDs, its config, its webhooks, then its controller, ready to validate, with
    `hosts` as its /etc/hosts."""
    manifests = katib.manifests
    apply_crds(cluster, manifests.crds(KATIB_CRDS))
    ensure_namespace(cluster, KATIB_NAMESPACE)
    ca_bundle = install_certs()
    port, metrics_port, probe_port = free_port(), free_port(), free_port()
    config = katib_config(manifests.documents(KATIB_CONFIG)[0], port, metrics_port, probe_port)
    workdir = cluster.workdir / "katib"
    config_file = write_config(workdir / "katib-config.yaml", config)
    core = kubernetes.client.CoreV1Api(cluster.admin)
    core.create_namespaced_config_map(
        KATIB_NAMESPACE,
        {
            "metadata": {"name": "katib-config"},
            "data": {"katib-config.yaml": config_file.read_text()},
        },
    )
    for configuration in manifests.documents(KATIB_WEBHOOKS):
        name = configuration["metadata"]["name"]
        register_webhooks(cluster, configuration, name, port, ca_bundle)
    # A private mount namespace: the bind mount is this process's alone.
    bind_hosts = 'mount --bind "$0" /etc/hosts && exec "$@"'
    return start(
        cluster,
        "katib-controller",
        [
            *("unshare", "--mount", "--propagation", "private", "sh", "-c", bind_hosts),
            *(str(hosts), str(katib.controller), f"--katib-config={config_file}"),
        ],
        lambda: (
            http_ok(f"http://127.0.0.1:{probe_port}/readyz")
            and all(serves(port, path) for path in WEBHOOK_PATHS)
        ),
        env=environment(cluster, workdir, KATIB_CORE_NAMESPACE=KATIB_NAMESPACE),
    )


def start_deployment_controllers(cluster: KubeCluster) -> Component:
    """A second kube-controller-manager running the Deployment and ReplicaSet controllers
    (the tier's own runs neither), for Katib's suggestion Deployments."""
    admin = cluster.kubeconfig("admin")
    port = free_port()
    return start(
        cluster,
        "deployment-controllers",
        [
            str(cluster.binaries.kube_controller_manager),
            f"--kubeconfig={admin}",
            f"--authentication-kubeconfig={admin}",
            f"--authorization-kubeconfig={admin}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={cluster.workdir / 'deployment-controllers-certs'}",
            "--leader-elect=false",
            "--controllers=deployment-controller,replicaset-controller",
            "--use-service-account-credentials=false",
        ],
        lambda: http_ok(f"https://127.0.0.1:{port}/healthz", unverified_loopback_context()),
    )


def start_suggestion_service(cluster: KubeCluster, suggestion: Path) -> Component:
    """Katib's Optuna suggestion service (`ensure_katib_suggestion`) on 0.0.0.0:6789, run
    as its image runs it: `python main.py`, its trees on PYTHONPATH."""
    katib = suggestion / "katib"
    paths = (
        suggestion / "site",
        katib,
        katib / "pkg/apis/manager/v1beta1/python",
        katib / "pkg/apis/manager/health/python",
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
    return start(
        cluster,
        "katib-suggestion-optuna",
        [sys.executable, str(katib / KATIB_OPTUNA / "main.py")],
        lambda: listening(SUGGESTION_PORT),
        env=env,
    )


def fresh_suggestion_service(katib: KatibCluster) -> None:
    """The suggestion service started again, with no study: Katib gives each Experiment a
    Deployment of its own, and the service keeps one study per process (the tier's one
    process would otherwise answer a second Experiment from the first one's)."""
    katib.suggestion.stop()
    katib.suggestion.start()
    katib.suggestion.wait_ready(lambda: listening(SUGGESTION_PORT), 60)


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        return True
    return False


def hosts_file(workdir: Path) -> Path:
    """A copy of this machine's /etc/hosts for Katib's controller, to add names to."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "hosts"
    path.write_text(Path("/etc/hosts").read_text())
    return path


def resolve_to_loopback(hosts: Path, name: str) -> None:
    """`name` resolves to 127.0.0.1 for Katib's controller (Go rereads /etc/hosts within 5 s
    of a change). Appended in place: the bind mount holds this file's inode."""
    with hosts.open("a") as file:
        file.write(f"127.0.0.1 {name}\n")


def katib_config(
    upstream: dict[str, Any], port: int, metrics_port: int, probe_port: int
) -> dict[str, Any]:
    """The standalone install's KatibConfig (its suggestion, early stopping and collector
    images as they are), run outside a pod: addresses on 127.0.0.1, the Training Operator
    kinds as trial resources, certificates provided."""
    config = dict(upstream)
    config["init"] = {
        "certGenerator": {"enable": False},
        "controller": {
            "webhookPort": port,
            "metricsAddr": f"127.0.0.1:{metrics_port}",
            "healthzAddr": f"127.0.0.1:{probe_port}",
            "trialResources": list(TRIAL_RESOURCES),
            "enableLeaderElection": False,
        },
    }
    return config


def install_certs() -> str:
    """The webhook server's certificate in /tmp/cert (the machine's one set, made once and
    kept beside the build); returns the CA bundle to register the webhooks with."""
    cached = cache_root() / f"katib-{KATIB_VERSION}" / "webhook-certs"
    cached.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(cached.parent / ".certs.lock"):
        tls = cached / "tls.crt"
        if not tls.is_file() or time.time() - tls.stat().st_mtime > CERT_MAX_AGE:
            certs = make_certs("katib-ca", f"{KATIB_SERVICE}.{KATIB_NAMESPACE}.svc")
            certs.write(cached, ca=True)
        KATIB_CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            content = (cached / name).read_bytes()
            target = KATIB_CERT_DIR / name
            if not target.is_file() or target.read_bytes() != content:
                partial = KATIB_CERT_DIR / f".{name}.{os.getpid()}"
                partial.write_bytes(content)
                partial.chmod(0o600)
                partial.replace(target)
        return base64.b64encode((cached / "ca.crt").read_bytes()).decode()


def strict_decode_errors(katib: KatibBinaries, experiment: dict[str, Any]) -> str:
    """What Katib's Go types say of `experiment` decoded strictly: "" when every field is
    one of theirs, else the errors."""
    result = _check(katib, experiment, [])
    return result.stderr.strip() if result.returncode else ""


def collected_metrics(
    katib: KatibBinaries, experiment: dict[str, Any], output: list[str], workdir: Path
) -> list[tuple[str, str]]:
    """The (name, value) pairs Katib's StdOut collector, with `experiment`'s filters, finds in
    `output` (the primary container's lines), by Katib's own parser."""
    log = workdir / "metrics.log"
    log.write_text("\n".join(output) + "\n")
    result = _check(katib, experiment, ["-metrics-log", str(log)])
    if result.returncode:
        raise AssertionError(f"katib-experiment-check refused the experiment: {result.stderr}")
    found = [json.loads(line) for line in result.stdout.splitlines()]
    return [(metric["name"], metric["value"]) for metric in found]


def _check(
    katib: KatibBinaries, experiment: dict[str, Any], args: list[str]
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(katib.experiment_check), *args],
        input=json.dumps(experiment),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if result.returncode not in (0, 1):
        raise RuntimeError(f"katib-experiment-check failed: {result.stderr}")
    return result
