"""A sweep as a Katib Experiment (issue 16) against Katib v0.19.0 itself, in a cluster of its
own (fixture `katib_cluster`, katib_controller.py): its CRDs, its real `katib-controller`
with its webhooks registered in the API server, its Optuna suggestion service, and the
Training Operator.

The Experiment `KubeflowEngine.submit_experiment` makes for a PyTorch random search is
defaulted and accepted by Katib's own webhooks, decodes strictly into Katib's Go types, and is
reconciled into a Suggestion; a grid search runs: Katib's suggestion service hands out the
first points, Katib's controller makes Trials and their PyTorchJobs from our template (each
replica's environment holding that trial's parameters), and Katib's pod webhook wraps the
master's command for its StdOut collector. Broken Experiments are refused with Katib's
reasons, and Katib's own StdOut parser reads distrun's metric lines with our filters.

Trials do not finish here: kwok plays the containers, so no metrics collector or Katib DB
manager ever reports a value.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio import client

from distrun.core import jobids
from distrun.core.spec import JobSpec
from distrun.core.sweep import (
    Choice,
    EarlyStop,
    IntRange,
    LogUniform,
    Objective,
    Param,
    SweepSpec,
    Values,
)
from distrun.engines.kube.katib import INJECTION_ENABLED, INJECTION_LABEL, katib_experiment
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.manifests.common import ClusterOptions, Target
from distrun.engines.kube.manifests.configmap import code_bundle
from distrun.engines.kube.manifests.kubeflow import kubeflow_job

from .controller_builds import KatibBinaries
from .katib_controller import (
    KatibCluster,
    collected_metrics,
    fresh_suggestion_service,
    resolve_to_loopback,
    strict_decode_errors,
)

pytestmark = pytest.mark.kubernetes

GROUP, VERSION = "kubeflow.org", "v1beta1"
WAIT = 90.0  # seconds; the machine may be loaded

TEMPLATE = JobSpec.from_dict(
    {
        "framework": "pytorch",
        "code": "import distrun\nprint(distrun.params(lr=0.1))\n",
        "roles": {"master": {"replicas": 1}, "worker": {"replicas": 1}},
    }
)
RANDOM = SweepSpec(
    (
        Param("lr", LogUniform(1e-4, 1e-1)),
        Param("opt", Choice(("adam", "sgd"))),
        Param("layers", IntRange(2, 8)),
    ),
    search="random",
    trials=6,
    parallel=2,
    objective=Objective("loss", "min", "best"),
    early_stop=EarlyStop("median", 3),
    seed=7,
)
GRID = SweepSpec(
    (Param("lr", Values((0.3, 0.1, 0.03))), Param("opt", Values(("adam", "sgd")))),
    objective=Objective("accuracy", "max"),
)


@pytest.fixture
async def katib_admin(katib_cluster: KatibCluster) -> AsyncIterator[Any]:
    async with katib_cluster.cluster.api_client("admin") as api:
        yield api


def new_namespace(katib_cluster: KatibCluster, labelled: bool) -> str:
    name = f"t-{secrets.token_hex(4)}"
    katib_cluster.cluster.create_namespace(name)
    if labelled:  # Katib's webhook refuses Experiments elsewhere
        core = kubernetes.client.CoreV1Api(katib_cluster.cluster.admin)
        core.patch_namespace(name, {"metadata": {"labels": {INJECTION_LABEL: INJECTION_ENABLED}}})
    return name


@pytest.fixture
def katib_namespace(katib_cluster: KatibCluster) -> Iterator[str]:
    """A fresh namespace labelled for Katib."""
    name = new_namespace(katib_cluster, labelled=True)
    yield name
    katib_cluster.cluster.delete_namespace(name)


def rendered(sweep: SweepSpec, namespace: str, name: str = "sweep-abcde") -> dict[str, Any]:
    target = Target(name, namespace, "alice")
    job = kubeflow_job(TEMPLATE, target, ClusterOptions(), code_bundle(TEMPLATE, target))
    return katib_experiment(sweep, job, namespace, name)


async def create(api: Any, namespace: str, experiment: dict[str, Any]) -> Any:
    return await client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "experiments", experiment
    )


async def refusal(api: Any, namespace: str, experiment: dict[str, Any]) -> str:
    """The API server's message refusing `experiment` (the test fails if it is created)."""
    with pytest.raises(client.exceptions.ApiException) as raised:
        await create(api, namespace, experiment)
    assert raised.value.status == 400, raised.value.body
    message: str = json.loads(raised.value.body)["message"]
    return message


async def custom_or_none(
    api: Any,
    namespace: str,
    plural: str,
    name: str,
    group_version: tuple[str, str] = (GROUP, VERSION),
) -> Any:
    """The object, or None while there is none."""
    try:
        return await client.CustomObjectsApi(api).get_namespaced_custom_object(
            *group_version, namespace, plural, name
        )
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return None
        raise


async def first_trials(api: Any, namespace: str, experiment: str, count: int = 2) -> list[Any]:
    """The Experiment's Trials once there are `count` of them, else none."""
    listed = await client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "trials",
        label_selector=f"katib.kubeflow.org/experiment={experiment}",
    )
    return listed["items"] if len(listed["items"]) >= count else []


async def eventually(check: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


async def test_a_pytorch_sweeps_experiment_is_accepted_defaulted_and_reconciled_by_katib(
    katib_admin: Any, katib_namespace: str, katib_cluster: KatibCluster
) -> None:
    kube_admin, katib = katib_admin, katib_cluster.katib
    engine = KubeflowEngine(api_client=kube_admin, namespace=katib_namespace)
    try:
        created = await engine.submit_experiment(TEMPLATE, RANDOM, "alice")
    finally:
        await engine.close()
    name = created["metadata"]["name"]
    spec = created["spec"]

    # Katib's defaulting webhook ran: what it fills in is there, ours is kept.
    assert spec["resumePolicy"] == "Never"
    assert {p["name"]: p["feasibleSpace"].get("distribution") for p in spec["parameters"]} == {
        "lr": "logUniform",
        "opt": "uniform",  # Katib's default for every parameter, even a categorical one
        "layers": "uniform",
    }
    assert spec["objective"]["metricStrategies"] == [{"name": "loss", "value": "min"}]
    assert spec["algorithm"]["algorithmSettings"] == [{"name": "random_state", "value": "7"}]
    template = spec["trialTemplate"]
    assert template["primaryPodLabels"] == {"training.kubeflow.org/job-role": "master"}
    master = template["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Master"]
    env = {e["name"]: e.get("value") for e in master["template"]["spec"]["containers"][0]["env"]}
    assert env["DISTRUN_PARAM_LR"] == "${trialParameters.lr}"

    # Every field we wrote is one of Katib's Go types' own (its CRD schema keeps anything).
    assert strict_decode_errors(katib, rendered(RANDOM, katib_namespace)) == ""
    assert strict_decode_errors(katib, rendered(GRID, katib_namespace)) == ""

    # The code the trials mount exists, owned by the Experiment.
    core = client.CoreV1Api(kube_admin)
    configmap = await core.read_namespaced_config_map(name, katib_namespace)
    [owner] = configmap.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == ("Experiment", name, created["metadata"]["uid"])

    # Katib's controller takes it on: the Experiment is Created and asks for suggestions with
    # our algorithm and its setting.
    custom = client.CustomObjectsApi(kube_admin)

    async def experiment_created() -> bool:
        current = await custom.get_namespaced_custom_object(
            GROUP, VERSION, katib_namespace, "experiments", name
        )
        conditions = (current.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Created" and c["status"] == "True" for c in conditions)

    await eventually(experiment_created, "Katib's controller to mark the Experiment Created")

    made = await eventually(
        lambda: custom_or_none(kube_admin, katib_namespace, "suggestions", name),
        "the Experiment's Suggestion",
    )
    assert made["spec"]["algorithm"]["algorithmName"] == "random"
    assert made["spec"]["earlyStopping"]["algorithmName"] == "medianstop"

    # It goes with the Experiment (garbage collection by owner).
    await custom.delete_namespaced_custom_object(
        GROUP, VERSION, katib_namespace, "experiments", name
    )

    async def configmap_gone() -> bool:
        try:
            await core.read_namespaced_config_map(name, katib_namespace)
        except client.exceptions.ApiException as error:
            if error.status == 404:
                return True
            raise
        return False

    await eventually(configmap_gone, "the code ConfigMap to go with its Experiment")


async def test_a_grid_sweep_runs_its_first_trials_as_pytorchjobs_holding_their_parameters(
    katib_admin: Any, katib_cluster: KatibCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace, api = katib_cluster.trials, katib_admin
    fresh_suggestion_service(katib_cluster)
    name = jobids.new_job_id("grid")
    # Katib's controller reaches the suggestion service at <experiment>-<algorithm>.<ns>.
    resolve_to_loopback(katib_cluster.hosts, f"{name}-grid.{namespace}")
    engine = KubeflowEngine(api_client=api, namespace=namespace)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(jobids, "new_job_id", lambda _name: name)
            created = await engine.submit_experiment(TEMPLATE, GRID, "alice")
    finally:
        await engine.close()
    assert created["spec"]["algorithm"] == {"algorithmName": "grid"}
    assert created["spec"]["maxTrialCount"] == 6
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    trials = await eventually(
        lambda: first_trials(api, namespace, name),
        "Katib to make the first two trials (parallel 2)",
    )
    assert len(trials) == 2  # no more at once than %parallel
    points = set()
    for trial in trials:
        trial_name = trial["metadata"]["name"]
        assigned = {a["name"]: a["value"] for a in trial["spec"]["parameterAssignments"]}
        assert assigned["lr"] in ("0.3", "0.1", "0.03") and assigned["opt"] in ("adam", "sgd")
        points.add((assigned["lr"], assigned["opt"]))

        made = await eventually(
            lambda trial_name=trial_name: custom_or_none(
                api, namespace, "pytorchjobs", trial_name, group_version=("kubeflow.org", "v1")
            ),
            f"the PyTorchJob of trial {trial_name}",
        )
        assert made["metadata"]["labels"]["app.kubernetes.io/instance"] == trial_name
        for role, replica in made["spec"]["pytorchReplicaSpecs"].items():
            [container] = replica["template"]["spec"]["containers"]
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert json.loads(env["DISTRUN_PARAMS"]) == {
                "lr": float(assigned["lr"]),
                "opt": assigned["opt"],
            }, role
            assert env["DISTRUN_PARAM_LR"] == assigned["lr"]
            assert env["DISTRUN_PARAM_OPT"] == assigned["opt"]
            assert env["DISTRUN_SWEEP"] == f"{name}/{trial_name}"
            assert env["DISTRUN_JOB_ID"] == trial_name
            assert replica["template"]["spec"]["volumes"][0]["configMap"]["name"] == name
    assert len(points) == 2, "two different points of the grid"

    # The Training Operator makes the trials' pods; Katib's pod webhook wraps the master's
    # command for its StdOut collector and adds the collector; the worker is left alone.
    trial_name = trials[0]["metadata"]["name"]

    async def pods() -> dict[str, Any]:
        listed = await core.list_namespaced_pod(
            namespace, label_selector=f"training.kubeflow.org/job-name={trial_name}"
        )
        found = {pod.metadata.name.removeprefix(f"{trial_name}-"): pod for pod in listed.items}
        return found if {"master-0", "worker-0"} <= set(found) else {}

    replicas = await eventually(pods, f"the pods of trial {trial_name}")
    master = {c.name: c for c in replicas["master-0"].spec.containers}
    assert "metrics-logger-and-collector" in master
    assert master["pytorch"].command == ["sh", "-c"]
    assert (
        master["pytorch"].args[0].startswith("python main.py 1>/var/log/katib/metrics.log 2>&1 && ")
    )
    assert [c.name for c in replicas["worker-0"].spec.containers] == ["pytorch"]

    await custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", name)


MODEL = SweepSpec(
    (Param("lr", LogUniform(1e-4, 1e-1)), Param("opt", Choice(("adam", "sgd")))),
    search="tpe",
    trials=8,
    parallel=2,
    objective=Objective("loss", "min"),
    seed=11,
)


@pytest.mark.parametrize(
    ("search", "algorithm", "settings"),
    [
        ("tpe", "tpe", [{"name": "random_state", "value": "11"}]),
        (
            "bayes",
            "bayesianoptimization",
            [{"name": "random_state", "value": "11"}, {"name": "n_initial_points", "value": "3"}],
        ),
    ],
)
async def test_a_model_search_becomes_katibs_suggestion_of_its_algorithm(
    katib_admin: Any,
    katib_cluster: KatibCluster,
    monkeypatch: pytest.MonkeyPatch,
    search: str,
    algorithm: str,
    settings: list[dict[str, str]],
) -> None:
    """tpe and bayes, accepted by Katib's webhooks and reconciled into a Suggestion of Katib's
    algorithm with distrun's settings. A tpe one runs its first trials: the tier's suggestion
    service is Katib's Optuna one, whose TPE stands in for the hyperopt image Katib's config
    names for `tpe` (both are TPE; the hyperopt and scikit-optimize images' requirements are
    not installed here, so no bayes trial runs)."""
    namespace, api = katib_cluster.trials, katib_admin
    fresh_suggestion_service(katib_cluster)
    name = jobids.new_job_id(search)
    resolve_to_loopback(katib_cluster.hosts, f"{name}-{algorithm}.{namespace}")
    sweep = dataclasses.replace(MODEL, search=search)
    engine = KubeflowEngine(api_client=api, namespace=namespace)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(jobids, "new_job_id", lambda _name: name)
            created = await engine.submit_experiment(TEMPLATE, sweep, "alice")
    finally:
        await engine.close()
    assert created["spec"]["algorithm"] == {
        "algorithmName": algorithm,
        "algorithmSettings": settings,
    }
    custom = client.CustomObjectsApi(api)

    try:
        made = await eventually(
            lambda: custom_or_none(api, namespace, "suggestions", name),
            f"the {search} Experiment's Suggestion",
        )
        assert made["spec"]["algorithm"] == created["spec"]["algorithm"]
        if search != "tpe":
            return
        trials = await eventually(
            lambda: first_trials(api, namespace, name),
            "Katib's TPE to propose the first two trials",
        )
        for trial in trials:
            assigned = {a["name"]: a["value"] for a in trial["spec"]["parameterAssignments"]}
            assert 1e-4 <= float(assigned["lr"]) <= 1e-1 and assigned["opt"] in ("adam", "sgd")
    finally:
        await custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", name)


def broken(namespace: str, breaks: str) -> dict[str, Any]:
    experiment = copy.deepcopy(rendered(RANDOM, namespace, name=f"broken-{breaks}"))
    spec = experiment["spec"]
    if breaks == "placeholder":  # a placeholder in the template that no trial parameter fills
        parameters = spec["trialTemplate"]["trialParameters"]
        parameters[:] = [p for p in parameters if p["name"] != "opt"]
    elif breaks == "parallel":
        spec["parallelTrialCount"] = spec["maxTrialCount"] + 1
    elif breaks == "algorithm":
        spec["algorithm"] = {"algorithmName": "no-such-search"}
    elif breaks == "template-name":  # Katib names each trial's job itself
        spec["trialTemplate"]["trialSpec"]["metadata"]["name"] = "sweep-abcde"
    elif breaks == "objective":
        del spec["objective"]
    return experiment


@pytest.mark.parametrize(
    ("breaks", "message"),
    [
        ("placeholder", "${trialParameters.opt}"),
        ("parallel", "spec.parallelTrialCount: Invalid value: 7: should be less than or equal"),
        ("algorithm", "unable to get Suggestion config data for algorithm no-such-search"),
        ("template-name", "metadata.name and metadata.namespace in spec.trialTemplate must be"),
        ("objective", "spec.objective: Required value"),
    ],
)
async def test_katibs_webhook_refuses_a_broken_experiment_with_its_reason(
    katib_admin: Any, katib_namespace: str, breaks: str, message: str
) -> None:
    refused = await refusal(katib_admin, katib_namespace, broken(katib_namespace, breaks))
    assert 'admission webhook "validator.experiment.katib.kubeflow.org" denied' in refused
    assert message in refused
    if breaks == "placeholder":
        assert "in spec.trialTemplate not found in spec.trialParameters" in refused


async def test_katib_refuses_an_experiment_in_a_namespace_not_labelled_for_it(
    katib_admin: Any, katib_cluster: KatibCluster
) -> None:
    namespace = new_namespace(katib_cluster, labelled=False)
    refused = await refusal(katib_admin, namespace, rendered(GRID, namespace))
    assert f'the namespace lacks label "{INJECTION_LABEL}: {INJECTION_ENABLED}"' in refused


def test_the_strict_decoder_refuses_what_katibs_webhook_would_silently_drop(
    katib_binaries: KatibBinaries,
) -> None:
    experiment = rendered(GRID, "ns")
    experiment["spec"]["parallelTrialCounts"] = 3  # misspelt
    experiment["spec"]["objective"]["Type"] = "maximize"  # wrong case
    errors = strict_decode_errors(katib_binaries, experiment)
    assert 'unknown field "spec.parallelTrialCounts"' in errors
    assert 'unknown field "spec.objective.Type"' in errors


def test_katibs_own_stdout_parser_reads_distruns_metric_lines_with_the_filters(
    katib_binaries: KatibBinaries, tmp_path: Path
) -> None:
    """Katib's webhook checks no filter of a StdOut collector (and its collector would crash
    on one that does not compile): Katib's parser itself reads the lines with ours."""
    output = [
        "step 1 loss=0.5 accuracy=0.1",
        "32/32 [==============================] - 2s 3ms/step - loss: 0.25 - accuracy: 0.9",
        '{"loss": 0.125, "lr": 0.01}',
        "train/loss=9 val_loss=9 my-loss=9 Loss=9 loss 9",  # none is `loss` for Katib
    ]
    assert collected_metrics(katib_binaries, rendered(RANDOM, "ns"), output, tmp_path) == [
        ("loss", "0.5"),
        ("loss", "0.25"),
        ("loss", "0.125"),
    ]
    accuracy = collected_metrics(katib_binaries, rendered(GRID, "ns"), output, tmp_path)
    assert accuracy == [("accuracy", "0.1"), ("accuracy", "0.9")]


def test_katibs_crds_are_installed_from_its_module(katib_cluster: KatibCluster) -> None:
    extensions = kubernetes.client.ApiextensionsV1Api(katib_cluster.cluster.admin)
    for plural in ("experiments", "trials", "suggestions"):
        try:
            crd = extensions.read_custom_resource_definition(f"{plural}.{GROUP}")
        except ApiException as error:  # pragma: no cover - a failure says which
            raise AssertionError(f"no CRD {plural}.{GROUP}") from error
        assert [v.name for v in crd.spec.versions] == [VERSION]
