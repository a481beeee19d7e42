"""The real job controllers beside controllers.py's Training Operator, each started against a
running `KubeCluster` as an operator would install it, and reconciling every namespace:

- Volcano v1.15.1: scheduler, controller-manager, and the admission webhooks of its Helm chart;
- JobSet v0.12.0 and Kubeflow Trainer v2.3.0 (controllers and their webhooks; Trainer's
  defaulting webhook and JobSet's are what set the defaults their controllers rely on);
- Kueue v0.17.1 (the first release built on Trainer v2.2's API: older ones erase a TrainJob's
  runtimePatches when they start it), whose defaulting webhook suspends a job labelled with a
  queue, and whose conversion webhook serves its deprecated v1beta1 kinds;
- kube-controller-manager's job controller, which JobSet and Kueue need to turn Jobs into pods
  and which the tier's own controller-manager does not run.

Webhooks are registered from the upstream manifests with `clientConfig.url` (127.0.0.1; no
Service or DNS here) and a CA of our own: certificate managers are either off ("certificates
provided externally", as with cert-manager) or handed a Secret they accept and keep.
Each `start_*` returns once the controller is ready; `KubeCluster.stop` stops them. Their
webhook configurations stay registered (most with `failurePolicy: Fail`, Kueue's and JobSet's
covering pods): stop a controller only with its cluster.
"""

from __future__ import annotations

import functools
import json
import os
import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from kubernetes.client.exceptions import ApiException

from tests.server_process import free_port

from .binaries import report_to_stderr
from .cluster import KubeCluster, exists, wait_for
from .controller_builds import ControllerBinaries, Manifests
from .controllers import convert_through_kueue
from .processes import Component, http_ok, unverified_loopback_context
from .webhook_certs import make_certs

READY_TIMEOUT = 180.0  # seconds; several Go managers start at once on a loaded 2-core machine
# Certificate rotators renew certificates that expire within 90 days: make them outlive that.

VOLCANO_NAMESPACE = "volcano-system"
VOLCANO_RELEASE = "volcano"  # the Helm release name its chart's objects are named after
# The chart's default `custom.enabled_admissions`.
VOLCANO_ADMISSIONS = (
    "/jobs/mutate",
    "/jobs/validate",
    "/podgroups/validate",
    "/queues/mutate",
    "/queues/validate",
    "/hypernodes/validate",
    "/cronjobs/validate",
)
VOLCANO_CHART = "installer/helm/chart/volcano"

JOBSET_NAMESPACE = "jobset-system"
TRAINER_NAMESPACE = "kubeflow-system"
TRAINER_RUNTIMES = "manifests/base/runtimes/"
KUEUE_NAMESPACE = "kueue-system"
KUEUE_SERVICE = "kueue-webhook-service"
KUEUE_SECRET = "kueue-webhook-server-cert"
# Kueue's default `integrations.frameworks` is batch/job alone: the kinds distrun queues
# must be named.
KUEUE_FRAMEWORKS = ("batch/job", "kubeflow.org/pytorchjob", "trainer.kubeflow.org/trainjob")

READY_SECONDS: dict[str, float] = {}  # how long each controller started here took to be ready


# -- certificates ----------------------------------------------------------------------------


# -- cluster objects -------------------------------------------------------------------------


def apply_crds(cluster: KubeCluster, crds: list[dict[str, Any]]) -> None:
    """Create each CRD the cluster lacks (the tier installs some itself) and wait for them."""
    extensions = kubernetes.client.ApiextensionsV1Api(cluster.admin)
    for crd in crds:
        try:
            extensions.create_custom_resource_definition(crd, _preload_content=False)
        except ApiException as error:
            if error.status != 409:
                raise

    def established(name: str) -> bool:
        response = extensions.read_custom_resource_definition(name, _preload_content=False)
        conditions = (json.loads(response.data).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    for name in (crd["metadata"]["name"] for crd in crds):
        wait_for(functools.partial(established, name), f"CRD {name} to be established")


def ensure_namespace(cluster: KubeCluster, name: str) -> None:
    core = kubernetes.client.CoreV1Api(cluster.admin)
    if not exists(lambda: core.read_namespace(name)):
        cluster.create_namespace(name)


def create_secret(cluster: KubeCluster, namespace: str, body: dict[str, Any]) -> None:
    core = kubernetes.client.CoreV1Api(cluster.admin)
    core.create_namespaced_secret(namespace, body)


def register_webhooks(
    cluster: KubeCluster,
    configuration: dict[str, Any],
    name: str,
    port: int,
    ca_bundle: str | None,
) -> None:
    """An upstream webhook configuration under `name`, its Service references turned into URLs
    on 127.0.0.1:`port` (with `ca_bundle`, or none when the controller's rotator injects it)."""
    body = json.loads(json.dumps(configuration))  # a deep copy
    body["metadata"] = {"name": name}
    for webhook in body["webhooks"]:
        path = webhook["clientConfig"]["service"].get("path", "/")
        webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}"}
        if ca_bundle is not None:
            webhook["clientConfig"]["caBundle"] = ca_bundle
    admission = kubernetes.client.AdmissionregistrationV1Api(cluster.admin)
    if configuration["kind"] == "MutatingWebhookConfiguration":
        admission.create_mutating_webhook_configuration(body)
    else:
        admission.create_validating_webhook_configuration(body)


def webhook_paths(configurations: list[dict[str, Any]]) -> list[str]:
    return [
        webhook["clientConfig"]["service"]["path"]
        for configuration in configurations
        for webhook in configuration["webhooks"]
    ]


def serves(port: int, path: str) -> bool:
    """True once an HTTPS server on 127.0.0.1:`port` has a handler at `path` (any answer but
    404 and connection errors)."""
    url = f"https://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, context=unverified_loopback_context(), timeout=5):
            return True
    except urllib.error.HTTPError as error:
        return error.code != 404
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False


def start(
    cluster: KubeCluster,
    name: str,
    argv: list[str],
    ready: Callable[[], bool],
    env: dict[str, str] | None = None,
) -> Component:
    """Start `argv` as a cluster component and wait until `ready()`; log how long it took."""
    started = time.monotonic()
    component = Component(name, argv, cluster.workdir / "logs" / f"{name}.log", env=env)
    cluster.components.append(component)
    component.start()
    component.wait_ready(ready, READY_TIMEOUT)
    READY_SECONDS[name] = time.monotonic() - started
    report_to_stderr(f"{name} ready in {READY_SECONDS[name]:.1f}s")
    return component


def environment(cluster: KubeCluster, workdir: Path, **extra: str) -> dict[str, str]:
    """The admin kubeconfig, and a TMPDIR of its own (controller-runtime's default directory
    for webhook certificates is under it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig("admin")),
        "TMPDIR": str(workdir),
        **extra,
    }


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


# -- kube-controller-manager's job controller --------------------------------------------------


def start_job_controller(cluster: KubeCluster, kube_controller_manager: Path) -> Component:
    """A second kube-controller-manager running only the Job controller (and the TTL one that
    removes finished Jobs when asked, and the quota one: a ResourceQuota admits no pod until
    it has counted its namespace's usage)."""
    admin = cluster.kubeconfig("admin")
    port = free_port()
    return start(
        cluster,
        "job-controller",
        [
            str(kube_controller_manager),
            f"--kubeconfig={admin}",
            f"--authentication-kubeconfig={admin}",
            f"--authorization-kubeconfig={admin}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={cluster.workdir / 'job-controller-certs'}",
            "--leader-elect=false",
            "--controllers=job-controller,ttl-after-finished-controller,resourcequota-controller",
            "--use-service-account-credentials=false",
        ],
        lambda: http_ok(f"https://127.0.0.1:{port}/healthz", unverified_loopback_context()),
    )


# -- Volcano -----------------------------------------------------------------------------------


def start_volcano(cluster: KubeCluster, binaries: ControllerBinaries) -> list[Component]:
    """Volcano's admission webhooks, controller-manager and scheduler, as its Helm chart
    installs them (default values), webhooks first: the scheduler creates its queues through
    them."""
    manifests = binaries.volcano_manifests
    apply_crds(cluster, manifests.crds("config/crd/"))
    ensure_namespace(cluster, VOLCANO_NAMESPACE)
    return [
        start_volcano_webhooks(cluster, binaries.volcano_webhook_manager, manifests),
        start_volcano_controllers(cluster, binaries.volcano_controller_manager),
        start_volcano_scheduler(cluster, binaries.volcano_scheduler, manifests),
    ]


def volcano_webhook_configurations(template: str) -> list[dict[str, Any]]:
    """The chart's webhooks.yaml rendered with default values: its only directives are
    `if`/`end` around each configuration and optional labels/selectors, and the release's name
    and namespace."""
    kept = [line for line in template.splitlines() if "{{-" not in line]
    text = (
        "\n".join(kept)
        .replace("{{ .Release.Name }}", VOLCANO_RELEASE)
        .replace("{{ .Release.Namespace }}", VOLCANO_NAMESPACE)
    )
    if "{{" in text:
        raise ValueError(f"unrendered directive in Volcano's webhooks.yaml: {text!r:.200}")
    configurations = []
    for document in yaml.safe_load_all(text):
        if not document:
            continue
        document["metadata"].pop("labels", None)  # `common_labels`, empty by default
        path = document["webhooks"][0]["clientConfig"]["service"]["path"]
        if path in VOLCANO_ADMISSIONS:
            configurations.append(document)
    return configurations


def start_volcano_webhooks(
    cluster: KubeCluster, webhook_manager: Path, manifests: Manifests
) -> Component:
    template = manifests.path(f"{VOLCANO_CHART}/templates/webhooks.yaml").read_text()
    configurations = volcano_webhook_configurations(template)
    certs = make_certs("volcano-ca", f"{VOLCANO_RELEASE}-admission-service.{VOLCANO_NAMESPACE}.svc")
    cert_dir = certs.write(cluster.workdir / "volcano" / "admission-certs", ca=True)
    port, healthz_port = free_port(), free_port()
    for configuration in configurations:
        # The webhook manager injects the CA itself into configurations named after the paths.
        register_webhooks(cluster, configuration, configuration["metadata"]["name"], port, None)
    paths = webhook_paths(configurations)
    return start(
        cluster,
        "volcano-webhook-manager",
        [
            str(webhook_manager),
            f"--kubeconfig={cluster.kubeconfig('admin')}",
            f"--enabled-admission={','.join(VOLCANO_ADMISSIONS)}",
            f"--tls-cert-file={cert_dir / 'tls.crt'}",
            f"--tls-private-key-file={cert_dir / 'tls.key'}",
            f"--ca-cert-file={cert_dir / 'ca.crt'}",
            f"--admission-conf={manifests.path(f'{VOLCANO_CHART}/config/volcano-admission.conf')}",
            f"--webhook-url=https://127.0.0.1:{port}",
            "--listen-address=127.0.0.1",
            f"--port={port}",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{healthz_port}",
            "--logtostderr",
        ],
        lambda: all(serves(port, path) for path in paths),
    )


def start_volcano_controllers(cluster: KubeCluster, controller_manager: Path) -> Component:
    healthz_port, metrics_port = free_port(), free_port()
    return start(
        cluster,
        "volcano-controller-manager",
        [
            str(controller_manager),
            f"--kubeconfig={cluster.kubeconfig('admin')}",
            "--leader-elect=false",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{healthz_port}",
            f"--listen-address=127.0.0.1:{metrics_port}",
            "--logtostderr",
        ],
        lambda: http_ok(f"http://127.0.0.1:{healthz_port}/healthz"),
    )


def start_volcano_scheduler(
    cluster: KubeCluster, scheduler: Path, manifests: Manifests
) -> Component:
    healthz_port, metrics_port = free_port(), free_port()
    conf = manifests.path(f"{VOLCANO_CHART}/config/volcano-scheduler.conf")
    custom = kubernetes.client.CustomObjectsApi(cluster.admin)

    def ready() -> bool:
        # It creates the `default` queue once it runs, and the controller-manager opens it:
        # the webhook refuses jobs for a queue not yet `Open`.
        if not http_ok(f"http://127.0.0.1:{healthz_port}/healthz"):
            return False
        try:
            queue = custom.get_cluster_custom_object(
                "scheduling.volcano.sh", "v1beta1", "queues", "default"
            )
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return bool((queue.get("status") or {}).get("state") == "Open")

    return start(
        cluster,
        "volcano-scheduler",
        [
            str(scheduler),
            f"--kubeconfig={cluster.kubeconfig('admin')}",
            f"--scheduler-conf={conf}",
            "--leader-elect=false",
            "--schedule-period=1s",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{healthz_port}",
            f"--listen-address=127.0.0.1:{metrics_port}",
            "--logtostderr",
        ],
        ready,
    )


# -- JobSet and Trainer ------------------------------------------------------------------------


def start_jobset(cluster: KubeCluster, binaries: ControllerBinaries) -> Component:
    """JobSet's controller manager and its webhooks (JobSet defaulting and validation, and the
    pod webhooks for pods of a JobSet), certificates provided externally."""
    manifests = binaries.jobset_manifests
    apply_crds(cluster, manifests.crds("config/components/crd/"))
    ensure_namespace(cluster, JOBSET_NAMESPACE)
    configurations = jobset_webhook_configurations(manifests)
    certs = make_certs("jobset-ca", f"jobset-webhook-service.{JOBSET_NAMESPACE}.svc")
    workdir = cluster.workdir / "jobset"
    cert_dir = certs.write(workdir / "certs")
    port, metrics_port, probe_port = free_port(), free_port(), free_port()
    for configuration in configurations:
        name = f"jobset-{configuration['metadata']['name']}"  # the kustomization's namePrefix
        register_webhooks(cluster, configuration, name, port, certs.ca_bundle)
    config = write_config(
        workdir / "config.yaml",
        {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(cert_dir)},
            "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}", "certDir": str(cert_dir)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        },
    )
    paths = webhook_paths(configurations)
    return start(
        cluster,
        "jobset",
        [str(binaries.jobset), f"--config={config}"],
        lambda: (
            http_ok(f"http://127.0.0.1:{probe_port}/readyz")
            and all(serves(port, path) for path in paths)
        ),
        env=environment(cluster, workdir),
    )


def jobset_webhook_configurations(manifests: Manifests) -> list[dict[str, Any]]:
    """JobSet's generated webhooks with its kustomize patches applied: the pod webhooks only for
    pods of a JobSet."""
    pods_of_a_jobset = {
        "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
    }
    configurations = manifests.documents("config/components/webhook/manifests.yaml")
    for configuration in configurations:
        for webhook in configuration["webhooks"]:
            if webhook["name"] in ("mpod.kb.io", "vpod.kb.io"):
                webhook["objectSelector"] = pods_of_a_jobset
                webhook["rules"][0]["operations"] = ["CREATE"]
    return configurations


def start_trainer(cluster: KubeCluster, binaries: ControllerBinaries) -> Component:
    """Kubeflow Trainer's controller manager with its webhooks (TrainJob defaulting; TrainJob
    and runtime validation), certificates provided externally (`certManagement.enable: false`),
    then its ClusterTrainingRuntimes. Needs JobSet (`start_jobset`) for TrainJobs to run."""
    manifests = binaries.trainer_manifests
    apply_crds(cluster, manifests.crds("manifests/base/crds/"))
    ensure_namespace(cluster, TRAINER_NAMESPACE)
    configurations = manifests.documents("manifests/base/webhook/manifests.yaml")
    certs = make_certs("trainer-ca", f"kubeflow-trainer-controller-manager.{TRAINER_NAMESPACE}.svc")
    workdir = cluster.workdir / "trainer"
    # Where controller-runtime's webhook server looks by default: under TMPDIR.
    certs.write(workdir / "k8s-webhook-server" / "serving-certs")
    port, metrics_port, probe_port = free_port(), free_port(), free_port()
    names = {  # what its kustomization names them (and its rotator would look for)
        "MutatingWebhookConfiguration": "defaulter.trainer.kubeflow.org",
        "ValidatingWebhookConfiguration": "validator.trainer.kubeflow.org",
    }
    for configuration in configurations:
        register_webhooks(
            cluster, configuration, names[configuration["kind"]], port, certs.ca_bundle
        )
    config = write_config(
        workdir / "config.yaml",
        {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}", "secureServing": False},
            "webhook": {"port": port, "host": "127.0.0.1"},
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
        },
    )
    paths = webhook_paths(configurations)
    component = start(
        cluster,
        "trainer",
        [str(binaries.trainer), f"--config={config}"],
        lambda: (
            http_ok(f"http://127.0.0.1:{probe_port}/readyz")
            and all(serves(port, path) for path in paths)
        ),
        env=environment(cluster, workdir),
    )
    apply_runtimes(cluster, manifests)
    return component


def apply_runtimes(cluster: KubeCluster, manifests: Manifests) -> None:
    """Trainer's ClusterTrainingRuntimes (torch-distributed and the others), as its
    `manifests/base/runtimes` kustomization installs them (through the validating webhook)."""
    custom = kubernetes.client.CustomObjectsApi(cluster.admin)
    for name in manifests.files():
        if not (name.startswith(TRAINER_RUNTIMES) and name.endswith(".yaml")):
            continue
        for runtime in manifests.documents(name):
            if runtime.get("kind") != "ClusterTrainingRuntime":
                continue
            custom.create_cluster_custom_object(
                "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", runtime
            )


# -- Kueue -------------------------------------------------------------------------------------


def start_kueue(
    cluster: KubeCluster,
    binaries: ControllerBinaries,
    frameworks: tuple[str, ...] = KUEUE_FRAMEWORKS,
) -> Component:
    """Kueue's manager with every webhook its manifests register, cluster-wide, managing the
    jobs of `frameworks` that carry a queue label. Its internal certificate management stays
    on, as installed, handed a Secret it accepts and keeps (also naming 127.0.0.1)."""
    manifests = binaries.kueue_manifests
    apply_crds(cluster, manifests.crds("config/components/crd/"))
    ensure_namespace(cluster, KUEUE_NAMESPACE)
    certs = make_certs("kueue-ca", f"{KUEUE_SERVICE}.{KUEUE_NAMESPACE}.svc")
    create_secret(cluster, KUEUE_NAMESPACE, certs.secret(KUEUE_SECRET))
    workdir = cluster.workdir / "kueue"
    cert_dir = certs.write(workdir / "certs")
    port, metrics_port, probe_port = free_port(), free_port(), free_port()
    configurations = kueue_webhook_configurations(manifests)
    # `kueue-` is its kustomization's namePrefix; the rotator injects the CA by these names.
    names = [f"kueue-{c['metadata']['name']}" for c in configurations]
    for configuration, name in zip(configurations, names, strict=True):
        register_webhooks(cluster, configuration, name, port, None)
    convert_through_kueue(cluster, port)
    config = write_config(
        workdir / "config.yaml",
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
            "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False},
            "integrations": {"frameworks": list(frameworks)},
            "internalCertManagement": {
                "enable": True,
                "webhookServiceName": KUEUE_SERVICE,
                "webhookSecretName": KUEUE_SECRET,
            },
        },
    )
    # Its own kinds' webhooks and those of `frameworks` (named by their kinds); other
    # integrations' are served only when their CRDs exist.
    kinds = "|".join(framework.rsplit("/", 1)[1] for framework in frameworks)
    paths = [
        path
        for path in webhook_paths(configurations)
        if re.search(f"kueue-x-k8s-io|-({kinds})$", path)
    ]
    return start(
        cluster,
        "kueue",
        # Its visibility API server (positions of pending workloads, which distrun does not
        # read) authenticates by in-cluster delegation, which a process outside a pod lacks.
        [str(binaries.kueue), f"--config={config}", "--feature-gates=VisibilityOnDemand=false"],
        lambda: (
            http_ok(f"http://127.0.0.1:{probe_port}/readyz")
            and all(serves(port, path) for path in paths)
            and ca_injected(cluster, names)
        ),
        env=environment(cluster, workdir),
    )


def ca_injected(cluster: KubeCluster, names: list[str]) -> bool:
    """Whether every webhook of these configurations has a caBundle (a rotator puts it)."""
    admission = kubernetes.client.AdmissionregistrationV1Api(cluster.admin)
    for name in names:
        if name.startswith("kueue-mutating"):
            configuration: Any = admission.read_mutating_webhook_configuration(name)
        else:
            configuration = admission.read_validating_webhook_configuration(name)
        if not all(webhook.client_config.ca_bundle for webhook in configuration.webhooks):
            return False
    return True


def kueue_webhook_configurations(manifests: Manifests) -> list[dict[str, Any]]:
    """Kueue's generated webhooks with its kustomization's patches: the pod, deployment and
    statefulset webhooks skip kube-system and Kueue's own namespace."""
    skip_system = {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", KUEUE_NAMESPACE],
            }
        ]
    }
    patched = re.compile(r"^[mv](pod|deployment|statefulset)\.kb\.io$")
    configurations = manifests.documents("config/components/webhook/manifests.yaml")
    for configuration in configurations:
        for webhook in configuration["webhooks"]:
            if patched.match(webhook["name"]):
                webhook["namespaceSelector"] = skip_system
    return configurations
