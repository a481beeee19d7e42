"""The pure spec -> Kubernetes object builders: webhook rules, labels, env, the code ConfigMap."""

import base64
import json
import runpy
import sys
from typing import Any

import pytest

from distrun.core.errors import LimitExceeded, SpecError
from distrun.core.spec import JobSpec, Limits
from distrun.engines.kube.manifests.common import (
    ANNOTATION_OWNER,
    ANNOTATION_SPEC,
    CODE_DIR,
    HARDENED_CONTAINER,
    ClusterOptions,
    Target,
    escape_env_value,
    job_labels,
    owner_label,
)
from distrun.engines.kube.manifests.configmap import (
    CONFIGMAP_MAX_BYTES,
    code_bundle,
    configmap_bytes,
)
from distrun.engines.kube.manifests.kubeflow import check_webhook_rules, kubeflow_job
from distrun.engines.kube.manifests.trainer import trainer_bundle, trainjob
from distrun.engines.kube.manifests.volcano import volcano_bundle, volcano_job

TARGET = Target("train-abcde", "alice", "alice@example.org")
OPTIONS = ClusterOptions()


def spec(framework: str = "pytorch", **fields: Any) -> JobSpec:
    return JobSpec.from_dict({"framework": framework, "code": "print('hi')\n", **fields})


def kubeflow(s: JobSpec, options: ClusterOptions = OPTIONS) -> dict[str, Any]:
    return kubeflow_job(s, TARGET, options, code_bundle(s, TARGET))


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize(
    ("framework", "kind", "key", "container"),
    [
        ("pytorch", "PyTorchJob", "pytorchReplicaSpecs", "pytorch"),
        ("tensorflow", "TFJob", "tfReplicaSpecs", "tensorflow"),
        ("xgboost", "XGBoostJob", "xgbReplicaSpecs", "xgboost"),
        ("paddle", "PaddleJob", "paddleReplicaSpecs", "paddle"),
        ("jax", "JAXJob", "jaxReplicaSpecs", "jax"),
        ("mpi", "MPIJob", "mpiReplicaSpecs", "mpi"),
    ],
)
def test_kubeflow_job_uses_the_kinds_replica_types_and_container_name(
    framework: str, kind: str, key: str, container: str
) -> None:
    job = kubeflow(spec(framework))
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == kind
    replica_specs = job["spec"][key]
    for replica_type, replica_spec in replica_specs.items():
        assert replica_type[0].isupper()
        (pod_container,) = replica_spec["template"]["spec"]["containers"]
        assert pod_container["name"] == container
        assert pod_container["image"]


def test_pytorch_job_has_one_master_and_the_requested_workers() -> None:
    job = kubeflow(spec(roles={"worker": {"replicas": 3}}))
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1
    assert specs["Worker"]["replicas"] == 3


def test_every_engine_asks_for_one_pytorch_process_per_replica(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the operators' "auto" (torchrun: one process per host CPU on a CPU node): the
    PyTorchJob's nprocPerNode, the TrainJob's numProcPerNode and the launcher's environment
    all say 1, as the local engine does."""
    s = spec(roles={"worker": {"replicas": 1}})
    assert kubeflow(s)["spec"]["nprocPerNode"] == "1"
    assert "nprocPerNode" not in kubeflow(spec("tensorflow"))["spec"]
    bundle = trainer_bundle(s, TARGET)
    job = trainjob(s, TARGET, OPTIONS, bundle, runtime="torch-distributed")
    assert job["spec"]["trainer"]["numProcPerNode"] == 1
    seen = run_launcher(
        tmp_path, bundle, {"DISTRUN_GROUP": "node", "JOB_COMPLETION_INDEX": "1"}, monkeypatch
    )
    assert seen["env"]["PET_NPROC_PER_NODE"] == "1"


def test_the_training_operator_engine_refuses_exit_code_restarts_it_would_not_limit() -> None:
    with pytest.raises(SpecError, match="without limit") as refused:
        kubeflow(spec(restart_policy="ExitCode", backoff_limit=2))
    assert refused.value.field == "restart_policy"


def test_generic_framework_has_no_kubeflow_kind() -> None:
    with pytest.raises(SpecError, match="no job kind for generic"):
        kubeflow(spec("generic"))


def test_webhook_rules_reject_two_pytorch_masters() -> None:
    job = kubeflow(spec())
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    with pytest.raises(SpecError, match="exactly one Master"):
        check_webhook_rules(job)


def test_webhook_rules_reject_an_unknown_replica_type() -> None:
    job = kubeflow(spec())
    job["spec"]["pytorchReplicaSpecs"]["Chief"] = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    with pytest.raises(SpecError, match="no replica type 'Chief'"):
        check_webhook_rules(job)


def test_webhook_rules_reject_a_wrongly_named_container() -> None:
    job = kubeflow(spec("tensorflow"))
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"
    with pytest.raises(SpecError, match="container named 'tensorflow'"):
        check_webhook_rules(job)


def test_webhook_rules_require_one_mpi_launcher() -> None:
    job = kubeflow(spec("mpi"))
    del job["spec"]["mpiReplicaSpecs"]["Launcher"]
    with pytest.raises(SpecError, match="exactly one Launcher"):
        check_webhook_rules(job)


def test_run_policy_defaults_stop_running_pods_at_the_end_and_do_not_retry() -> None:
    policy = kubeflow(spec())["spec"]["runPolicy"]
    assert policy == {"cleanPodPolicy": "Running", "backoffLimit": 0}


def test_run_policy_carries_deadlines_ttl_and_gang_scheduling() -> None:
    s = spec(
        active_deadline_seconds=600,
        ttl_seconds_after_finished=60,
        backoff_limit=2,
        clean_pod_policy="None",
        queue="research",
        roles={"worker": {"replicas": 3}},
    )
    options = ClusterOptions(default_priority_class="low", allowed_queues=("research",))
    policy = kubeflow(s, options)["spec"]["runPolicy"]
    assert policy["activeDeadlineSeconds"] == 600
    assert policy["ttlSecondsAfterFinished"] == 60
    assert policy["backoffLimit"] == 2
    assert policy["cleanPodPolicy"] == "None"
    assert policy["schedulingPolicy"] == {
        "minAvailable": 4,
        "queue": "research",
        "priorityClass": "low",
    }


def test_resources_gpus_and_cluster_options_reach_the_pod() -> None:
    s = spec(
        roles={"worker": {"replicas": 1, "resources": {"cpu": "2", "memory": "4Gi", "gpu": 1}}}
    )
    options = ClusterOptions(
        images={"pytorch": "registry.example/torch:1"},
        image_pull_secrets=("regcred",),
        service_account="trainer",
        node_selector={"pool": "gpu"},
        tolerations=({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},),
    )
    worker = kubeflow(s, options)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    container = worker["spec"]["containers"][0]
    limits = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert container["resources"] == {"requests": limits, "limits": limits}
    assert container["image"] == "registry.example/torch:1"
    assert worker["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert worker["spec"]["serviceAccountName"] == "trainer"
    assert worker["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert worker["spec"]["tolerations"][0]["key"] == "gpu"


def test_the_specs_image_wins_over_the_configured_one() -> None:
    s = spec(image="python:3.12")
    options = ClusterOptions(images={"pytorch": "registry.example/torch:1"})
    master = kubeflow(s, options)["spec"]["pytorchReplicaSpecs"]["Master"]
    assert master["template"]["spec"]["containers"][0]["image"] == "python:3.12"


def test_every_object_carries_identity_labels_and_the_exact_owner() -> None:
    s = spec()
    bundle = code_bundle(s, TARGET)
    job = kubeflow_job(s, TARGET, OPTIONS, bundle)
    labels = job_labels(TARGET.job_id, TARGET.owner)
    assert labels["app.kubernetes.io/instance"] == "train-abcde"
    assert labels["app.kubernetes.io/managed-by"] == "distrun"
    for obj in (job, bundle.configmap):
        assert obj["metadata"]["labels"] == labels
        assert obj["metadata"]["annotations"][ANNOTATION_OWNER] == "alice@example.org"
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert master["metadata"]["labels"] == labels
    stored = json.loads(job["metadata"]["annotations"][ANNOTATION_SPEC])
    assert stored["code"] == "print('hi')\n"


def test_owner_label_is_a_valid_label_value_that_tells_similar_names_apart() -> None:
    names = ["a.b", "a_b", "a b", "ünïcode", "x" * 300, "-leading", "@"]
    values = [owner_label(name) for name in names]
    assert len(set(values)) == len(names)
    for value in values:
        assert len(value) <= 63
        assert value[0].isalnum() and value[-1].isalnum()
        assert all(c.isalnum() or c in "-_." for c in value)


def test_job_ids_that_are_not_dns_labels_are_refused() -> None:
    for bad in ("Upper", "9lives", "a" * 41, "trailing-", "with_underscore"):
        with pytest.raises(SpecError, match="DNS-1035"):
            Target(bad, "ns", "alice")


def test_kubeflow_template_gives_each_replica_its_name_without_a_shell() -> None:
    job = kubeflow(spec(env={"TOKEN": "a$(HOME)b"}))
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    env = env_of(worker)
    assert env["TOKEN"] == "a$$(HOME)b"  # the kubelet must not expand the user's text
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["DISTRUN_JOB_ID"] == "train-abcde"
    assert env["DISTRUN_ROLE"] == "worker"
    index_ref = env["DISTRUN_REPLICA_INDEX"]["fieldRef"]["fieldPath"]
    assert index_ref == "metadata.labels['training.kubeflow.org/replica-index']"
    assert env["DISTRUN_REPLICA"] == "$(DISTRUN_ROLE)-$(DISTRUN_REPLICA_INDEX)"
    assert worker["command"] == ["python", "main.py"]
    assert worker["workingDir"] == CODE_DIR
    assert [name for name in env if name == "TOKEN"] == ["TOKEN"]


def test_escaping_doubles_every_dollar() -> None:
    assert escape_env_value("$$(X) $ $(Y)") == "$$$$(X) $$ $$(Y)"


def test_ipython_code_runs_through_ipython() -> None:
    s = spec(code="!echo hi\n")
    master = kubeflow(s)["spec"]["pytorchReplicaSpecs"]["Master"]
    assert master["template"]["spec"]["containers"][0]["command"][-3:] == [
        "IPython",
        "--no-banner",
        "main.ipy",
    ]


def test_configmap_keeps_text_as_data_binary_as_binary_data_and_maps_paths() -> None:
    files = {
        "data/config.yaml": base64.b64encode(b"lr: 0.1\n").decode(),
        "weights.bin": base64.b64encode(b"\xff\x00\xfe").decode(),
    }
    bundle = code_bundle(spec(files=files), TARGET)
    cm = bundle.configmap
    assert cm["metadata"]["name"] == "train-abcde"
    items = {item["path"]: item["key"] for item in bundle.volume["configMap"]["items"]}
    assert cm["data"][items["main.py"]] == "print('hi')\n"
    assert cm["data"][items["data/config.yaml"]] == "lr: 0.1\n"
    assert base64.b64decode(cm["binaryData"][items["weights.bin"]]) == b"\xff\x00\xfe"
    assert all("/" not in key for key in {**cm["data"], **cm["binaryData"]})
    assert bundle.mount == {"name": "distrun-code", "mountPath": CODE_DIR, "readOnly": True}


def test_configmap_over_one_mebibyte_says_how_much_and_what_to_do() -> None:
    big = base64.b64encode(b"x" * (CONFIGMAP_MAX_BYTES + 10)).decode()
    s = JobSpec.from_dict(
        {"framework": "pytorch", "code": "", "files": {"big.txt": big}},
        Limits(max_payload_bytes=10 * CONFIGMAP_MAX_BYTES),
    )
    with pytest.raises(LimitExceeded, match=r"1,048,586 bytes.*1 MiB.*by 10;.*volume"):
        code_bundle(s, TARGET)


def test_configmap_size_counts_binary_data_decoded() -> None:
    assert configmap_bytes({"a": "é"}, {"b": base64.b64encode(b"123").decode()}) == 5


def test_shipped_files_cannot_replace_the_code_or_distruns_own_files() -> None:
    content = base64.b64encode(b"x").decode()
    for path in ("main.py", ".distrun/launch.py"):
        with pytest.raises(SpecError, match="cannot be named"):
            code_bundle(spec(files={path: content}), TARGET)


def test_volcano_job_has_one_task_per_role_gang_and_restart_policies() -> None:
    s = spec(
        "tensorflow",
        roles={"chief": {"replicas": 1}, "ps": {"replicas": 2}, "worker": {"replicas": 2}},
    )
    job = volcano_job(s, TARGET, OPTIONS, volcano_bundle(s, TARGET))
    body = job["spec"]
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["kind"] == "Job"
    assert body["schedulerName"] == "volcano"
    assert body["minAvailable"] == 5
    assert body["queue"] == "default"
    assert body["plugins"] == {"env": [], "svc": []}
    assert body["policies"] == [{"events": ["PodEvicted", "PodFailed"], "action": "TerminateJob"}]
    tasks = {task["name"]: task for task in body["tasks"]}
    assert [task["name"] for task in body["tasks"]] == ["chief", "ps", "worker"]
    assert tasks["chief"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert "policies" not in tasks["worker"]
    assert tasks["ps"]["replicas"] == 2


@pytest.mark.parametrize("restarts", [0, 1, 5])
def test_volcano_max_retry_allows_exactly_the_restarts_asked_for(restarts: int) -> None:
    # Volcano fails a job once its retry count, counting the failure at hand, reaches maxRetry
    # (and its webhook would turn 0 into 3).
    s = spec("pytorch", backoff_limit=restarts, restart_policy="OnFailure")
    assert volcano_job(s, TARGET, OPTIONS, volcano_bundle(s, TARGET))["spec"]["maxRetry"] == (
        restarts + 1
    )


@pytest.mark.parametrize("policy", ["Never", "OnFailure", "Always", "ExitCode"])
def test_volcano_restarts_as_the_local_engine_does_for_each_restart_policy(policy: str) -> None:
    """Pods never restart in place (Volcano would not count it); Volcano's policies restart the
    job as the spec asks, or end it keeping the failed pod (TerminateJob)."""
    s = spec("pytorch", backoff_limit=2, restart_policy=policy)
    body = volcano_job(s, TARGET, OPTIONS, volcano_bundle(s, TARGET))["spec"]
    assert {t["template"]["spec"]["restartPolicy"] for t in body["tasks"]} == {"Never"}

    def action(event: str, code: int) -> str:
        for rule in body["policies"]:  # Volcano's order: the first that matches decides
            if rule.get("exitCode") == code or event in rule.get("events", ()):
                return str(rule["action"])
        return "none"

    restart = {"Never": False, "OnFailure": True, "Always": True, "ExitCode": True}[policy]
    expected = {
        ("PodFailed", 1): "RestartJob" if policy in ("OnFailure", "Always") else "TerminateJob",
        ("PodFailed", 137): "RestartJob" if restart else "TerminateJob",
        ("PodEvicted", -1): "RestartJob" if restart else "TerminateJob",
    }
    assert {key: action(*key) for key in expected} == expected


def test_volcano_queue_and_priority_come_from_the_spec_or_the_defaults() -> None:
    s = spec(priority_class="high")
    options = ClusterOptions(default_queue="team", allowed_priority_classes=("high", "low"))
    body = volcano_job(s, TARGET, options, volcano_bundle(s, TARGET))["spec"]
    assert body["queue"] == "team" and body["priorityClassName"] == "high"


@pytest.mark.parametrize(
    ("field", "value", "options", "offer"),
    [
        ("queue", "research", ClusterOptions(), "none: leave queue out"),
        ("queue", "vip", ClusterOptions(default_queue="team"), "team"),
        ("queue", "vip", ClusterOptions(allowed_queues=("a", "b")), "a, b"),
        ("priority_class", "critical", ClusterOptions(default_priority_class="low"), "low"),
    ],
)
def test_only_the_administrators_queues_and_priority_classes_may_be_named(
    field: str, value: str, options: ClusterOptions, offer: str
) -> None:
    s = spec(**{field: value})
    for build in (
        lambda: kubeflow(s, options),
        lambda: volcano_job(s, TARGET, options, volcano_bundle(s, TARGET)),
    ):
        with pytest.raises(SpecError, match=f"{field} '{value}' is not one") as caught:
            build()
        assert caught.value.field == field and str(caught.value).endswith(offer)


def test_every_replica_container_is_hardened_and_gets_no_api_token() -> None:
    s = spec(roles={"master": {"replicas": 1}, "worker": {"replicas": 2}})
    pods = [
        t["template"]["spec"] for t in kubeflow(s, OPTIONS)["spec"]["pytorchReplicaSpecs"].values()
    ]
    pods += [
        t["template"]["spec"]
        for t in volcano_job(s, TARGET, OPTIONS, volcano_bundle(s, TARGET))["spec"]["tasks"]
    ]
    for pod in pods:
        assert pod["automountServiceAccountToken"] is False
        [container] = pod["containers"]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    strict = kubeflow(s, ClusterOptions(run_as_non_root=True))["spec"]["pytorchReplicaSpecs"]
    assert strict["Worker"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonRoot"]


def run_launcher(
    tmp_path: Any, bundle: Any, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """Materialise the ConfigMap as the kubelet would and run the shipped launcher, with
    `os.execvp` caught so the test sees the environment it would exec with."""
    cm = bundle.configmap
    for item in bundle.volume["configMap"]["items"]:
        path = tmp_path / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(cm["data"][item["key"]])
    table_path = tmp_path / ".distrun" / "replicas.json"
    table = json.loads(table_path.read_text())
    table["workdir"] = str(tmp_path)
    table_path.write_text(json.dumps(table))
    seen: dict[str, Any] = {}

    def fake_exec(file: str, args: list[str]) -> None:
        import os

        seen.update(argv=args, env=dict(os.environ), cwd=os.getcwd())

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("os.execvp", fake_exec)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["launch.py", "python", "main.py"])
    runpy.run_path(str(tmp_path / ".distrun" / "launch.py"), run_name="__main__")
    return seen


def test_volcano_launcher_sets_the_same_variables_as_the_local_engine(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = spec(roles={"worker": {"replicas": 2}})
    bundle = volcano_bundle(s, TARGET)
    seen = run_launcher(
        tmp_path, bundle, {"DISTRUN_GROUP": "worker", "VC_TASK_INDEX": "1"}, monkeypatch
    )
    env = seen["env"]
    assert seen["argv"] == ["python", "main.py"]
    assert env["DISTRUN_REPLICA"] == "worker-1"
    assert env["RANK"] == "2" and env["WORLD_SIZE"] == "3"
    assert env["MASTER_ADDR"] == "train-abcde-master-0.train-abcde"
    assert env["MASTER_PORT"] == "23456"


def test_launcher_refuses_an_index_it_has_no_replica_for(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = volcano_bundle(spec(), TARGET)
    with pytest.raises(SystemExit) as exit_info:
        run_launcher(
            tmp_path, bundle, {"DISTRUN_GROUP": "worker", "VC_TASK_INDEX": "7"}, monkeypatch
        )
    assert exit_info.value.code == 2


def test_trainjob_runs_every_replica_as_a_node_of_the_runtime(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = spec(roles={"worker": {"replicas": 2}}, active_deadline_seconds=30)
    bundle = trainer_bundle(s, TARGET)
    job = trainjob(s, TARGET, OPTIONS, bundle, runtime="torch-distributed")
    body = job["spec"]
    assert body["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    }
    assert body["trainer"]["numNodes"] == 3
    assert body["activeDeadlineSeconds"] == 30
    trainer_env = {e["name"] for e in body["trainer"]["env"]}
    assert not {name for name in trainer_env if name.startswith("PET_")}  # reserved by Trainer
    patch = body["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod = patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [bundle.volume]
    assert pod["containers"] == [
        {"name": "node", "volumeMounts": [bundle.mount], "securityContext": HARDENED_CONTAINER}
    ]
    seen = run_launcher(
        tmp_path, bundle, {"DISTRUN_GROUP": "node", "JOB_COMPLETION_INDEX": "0"}, monkeypatch
    )
    assert seen["env"]["DISTRUN_REPLICA"] == "master-0"
    assert seen["env"]["MASTER_ADDR"] == "train-abcde-node-0-0.train-abcde"


def test_trainjob_refuses_roles_with_different_resources() -> None:
    s = spec(roles={"worker": {"replicas": 1, "resources": {"gpu": 1}}})
    with pytest.raises(SpecError, match="same resources"):
        trainjob(s, TARGET, OPTIONS, trainer_bundle(s, TARGET), runtime="torch-distributed")


def test_trainjob_refuses_restarts_by_exit_code() -> None:
    """JobSet sees Jobs fail, not exit codes: a restart by exit code is refused in words."""
    s = spec(restart_policy="ExitCode", backoff_limit=2)
    with pytest.raises(SpecError, match="write %restartPolicy=OnFailure") as refused:
        trainjob(s, TARGET, OPTIONS, trainer_bundle(s, TARGET), runtime="torch-distributed")
    assert refused.value.field == "restart_policy"


@pytest.mark.parametrize("policy", ["OnFailure", "Always"])
def test_trainjob_restarting_on_failure_runs_on_its_own_runtime(policy: str) -> None:
    """A synchronous job's restarts are of the whole job: the JobSet of the job's own runtime
    (restart_runtime) makes them, backoff_limit times."""
    s = spec(restart_policy=policy, backoff_limit=2)
    job = trainjob(s, TARGET, OPTIONS, trainer_bundle(s, TARGET), runtime="torch-distributed")
    assert job["spec"]["runtimeRef"]["kind"] == "TrainingRuntime"
    assert job["spec"]["runtimeRef"]["name"] == TARGET.job_id


def test_trainjob_takes_never_whatever_the_backoff_limit() -> None:
    """Never asks for no restarts on every engine, so its backoff limit changes nothing."""
    s = spec(restart_policy="Never", backoff_limit=2)
    job = trainjob(s, TARGET, OPTIONS, trainer_bundle(s, TARGET), runtime="torch-distributed")
    assert job["kind"] == "TrainJob"
