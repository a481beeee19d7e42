"""Jobs for Kueue (labelled, created suspended) and a Workload's conditions in words."""

from typing import Any

import pytest

from distrun.core.errors import SpecError
from distrun.core.spec import JobSpec
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.kueue import describe_workload
from distrun.engines.kube.manifests.common import ClusterOptions, Target
from distrun.engines.kube.manifests.configmap import code_bundle
from distrun.engines.kube.manifests.kubeflow import kubeflow_job
from distrun.engines.kube.manifests.trainer import trainer_bundle, trainjob
from distrun.engines.kube.volcano import VolcanoEngine

TARGET = Target("train-abcde", "alice", "alice")
KUEUE = ClusterOptions(queue_system="kueue", default_queue="team-a")


def spec(**fields: Any) -> JobSpec:
    return JobSpec.from_dict({"framework": "pytorch", "code": "print(1)", **fields})


def test_a_kubeflow_job_for_kueue_is_labelled_with_its_local_queue_and_created_suspended() -> None:
    job = kubeflow_job(spec(), TARGET, KUEUE, code_bundle(spec(), TARGET))
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    policy = job["spec"]["runPolicy"]
    assert policy["suspend"] is True
    assert "queue" not in policy.get("schedulingPolicy", {})  # that is Volcano's queue


def test_without_kueue_the_queue_stays_volcanos_and_nothing_is_suspended() -> None:
    options = ClusterOptions(default_queue="team-a")
    job = kubeflow_job(spec(), TARGET, options, code_bundle(spec(), TARGET))
    assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
    assert "suspend" not in job["spec"]["runPolicy"]
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "team-a"


def test_a_trainjob_for_kueue_is_labelled_and_suspended() -> None:
    job = trainjob(spec(), TARGET, KUEUE, trainer_bundle(spec(), TARGET), runtime="torch")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["suspend"] is True


def test_a_queue_outside_the_allow_list_is_refused_for_kueue_too() -> None:
    with pytest.raises(SpecError, match="queue"):
        kubeflow_job(spec(queue="other"), TARGET, KUEUE, code_bundle(spec(), TARGET))


def test_kueue_cannot_queue_volcano_jobs_and_unknown_systems_are_refused() -> None:
    with pytest.raises(SpecError, match="Kueue does not manage the volcano engine"):
        VolcanoEngine(queue_system="kueue")
    with pytest.raises(SpecError, match="queue_system 'slurm' is not known"):
        KubeflowEngine(queue_system="slurm")
    assert KubeflowEngine(queue_system="kueue").options.queue_system == "kueue"


def workload(*conditions: dict[str, str], **status: Any) -> dict[str, Any]:
    return {"status": {"conditions": list(conditions), **status}}


def test_a_pending_workload_says_which_resource_is_short_in_which_queue() -> None:
    message = (
        "couldn't assign flavors to pod set master: insufficient unused quota for cpu in "
        "flavor default-flavor, 1 more needed"
    )
    pending = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message}
    assert describe_workload("team-a", workload(pending)) == (
        f"waiting in Kueue LocalQueue team-a: {message}"
    )
    assert describe_workload("team-a", workload()) == "waiting in Kueue LocalQueue team-a for quota"


def test_an_admitted_or_finished_workload_gives_no_reason() -> None:
    admitted = {"type": "Admitted", "status": "True"}
    reserved = {"type": "QuotaReserved", "status": "True"}
    assert describe_workload("q", workload(reserved, admitted)) is None
    assert describe_workload("q", workload(reserved, admission={"clusterQueue": "cq"})) == (
        "quota reserved in ClusterQueue cq; waiting for admission checks"
    )
    assert describe_workload("q", workload({"type": "Finished", "status": "True"})) is None


def test_a_preempted_workload_says_so_and_that_it_waits_again() -> None:
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted",
               "message": "Preempted to accommodate a higher priority Workload"}  # fmt: skip
    preempted = {"type": "Preempted", "status": "True", "reason": "InClusterQueue",
                 "message": "Preempted to accommodate a workload (UID: 1) in the ClusterQueue"}  # fmt: skip
    reason = describe_workload("q", workload(evicted, preempted))
    assert reason == (
        "preempted by Kueue (Preempted to accommodate a workload (UID: 1) in the ClusterQueue); "
        "waiting in LocalQueue q to be admitted again"
    )
