"""What each cluster engine does with `%restart`, `%maxRestarts`, `%elastic` and
`%checkpointVolume` (docs/fault-tolerance.md): maps them onto its controller's own fields, or
refuses them in words before asking any cluster."""

from typing import Any

import pytest

from distrun.client.cli import build_parser, overrides_from_args
from distrun.core.errors import Forbidden, SpecError
from distrun.core.header import parse_cell, render_header
from distrun.core.spec import JobSpec
from distrun.engines.kube.engine import KubeEngine, Phase, describe
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.manifests.common import ClusterOptions, Target
from distrun.engines.kube.manifests.configmap import code_bundle
from distrun.engines.kube.manifests.kubeflow import kubeflow_job
from distrun.engines.kube.manifests.trainer import restart_runtime, trainer_bundle, trainjob
from distrun.engines.kube.manifests.volcano import volcano_bundle, volcano_job
from distrun.engines.kube.trainer import TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine

TARGET = Target("train-abcde", "alice", "alice")
OPTIONS = ClusterOptions()
THREE = {"master": {"replicas": 1}, "worker": {"replicas": 2}}


def spec(framework: str = "pytorch", **fields: Any) -> JobSpec:
    return JobSpec.from_dict({"framework": framework, "code": "print(1)\n", **fields})


def volcano(s: JobSpec) -> dict[str, Any]:
    return volcano_job(s, TARGET, OPTIONS, volcano_bundle(s, TARGET))


def kubeflow(s: JobSpec) -> dict[str, Any]:
    return kubeflow_job(s, TARGET, OPTIONS, code_bundle(s, TARGET))


async def refusal(engine: type[KubeEngine], s: JobSpec) -> SpecError:
    """The engine's refusal of `s`, before any cluster is asked (there is none here)."""
    with pytest.raises(SpecError) as refused:
        await engine().submit(s, "alice")
    return refused.value


# -- Volcano: every restart is of the whole job ------------------------------------------------


@pytest.mark.parametrize(("restarts", "max_retry"), [(0, 1), (1, 2), (3, 4)])
def test_volcano_maps_a_whole_job_restart_to_restartjob_counted_by_max_retry(
    restarts: int, max_retry: int
) -> None:
    body = volcano(spec(restart="job", max_restarts=restarts))["spec"]
    assert body["policies"] == [{"events": ["PodEvicted", "PodFailed"], "action": "RestartJob"}]
    assert body["maxRetry"] == max_retry  # Volcano counts the failure that ends the job


def test_volcano_max_restarts_counts_for_the_job_over_backoff_limit() -> None:
    body = volcano(spec(max_restarts=2, backoff_limit=5, restart_policy="ExitCode"))["spec"]
    assert body["maxRetry"] == 3
    assert {"events": ["PodFailed"], "action": "TerminateJob"} in body["policies"]
    assert {"exitCode": 137, "action": "RestartJob"} in body["policies"]


def test_volcano_without_restarts_still_ends_the_job_at_the_first_failure() -> None:
    body = volcano(spec())["spec"]
    assert body["policies"] == [{"events": ["PodEvicted", "PodFailed"], "action": "TerminateJob"}]
    assert body["maxRetry"] == 1


def test_volcano_replicas_learn_their_attempt_from_the_controllers_retry_count() -> None:
    for task in volcano(spec(restart="job"))["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        (restart,) = [e for e in container["env"] if e["name"] == "DISTRUN_RESTART"]
        path = restart["valueFrom"]["fieldRef"]["fieldPath"]
        assert path == "metadata.annotations['volcano.sh/job-retry-count']"


def test_trainer_replicas_learn_their_attempt_from_the_jobsets_restart_count() -> None:
    """The only restart a TrainJob gets is JobSet's restart of the whole group (its runtime's
    failurePolicy): JobSet writes its count into every pod, as Volcano its retryCount."""
    s = spec(roles=THREE)
    trainer = trainjob(s, TARGET, OPTIONS, trainer_bundle(s, TARGET), runtime="torch-distributed")
    (restart,) = [e for e in trainer["spec"]["trainer"]["env"] if e["name"] == "DISTRUN_RESTART"]
    path = restart["valueFrom"]["fieldRef"]["fieldPath"]
    assert path == "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']"


@pytest.mark.parametrize("fields", [{}, {"restart": "replica", "max_restarts": 2}])
def test_operator_replicas_get_the_first_run_the_job_never_restarts_as_a_whole(
    fields: dict[str, Any],
) -> None:
    """The operator restarts a replica in its pod, never the job: DISTRUN_RESTART is 0, there
    and after a restart in place, as on the local engine under %restart=replica."""
    job = kubeflow(spec(roles=THREE, env={"DISTRUN_RESTART": "7"}, **fields))
    for replica_spec in job["spec"]["pytorchReplicaSpecs"].values():
        (container,) = replica_spec["template"]["spec"]["containers"]
        assert [e for e in container["env"] if e["name"] == "DISTRUN_RESTART"] == [
            {"name": "DISTRUN_RESTART", "value": "0"}
        ]


async def test_volcano_refuses_a_replica_restarting_alone() -> None:
    error = await refusal(VolcanoEngine, spec(restart="replica", max_restarts=1))
    assert error.field == "restart"
    assert "restarts the whole job there" in str(error) and "kubeflow" in str(error)


async def test_volcano_refuses_elastic_and_names_where_it_runs() -> None:
    error = await refusal(VolcanoEngine, spec(roles=THREE, elastic="2:3"))
    assert error.field == "elastic"
    assert "PyTorchJob elasticPolicy" in str(error)


def test_a_volcano_jobs_status_shows_the_attempt_and_whole_job_scope() -> None:
    s = spec("generic", roles={"worker": {"replicas": 2}}, max_restarts=2)
    obj = {"metadata": {"name": "j", "annotations": {}}, "spec": {"maxRetry": 3}}
    obj["status"] = {"retryCount": 1, "state": {"phase": "Running"}}
    job = describe("volcano", obj, s, {}, VolcanoEngine().phase(obj))
    assert (job.attempt, job.max_restarts, job.restart_scope) == (2, 2, "job")


# -- the Training Operator: each replica alone; elastic through elasticPolicy ------------------


async def test_the_training_operator_refuses_a_whole_job_restart_and_says_what_to_use() -> None:
    error = await refusal(KubeflowEngine, spec(restart="job", max_restarts=2))
    assert error.field == "restart"
    assert "volcano engine (RestartJob)" in str(error) and "%restart=replica" in str(error)


async def test_the_training_operator_refuses_max_restarts_of_a_synchronous_job_alone() -> None:
    error = await refusal(KubeflowEngine, spec(max_restarts=2))
    assert error.field == "max_restarts"
    assert "write %restart=replica with it" in str(error)


def test_the_training_operator_counts_max_restarts_of_single_replicas_for_the_job() -> None:
    job = kubeflow(spec(restart="replica", max_restarts=4, backoff_limit=1))
    assert job["spec"]["runPolicy"]["backoffLimit"] == 4
    for replica_spec in job["spec"]["pytorchReplicaSpecs"].values():
        assert replica_spec["restartPolicy"] == "OnFailure"
    assert "elasticPolicy" not in job["spec"]


def test_elastic_maps_to_the_pytorchjobs_elastic_policy_with_c10d_on_master_0() -> None:
    job = kubeflow(spec(roles=THREE, elastic="2:4", max_restarts=5))
    policy = job["spec"]["elasticPolicy"]
    assert policy["minReplicas"] == 2 and policy["maxReplicas"] == 4
    assert policy["rdzvBackend"] == "c10d" and policy["maxRestarts"] == 5
    assert policy["rdzvHost"] == "train-abcde-master-0" and policy["rdzvPort"] == 23456
    assert policy["rdzvId"] == "train-abcde"
    assert {"key": "last_call_timeout", "value": "2"} in policy["rdzvConf"]
    assert job["spec"]["runPolicy"]["backoffLimit"] == 5
    for replica_spec in job["spec"]["pytorchReplicaSpecs"].values():
        assert replica_spec["restartPolicy"] == "OnFailure"  # the pod restarts and rejoins
        (container,) = replica_spec["template"]["spec"]["containers"]
        assert container["command"][:4] == [
            "python",
            "-m",
            "torch.distributed.run",
            "--no-python",
        ]
        assert container["command"][4:] == ["python", "main.py"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_a_fixed_pytorchjob_runs_the_code_itself_without_an_elastic_policy() -> None:
    job = kubeflow(spec(roles=THREE))
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "main.py"]
    assert "elasticPolicy" not in job["spec"]


def test_an_elastic_jobs_own_setting_of_the_store_sharing_wins() -> None:
    job = kubeflow(
        spec(roles=THREE, elastic="2:3", env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"})
    )
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    values = [e["value"] for e in container["env"] if e["name"].startswith("TORCH_DISABLE")]
    assert values == ["0"]


# -- Trainer v2: a whole-job restart on the job's own runtime; the rest refused in words ------

RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed", "resourceVersion": "7", "uid": "u"},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                            },
                            "spec": {
                                "template": {
                                    "spec": {"containers": [{"name": "node", "image": "torch"}]}
                                }
                            },
                        },
                    }
                ]
            }
        },
    },
}


@pytest.mark.parametrize(("fields", "limit"), [({"restart": "job"}, 0), ({"max_restarts": 2}, 2)])
def test_a_trainer_whole_job_restart_runs_on_its_own_runtime_restarting_the_jobset(
    fields: dict[str, Any], limit: int
) -> None:
    """JobSet's failurePolicy.maxRestarts is the count; each child Job fails at its first
    failed pod (no restart in place while the peers wait); the rest of the runtime as it was."""
    s = spec(**fields)
    runtime = restart_runtime(s, TARGET, RUNTIME)
    assert (runtime["kind"], runtime["metadata"]["name"]) == ("TrainingRuntime", TARGET.job_id)
    assert runtime["metadata"]["namespace"] == TARGET.namespace
    assert "resourceVersion" not in runtime["metadata"] and "uid" not in runtime["metadata"]
    jobset = runtime["spec"]["template"]["spec"]
    assert jobset["failurePolicy"] == {"maxRestarts": limit}
    [node] = jobset["replicatedJobs"]
    assert node["template"]["spec"]["backoffLimit"] == 0
    assert node["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert node["template"]["spec"]["template"]["spec"]["containers"] == [
        {"name": "node", "image": "torch"}
    ]
    assert runtime["spec"]["mlPolicy"] == RUNTIME["spec"]["mlPolicy"]
    assert "failurePolicy" not in RUNTIME["spec"]["template"]["spec"]  # a copy
    job = trainjob(s, TARGET, OPTIONS, trainer_bundle(s, TARGET), runtime="torch-distributed")
    assert job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
        "name": TARGET.job_id,
    }


def test_a_trainjob_without_restarts_keeps_the_configured_runtime_and_says_its_attempt() -> None:
    s = spec()
    job = trainjob(s, TARGET, OPTIONS, trainer_bundle(s, TARGET), runtime="torch-distributed")
    assert job["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    [restart] = [e for e in job["spec"]["trainer"]["env"] if e["name"] == "DISTRUN_RESTART"]
    path = restart["valueFrom"]["fieldRef"]["fieldPath"]
    assert path == "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"restart": "replica"}, "restart", "write %restart=job"),
        ({"restart_policy": "ExitCode"}, "restart_policy", "restarts the whole group whatever"),
    ],
)
async def test_trainer_refuses_what_its_jobset_cannot_restart(
    fields: dict[str, Any], field: str, words: str
) -> None:
    error = await refusal(TrainerEngine, spec(**fields))
    assert error.field == field
    assert words in str(error)


async def test_trainer_refuses_elastic_and_names_where_it_runs() -> None:
    error = await refusal(TrainerEngine, spec(roles=THREE, elastic="2:3"))
    assert error.field == "elastic"
    assert "kubeflow engine (PyTorchJob elasticPolicy)" in str(error)


def test_describe_without_restarts_is_attempt_one_of_none() -> None:
    obj = {"metadata": {"name": "j", "annotations": {}}}
    job = describe("kubeflow", obj, spec(), {}, Phase(None))
    assert (job.attempt, job.max_restarts, job.restart_scope) == (1, 0, None)


# -- checkpoints on a cluster: the claim the user names -----------------------------------------


def containers_and_volumes(job: dict[str, Any]) -> list[tuple[dict[str, Any], list[Any]]]:
    """Every (container, pod volumes) pair of a Volcano job's tasks or a PyTorchJob's replicas."""
    if job["kind"] == "Job":
        pods = [task["template"]["spec"] for task in job["spec"]["tasks"]]
    else:
        pods = [r["template"]["spec"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    return [(pod["containers"][0], pod["volumes"]) for pod in pods]


@pytest.mark.parametrize("build", [volcano, kubeflow])
def test_a_named_checkpoint_claim_is_every_replicas_checkpoint_directory(build: Any) -> None:
    job = build(spec(roles=THREE, checkpoint_volume="ckpt"))
    for container, volumes in containers_and_volumes(job):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DISTRUN_CHECKPOINT_DIR"] == "/distrun/checkpoints/train-abcde"
        assert {"name": "distrun-checkpoints", "mountPath": "/distrun/checkpoints"} in container[
            "volumeMounts"
        ]
        claim = {"name": "distrun-checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}}
        assert claim in volumes


@pytest.mark.parametrize("build", [volcano, kubeflow])
def test_without_a_claim_no_checkpoint_directory_is_promised(build: Any) -> None:
    for container, volumes in containers_and_volumes(build(spec(roles=THREE))):
        assert "DISTRUN_CHECKPOINT_DIR" not in {e["name"] for e in container["env"]}
        assert [v["name"] for v in volumes] == ["distrun-code"]


def test_trainer_patches_the_checkpoint_claim_into_its_nodes() -> None:
    s = spec(checkpoint_volume="ckpt")
    job = trainjob(s, TARGET, OPTIONS, trainer_bundle(s, TARGET), runtime="torch-distributed")
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod = patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert {"name": "distrun-checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}} in pod[
        "volumes"
    ]
    assert pod["containers"][0]["volumeMounts"][-1]["mountPath"] == "/distrun/checkpoints"
    env = {e["name"]: e.get("value") for e in job["spec"]["trainer"]["env"]}
    assert env["DISTRUN_CHECKPOINT_DIR"] == "/distrun/checkpoints/train-abcde"


def test_a_checkpoint_claim_that_is_no_name_is_refused_on_its_field() -> None:
    with pytest.raises(SpecError) as refused:
        spec(checkpoint_volume="../etc")
    assert refused.value.field == "checkpoint_volume"


def test_the_cell_and_the_command_line_name_the_checkpoint_claim() -> None:
    parsed = parse_cell("%%distrun\n%framework=pytorch\n%checkpointVolume=ckpt\nprint(1)\n")
    assert parsed.spec_fields["checkpoint_volume"] == "ckpt"
    assert "%checkpointVolume=ckpt" in render_header(parsed.spec_fields)
    args = build_parser().parse_args(["run", "train.py", "--checkpoint-volume", "ckpt"])
    assert overrides_from_args(args) == {"checkpoint_volume": "ckpt"}


# -- Resuming an earlier job's checkpoints -----------------------------------------------------


@pytest.mark.parametrize("build", [volcano, kubeflow])
def test_a_resumed_job_continues_the_earlier_jobs_checkpoint_directory(build: Any) -> None:
    job = build(spec(roles=THREE, checkpoint_volume="ckpt", resume_from="train-xyz12"))
    for container, _ in containers_and_volumes(job):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DISTRUN_CHECKPOINT_DIR"] == "/distrun/checkpoints/train-xyz12"
        assert env["DISTRUN_JOB_ID"] == "train-abcde"


@pytest.mark.parametrize("engine", [VolcanoEngine, KubeflowEngine, TrainerEngine])
async def test_resuming_without_the_checkpoint_claim_is_refused_before_the_cluster(
    engine: type[KubeEngine],
) -> None:
    refused = await refusal(engine, spec(resume_from="train-xyz12"))
    assert refused.field == "resume_from"
    assert "%checkpointVolume" in str(refused)


def test_the_cell_and_the_command_line_name_the_job_to_resume() -> None:
    parsed = parse_cell("%%distrun\n%framework=pytorch\n%resumeFrom=train-xyz12\nprint(1)\n")
    assert parsed.spec_fields["resume_from"] == "train-xyz12"
    assert "%resumeFrom=train-xyz12" in render_header(parsed.spec_fields)
    args = build_parser().parse_args(["run", "train.py", "--resume-from", "train-xyz12"])
    assert overrides_from_args(args) == {"resume_from": "train-xyz12"}


class FakeRuntimeApi:
    """The requests a Trainer whole-job restart makes around its TrainJob, answered from
    memory; `refuse` names the one that fails."""

    def __init__(self, refuse: str = "") -> None:
        self.refuse, self.calls = refuse, []

    async def _answer(self, call: tuple[Any, ...], answer: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(call)
        if call[0] == self.refuse:
            raise Forbidden(f"the cluster does not allow us to {call[-1]}: forbidden")
        return answer

    async def get_cluster(self, res: Any, name: str, what: str) -> dict[str, Any]:
        return await self._answer(("get_cluster", res.plural, name, what), RUNTIME)

    async def create(self, res: Any, ns: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        made = {**body, "metadata": {**body["metadata"], "uid": "uid-1", "namespace": ns}}
        return await self._answer(("create", res.plural, body["metadata"]["name"], what), made)

    async def patch(self, res: Any, ns: str, name: str, ops: Any, what: str) -> dict[str, Any]:
        return await self._answer(("patch", res.plural, name, ops[0]["value"][0]["uid"], what), {})

    async def delete(self, res: Any, ns: str, name: str, what: str, *_: Any) -> dict[str, Any]:
        return await self._answer(("delete", res.plural, name, what), {})


def plural_and_name(api: FakeRuntimeApi) -> list[tuple[str, ...]]:
    return [call[:3] for call in api.calls]


async def test_a_trainer_restart_runtime_is_made_before_its_trainjob_and_handed_to_it() -> None:
    engine, s, api = TrainerEngine(), spec(restart="job"), FakeRuntimeApi()
    prepared = await engine.prepare_job(api, s, TARGET)  # type: ignore[arg-type]
    job = await engine._create_job(api, s, TARGET, {"metadata": {"name": TARGET.job_id}}, prepared)  # type: ignore[arg-type]
    await engine._adopt(api, {**job, "apiVersion": "v", "kind": "TrainJob"}, prepared)  # type: ignore[arg-type]
    assert plural_and_name(api) == [
        ("get_cluster", "clustertrainingruntimes", "torch-distributed"),
        ("create", "trainingruntimes", TARGET.job_id),
        ("create", "trainjobs", TARGET.job_id),
        ("patch", "trainingruntimes", TARGET.job_id),
    ]
    assert api.calls[-1][3] == "uid-1"  # owned by the TrainJob just made


@pytest.mark.parametrize("refused", ["create", "patch"])
async def test_a_trainer_restart_runtime_never_outlives_a_trainjob_that_failed(
    refused: str,
) -> None:
    """The TrainJob cannot be made, or cannot be given its runtime: nothing is left behind."""
    engine, s = TrainerEngine(), spec(restart="job")
    api = FakeRuntimeApi()
    prepared = await engine.prepare_job(api, s, TARGET)  # type: ignore[arg-type]
    api.refuse = refused
    with pytest.raises(Forbidden):
        job = await engine._create_job(
            api, s, TARGET, {"metadata": {"name": TARGET.job_id}}, prepared
        )  # type: ignore[arg-type]
        await engine._adopt(api, {**job, "apiVersion": "v", "kind": "TrainJob"}, prepared)  # type: ignore[arg-type]
    deleted = [call[1:3] for call in api.calls if call[0] == "delete"]
    assert ("trainingruntimes", TARGET.job_id) in deleted
    assert (refused == "patch") == (("trainjobs", TARGET.job_id) in deleted)


async def test_a_trainer_restart_says_what_to_grant_when_the_runtime_cannot_be_read() -> None:
    api = FakeRuntimeApi(refuse="get_cluster")
    with pytest.raises(Forbidden, match=r"trainer\.readClusterRuntimes"):
        await TrainerEngine().prepare_job(api, spec(restart="job"), TARGET)  # type: ignore[arg-type]
    assert [call[0] for call in api.calls] == ["get_cluster"]  # nothing made
