"""Each real controller, in a cluster of its own, turns a minimal object of its kind into pods:
the Training Operator a PyTorchJob, Volcano a gang of minAvailable 2, Trainer (through JobSet
and the Job controller) a TrainJob on the torch-distributed runtime; Kueue suspends a Job
labelled with a queue, admits it when its ClusterQueue has room, and keeps waiting one that
does not fit. kwok plays the kubelet. Run with `-s` to see what each controller made."""

from __future__ import annotations

import json
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import kubernetes
import pytest

from .cluster import KubeCluster
from .controller_builds import ControllerBinaries
from .controllers import start_training_operator
from .real_controllers import (
    READY_SECONDS,
)

pytestmark = pytest.mark.kubernetes

WAIT = 90.0
T = TypeVar("T")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def eventually(read: Callable[[], T], check: Callable[[T], bool], what: str) -> T:
    deadline = time.monotonic() + WAIT
    while True:
        value = read()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value: {value!r}")
        time.sleep(0.3)


def show(what: str, value: object) -> None:
    """What a real controller made, for a reader of `pytest -s` (and of failures)."""
    print(f"--- {what}:\n{json.dumps(value, indent=1, default=str)}", file=sys.stderr)


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def report_readiness() -> Iterator[None]:
    yield
    show("seconds each controller took to be ready", READY_SECONDS)


@pytest.fixture
def namespace(controllers_cluster: KubeCluster) -> Iterator[str]:
    name = f"rc-{secrets.token_hex(4)}"
    controllers_cluster.create_namespace(name)
    yield name
    controllers_cluster.delete_namespace(name)


@pytest.fixture(scope="module")
def training_operator_namespace(
    controllers_cluster: KubeCluster, controller_binaries: ControllerBinaries
) -> str:
    name = "training-operator-jobs"
    controllers_cluster.create_namespace(name)
    started = time.monotonic()
    start_training_operator(controllers_cluster, controller_binaries.training_operator, name)
    READY_SECONDS["training-operator"] = time.monotonic() - started
    return name


@pytest.fixture
def kueue(kueue_controllers: None) -> None:
    """Kueue in `controllers_cluster` (started once for the session: conftest.py)."""


# -- helpers -----------------------------------------------------------------------------------


def custom(cluster: KubeCluster) -> Any:
    return kubernetes.client.CustomObjectsApi(cluster.admin)


def pods(cluster: KubeCluster, namespace: str, selector: str) -> list[Any]:
    core = kubernetes.client.CoreV1Api(cluster.admin)
    return list(core.list_namespaced_pod(namespace, label_selector=selector).items)


def running(found: list[Any], count: int) -> bool:
    return len(found) == count and all(pod.status.phase == "Running" for pod in found)


def pod_summary(pod: Any) -> dict[str, Any]:
    spec = pod.spec
    return {
        "name": pod.metadata.name,
        "labels": pod.metadata.labels,
        "annotations": pod.metadata.annotations,
        "owner": [(o.kind, o.name) for o in pod.metadata.owner_references or []],
        "schedulerName": spec.scheduler_name,
        "node": spec.node_name,
        "initContainers": [(c.name, c.image) for c in spec.init_containers or []],
        "containers": [(c.name, c.image) for c in spec.containers],
        "env": {c.name: {e.name: e.value for e in c.env or []} for c in spec.containers},
        "restartPolicy": spec.restart_policy,
        "phase": pod.status.phase,
    }


def container(image: str = "busybox:1.36", cpu: str = "1") -> dict[str, Any]:
    return {"name": "main", "image": image, "resources": {"requests": {"cpu": cpu}}}


# -- Training Operator -------------------------------------------------------------------------


def test_the_training_operator_makes_a_pod_per_pytorch_replica(
    controllers_cluster: KubeCluster, training_operator_namespace: str
) -> None:
    namespace = training_operator_namespace
    api = custom(controllers_cluster)
    api.create_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", pytorch_job("pt")
    )
    found = eventually(
        lambda: pods(controllers_cluster, namespace, "training.kubeflow.org/job-name=pt"),
        lambda found: running(found, 2),
        "the Training Operator's pods to run",
    )
    by_name = {pod.metadata.name: pod for pod in found}
    assert set(by_name) == {"pt-master-0", "pt-worker-0"}
    assert by_name["pt-master-0"].metadata.labels["training.kubeflow.org/job-role"] == "master"
    [init] = by_name["pt-worker-0"].spec.init_containers
    assert init.name == "init-pytorch"
    for pod in found:
        show(f"Training Operator pod {pod.metadata.name}", pod_summary(pod))
    status = eventually(
        lambda: api.get_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, "pytorchjobs", "pt"
        ).get("status", {}),
        lambda status: any(c["type"] == "Running" for c in status.get("conditions", [])),
        "the PyTorchJob's Running condition",
    )
    show("PyTorchJob status", status)
    api.delete_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "pt")


# -- Volcano -----------------------------------------------------------------------------------


def test_volcano_gang_schedules_a_job_of_min_available_two(
    controllers_cluster: KubeCluster, volcano_controllers: None, namespace: str
) -> None:
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vj"},
        "spec": {
            "minAvailable": 2,
            "schedulerName": "volcano",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 2,
                    "template": {"spec": {"containers": [container()], "restartPolicy": "Never"}},
                }
            ],
        },
    }
    api = custom(controllers_cluster)
    created = api.create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", job
    )
    # Its admission webhook defaulted the job as it was stored.
    assert created["spec"]["queue"] == "default"
    assert created["spec"]["maxRetry"] == 3
    assert created["spec"]["tasks"][0]["minAvailable"] == 2
    found = eventually(
        lambda: pods(controllers_cluster, namespace, "volcano.sh/job-name=vj"),
        lambda found: running(found, 2),
        "Volcano's pods to be scheduled and run",
    )
    assert {pod.metadata.name for pod in found} == {"vj-worker-0", "vj-worker-1"}
    assert all(pod.spec.scheduler_name == "volcano" and pod.spec.node_name for pod in found)
    for pod in found:
        show(f"Volcano pod {pod.metadata.name}", pod_summary(pod))
    [group] = api.list_namespaced_custom_object(
        "scheduling.volcano.sh", "v1beta1", namespace, "podgroups"
    )["items"]
    assert group["spec"]["minMember"] == 2
    show("Volcano PodGroup", {"spec": group["spec"], "status": group.get("status")})
    status = eventually(
        lambda: api.get_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", namespace, "jobs", "vj"
        ).get("status", {}),
        lambda status: status.get("state", {}).get("phase") == "Running",
        "the Volcano job to be Running",
    )
    show("Volcano Job status", status)


# -- Trainer + JobSet --------------------------------------------------------------------------


def test_trainer_runs_a_trainjob_on_the_torch_runtime_through_jobset(
    controllers_cluster: KubeCluster, trainer_controllers: None, namespace: str
) -> None:
    api = custom(controllers_cluster)
    api.create_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", train_job("tj")
    )
    jobset = eventually(
        lambda: api.list_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets"
        )["items"],
        lambda items: len(items) == 1,
        "Trainer to create the JobSet",
    )[0]
    assert jobset["metadata"]["name"] == "tj"
    found = eventually(
        lambda: pods(controllers_cluster, namespace, "jobset.sigs.k8s.io/jobset-name=tj"),
        lambda found: running(found, 2),
        "the TrainJob's pods to run",
    )
    for pod in found:
        show(f"TrainJob pod {pod.metadata.name}", pod_summary(pod))
    show("JobSet spec", jobset["spec"])
    status = eventually(
        lambda: api.get_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", "tj"
        ).get("status", {}),
        lambda status: bool(status.get("jobsStatus") or status.get("conditions")),
        "the TrainJob's status",
    )
    show("TrainJob status", status)


# -- Kueue -------------------------------------------------------------------------------------


def make_queues(cluster: KubeCluster, namespace: str, cpu: str) -> str:
    """A ResourceFlavor, a ClusterQueue with `cpu` CPUs and its LocalQueue in `namespace`."""
    api = custom(cluster)
    group, version = "kueue.x-k8s.io", "v1beta1"
    head = {"apiVersion": f"{group}/{version}"}
    flavor = f"flavor-{namespace}"
    api.create_cluster_custom_object(
        group, version, "resourceflavors",
        {**head, "kind": "ResourceFlavor", "metadata": {"name": flavor}},
    )  # fmt: skip
    quotas = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "64Gi"}]
    cluster_queue = {
        **head,
        "kind": "ClusterQueue",
        "metadata": {"name": f"cq-{namespace}"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": flavor, "resources": quotas}],
                }
            ],
        },
    }
    api.create_cluster_custom_object(group, version, "clusterqueues", cluster_queue)
    local_queue = {
        **head,
        "kind": "LocalQueue",
        "metadata": {"name": "lq", "namespace": namespace},
        "spec": {"clusterQueue": f"cq-{namespace}"},
    }
    api.create_namespaced_custom_object(group, version, namespace, "localqueues", local_queue)
    return "lq"


def batch_job(name: str, queue: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {"spec": {"containers": [container(cpu=cpu)], "restartPolicy": "Never"}},
        },
    }


def suspended(job: Any) -> bool | None:
    return job.spec.suspend if job.spec is not None else None


def workload_of(cluster: KubeCluster, namespace: str, job: str) -> dict[str, Any] | None:
    items = custom(cluster).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta1", namespace, "workloads"
    )["items"]
    owned = [
        w for w in items if any(o["name"] == job for o in w["metadata"].get("ownerReferences", []))
    ]
    return owned[0] if owned else None


def condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def test_kueue_suspends_a_queued_job_then_admits_it(
    controllers_cluster: KubeCluster, kueue: None, namespace: str
) -> None:
    queue = make_queues(controllers_cluster, namespace, cpu="4")
    batch = kubernetes.client.BatchV1Api(controllers_cluster.admin)
    created = batch.create_namespaced_job(namespace, batch_job("fits", queue, cpu="1"))
    assert suspended(created) is True  # Kueue's defaulting webhook, at creation
    workload = eventually(
        lambda: workload_of(controllers_cluster, namespace, "fits"),
        lambda w: (condition(w, "Admitted") or {}).get("status") == "True",
        "Kueue to admit the job's Workload",
    )
    assert workload is not None
    show("admitted Workload status", workload["status"])
    eventually(
        lambda: suspended(batch.read_namespaced_job("fits", namespace)),
        lambda value: value is False,
        "Kueue to resume the admitted job",
    )
    found = eventually(
        lambda: pods(controllers_cluster, namespace, "batch.kubernetes.io/job-name=fits"),
        lambda found: running(found, 2),
        "the admitted job's pods to run",
    )
    for pod in found:
        show(f"Kueue-admitted pod {pod.metadata.name}", pod_summary(pod))


def test_kueue_keeps_a_job_that_does_not_fit_suspended_and_says_why(
    controllers_cluster: KubeCluster, kueue: None, namespace: str
) -> None:
    queue = make_queues(controllers_cluster, namespace, cpu="1")
    batch = kubernetes.client.BatchV1Api(controllers_cluster.admin)
    batch.create_namespaced_job(namespace, batch_job("too-big", queue, cpu="2"))
    workload = eventually(
        lambda: workload_of(controllers_cluster, namespace, "too-big"),
        lambda w: condition(w, "QuotaReserved") is not None,
        "Kueue to say why the Workload waits",
    )
    reserved = condition(workload, "QuotaReserved")
    assert workload is not None and reserved is not None and reserved["status"] == "False"
    assert reserved["reason"] == "Pending"
    show("pending Workload status", workload["status"])
    assert suspended(batch.read_namespaced_job("too-big", namespace)) is True
    assert pods(controllers_cluster, namespace, "batch.kubernetes.io/job-name=too-big") == []


def pytorch_job(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    pytorch = {**container(), "name": "pytorch"}  # the container name the operator requires
    replica = {"replicas": 1, "template": {"spec": {"containers": [pytorch]}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": replica}},
    }


def train_job(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": {"cpu": "1"}}},
        },
    }


def test_kueue_holds_a_queued_pytorchjob_until_admitted_then_the_operator_runs_it(
    controllers_cluster: KubeCluster, kueue: None, training_operator_namespace: str
) -> None:
    namespace = training_operator_namespace
    queue = make_queues(controllers_cluster, namespace, cpu="4")
    api = custom(controllers_cluster)
    created = api.create_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs",
        pytorch_job("queued", {QUEUE_LABEL: queue}),
    )  # fmt: skip
    assert created["spec"]["runPolicy"]["suspend"] is True  # Kueue's webhook
    workload = eventually(
        lambda: workload_of(controllers_cluster, namespace, "queued"),
        lambda w: (condition(w, "Admitted") or {}).get("status") == "True",
        "Kueue to admit the PyTorchJob",
    )
    assert workload is not None
    show(
        "admitted PyTorchJob Workload", {"name": workload["metadata"]["name"], **workload["status"]}
    )
    found = eventually(
        lambda: pods(controllers_cluster, namespace, "training.kubeflow.org/job-name=queued"),
        lambda found: running(found, 2),
        "the operator's pods once Kueue admitted the job",
    )
    show("Kueue-admitted PyTorchJob pod labels", [pod.metadata.labels for pod in found])
    job = api.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "queued")
    show("Kueue-admitted PyTorchJob status", job.get("status"))
    api.delete_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "queued")


def test_kueue_holds_a_queued_trainjob_until_admitted_then_trainer_runs_it(
    controllers_cluster: KubeCluster, kueue: None, trainer_controllers: None, namespace: str
) -> None:
    queue = make_queues(controllers_cluster, namespace, cpu="4")
    api = custom(controllers_cluster)
    created = api.create_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs",
        train_job("queued", {QUEUE_LABEL: queue}),
    )  # fmt: skip
    assert created["spec"]["suspend"] is True  # Kueue's webhook
    workload = eventually(
        lambda: workload_of(controllers_cluster, namespace, "queued"),
        lambda w: (condition(w, "Admitted") or {}).get("status") == "True",
        "Kueue to admit the TrainJob",
    )
    assert workload is not None
    show("admitted TrainJob Workload", {"name": workload["metadata"]["name"], **workload["status"]})
    found = eventually(
        lambda: pods(controllers_cluster, namespace, "jobset.sigs.k8s.io/jobset-name=queued"),
        lambda found: running(found, 2),
        "the TrainJob's pods once Kueue admitted it",
    )
    show("Kueue-admitted TrainJob pod labels", [pod.metadata.labels for pod in found])
