"""A sweep as a Katib Experiment (engines/kube/katib.py): what each part of a sweep becomes,
and what is refused. Katib's own validation of these objects is in
tests/k8s/test_katib_experiment.py."""

import dataclasses
import json
import re
from typing import Any

import pytest

from distrun.core.errors import SpecError
from distrun.core.metrics import parse_metrics
from distrun.core.spec import JobSpec
from distrun.core.sweep import (
    Choice,
    EarlyStop,
    IntRange,
    LogUniform,
    Objective,
    Param,
    SweepSpec,
    Uniform,
    Values,
    effective_seed,
)
from distrun.engines.kube.katib import (
    ANNOTATION_SWEEP,
    METRIC_FORMATS,
    KatibMappingError,
    experiment_configmap,
    katib_experiment,
)
from distrun.engines.kube.manifests.common import ClusterOptions, Target
from distrun.engines.kube.manifests.configmap import code_bundle
from distrun.engines.kube.manifests.kubeflow import kubeflow_job

TARGET = Target("train-abcde", "alice-ns", "alice")
LOSS = Objective("loss", "min")


def job(framework: str = "pytorch", **fields: Any) -> dict[str, Any]:
    roles = {"pytorch": {"master": {"replicas": 1}, "worker": {"replicas": 2}}}
    spec = JobSpec.from_dict(
        {
            "framework": framework,
            "code": "print('hi')\n",
            "roles": roles.get(framework, {"worker": {"replicas": 2}}),
            **fields,
        }
    )
    return kubeflow_job(spec, TARGET, ClusterOptions(), code_bundle(spec, TARGET))


def experiment(sweep: SweepSpec, **job_fields: Any) -> dict[str, Any]:
    return katib_experiment(sweep, job(**job_fields), TARGET.namespace, TARGET.job_id)


def grid(*params: Param, **fields: Any) -> SweepSpec:
    return SweepSpec(params, objective=fields.pop("objective", LOSS), **fields)


def random(*params: Param, trials: int = 8, **fields: Any) -> SweepSpec:
    return SweepSpec(
        params, search="random", trials=trials, objective=fields.pop("objective", LOSS), **fields
    )


def containers(experiment: dict[str, Any]) -> list[dict[str, Any]]:
    template = experiment["spec"]["trialTemplate"]["trialSpec"]
    return [
        container
        for replica in template["spec"]["pytorchReplicaSpecs"].values()
        for container in replica["template"]["spec"]["containers"]
    ]


def env(container: dict[str, Any]) -> dict[str, str]:
    return {entry["name"]: entry.get("value", "") for entry in container["env"]}


def substitute(text: str, values: dict[str, str]) -> str:
    """What Katib's experiment controller does to the template's text for a trial."""
    for name, value in values.items():
        text = text.replace("${trialParameters." + name + "}", value)
    return text


# --- parameters ----------------------------------------------------------------------------


def test_a_grid_of_numbers_is_katibs_grid_over_discrete_values_with_every_combination() -> None:
    made = experiment(grid(Param("lr", Values((0.1, 0.01, 1e-05))), Param("bs", Values((32, 64)))))
    spec = made["spec"]
    assert spec["algorithm"] == {"algorithmName": "grid"}
    assert spec["parameters"] == [
        {"name": "lr", "parameterType": "discrete", "feasibleSpace": {"list": ["0.1", "0.01", "1e-05"]}},
        {"name": "bs", "parameterType": "discrete", "feasibleSpace": {"list": ["32", "64"]}},
    ]  # fmt: skip
    assert spec["maxTrialCount"] == 6
    assert spec["parallelTrialCount"] == 2


def test_words_are_categorical_values() -> None:
    [param] = experiment(random(Param("opt", Choice(("adam", "sgd")))))["spec"]["parameters"]
    assert param == {
        "name": "opt",
        "parameterType": "categorical",
        "feasibleSpace": {"list": ["adam", "sgd"]},
    }


def test_uniform_loguniform_and_int_ranges_are_double_double_log_and_int() -> None:
    sweep = random(
        Param("dropout", Uniform(0.1, 0.5)),
        Param("lr", LogUniform(0.0001, 0.1)),
        Param("layers", IntRange(2, 8)),
    )
    assert experiment(sweep)["spec"]["parameters"] == [
        {"name": "dropout", "parameterType": "double",
         "feasibleSpace": {"min": "0.1", "max": "0.5", "distribution": "uniform"}},
        {"name": "lr", "parameterType": "double",
         "feasibleSpace": {"min": "0.0001", "max": "0.1", "distribution": "logUniform"}},
        {"name": "layers", "parameterType": "int", "feasibleSpace": {"min": "2", "max": "8"}},
    ]  # fmt: skip


def test_a_list_mixing_numbers_and_words_is_refused_saying_why() -> None:
    with pytest.raises(KatibMappingError, match="numbers and words") as raised:
        experiment(grid(Param("size", Values((1, "auto")))))
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, SpecError)
    assert raised.value.field == "sweep.size"


# --- search --------------------------------------------------------------------------------


def test_a_random_search_is_katibs_random_with_the_seed_as_random_state() -> None:
    spec = experiment(random(Param("lr", LogUniform(1e-4, 1e-1)), trials=20, seed=7))["spec"]
    assert spec["algorithm"] == {
        "algorithmName": "random",
        "algorithmSettings": [{"name": "random_state", "value": "7"}],
    }
    assert spec["maxTrialCount"] == 20


def test_without_a_seed_the_same_sweep_gets_the_same_derived_random_state() -> None:
    sweep = random(Param("lr", Uniform(0.1, 0.9)))
    [setting] = experiment(sweep)["spec"]["algorithm"]["algorithmSettings"]
    assert setting == {"name": "random_state", "value": str(effective_seed(sweep) % 2**32)}
    assert experiment(sweep)["spec"]["algorithm"] == experiment(sweep)["spec"]["algorithm"]


def test_a_seed_hyperopt_cannot_take_is_refused() -> None:
    with pytest.raises(KatibMappingError, match="seed") as raised:
        experiment(random(Param("lr", Uniform(0.1, 0.9)), seed=2**32))
    assert raised.value.field == "seed"


def test_tpe_is_katibs_tpe_with_the_seed_and_no_setting_its_service_refuses() -> None:
    sweep = random(Param("lr", LogUniform(1e-4, 1e-1)), trials=30, seed=7)
    spec = experiment(dataclasses.replace(sweep, search="tpe"))["spec"]
    # Katib v0.19.0's hyperopt service refuses any tpe setting but random_state, gamma,
    # prior_weight and n_EI_candidates (its _validate_tpe_setting).
    assert spec["algorithm"] == {
        "algorithmName": "tpe",
        "algorithmSettings": [{"name": "random_state", "value": "7"}],
    }
    assert spec["maxTrialCount"] == 30


def test_bayes_is_katibs_bayesian_optimization_with_the_seed_and_first_random_draws() -> None:
    sweep = random(Param("lr", LogUniform(1e-4, 1e-1)), trials=30, seed=7)
    spec = experiment(dataclasses.replace(sweep, search="bayes"))["spec"]
    assert spec["algorithm"] == {
        "algorithmName": "bayesianoptimization",
        "algorithmSettings": [
            {"name": "random_state", "value": "7"},
            {"name": "n_initial_points", "value": "6"},  # what distrun's runner draws: 30 // 5
        ],
    }


def test_asha_is_refused_saying_what_katib_has_instead() -> None:
    sweep = random(Param("lr", Uniform(0.1, 0.9)), early_stop=EarlyStop("asha", 1))
    with pytest.raises(KatibMappingError, match="no asha early stopping") as raised:
        experiment(sweep)
    assert raised.value.field == "earlyStop"


def test_no_more_trials_at_once_than_there_are_trials() -> None:
    spec = experiment(grid(Param("lr", Values((0.1,))), parallel=4))["spec"]
    assert (spec["maxTrialCount"], spec["parallelTrialCount"]) == (1, 1)


# --- objective, metrics, early stopping ----------------------------------------------------


@pytest.mark.parametrize(
    ("objective", "katib_type", "strategy"),
    [
        (Objective("loss", "min"), "minimize", "latest"),
        (Objective("loss", "min", "best"), "minimize", "min"),
        (Objective("accuracy", "max"), "maximize", "latest"),
        (Objective("accuracy", "max", "best"), "maximize", "max"),
    ],
)
def test_the_objective_and_how_a_trial_is_read_become_type_and_metric_strategy(
    objective: Objective, katib_type: str, strategy: str
) -> None:
    made = experiment(grid(Param("lr", Values((0.1, 0.2))), objective=objective))
    assert made["spec"]["objective"] == {
        "type": katib_type,
        "objectiveMetricName": objective.metric,
        "metricStrategies": [{"name": objective.metric, "value": strategy}],
    }


def test_a_sweep_without_an_objective_is_refused() -> None:
    with pytest.raises(KatibMappingError, match="needs an objective"):
        experiment(SweepSpec((Param("lr", Values((0.1, 0.2))),)))


@pytest.mark.parametrize(
    "line",
    [
        "step 3 loss=0.25 accuracy=0.9",
        "loss: 0.25 - accuracy: 0.9",
        "32/32 [==============================] - 2s 3ms/step - loss: 0.25 - accuracy: 0.9",
        '{"loss": 0.25, "accuracy": 0.9}',
        "train/loss=0.25",
        "loss = 2.5e-01",
    ],
)
def test_the_stdout_filters_find_what_distruns_metric_reader_finds(line: str) -> None:
    # Python's re reads these RE2 patterns alike (no look-around, no RE2-only syntax).
    found = [
        (match.group(1), float(match.group(2)))
        for pattern in METRIC_FORMATS
        for match in re.finditer(pattern, line)
    ]
    assert sorted(found) == sorted(parse_metrics(line).metrics)


def test_the_stdout_filters_do_not_take_a_key_glued_to_a_word() -> None:
    for line in ("my-loss=0.3", "/loss=0.3", "x-loss: 0.3"):
        assert not [m for p in METRIC_FORMATS for m in re.finditer(p, line)], line
        assert not parse_metrics(line).metrics
    assert [m.group(1) for m in re.finditer(METRIC_FORMATS[0], "a.b/c.d=1")] == ["a.b/c.d"]


@pytest.mark.parametrize("line", ["loss 0.25", "loss=[0.25]", "loss=tensor(0.25)", "Loss=0.25"])
def test_what_the_stdout_filters_do_not_read_as_distrun_does(line: str) -> None:
    """Katib compares names exactly and reads only key=value and key: value."""
    found = [(m.group(1), m.group(2)) for p in METRIC_FORMATS for m in re.finditer(p, line)]
    assert parse_metrics(line).metrics == [("loss", 0.25)]
    assert ("loss", "0.25") not in found


def test_no_filter_holds_a_semicolon_katibs_pod_webhook_joins_them_with() -> None:
    assert not any(";" in pattern for pattern in METRIC_FORMATS)
    assert all(re.compile(pattern).groups == 2 for pattern in METRIC_FORMATS)


def test_the_collector_is_stdout_with_the_filters() -> None:
    collector = experiment(grid(Param("lr", Values((0.1, 0.2)))))["spec"]["metricsCollectorSpec"]
    assert collector == {
        "collector": {"kind": "StdOut"},
        "source": {"filter": {"metricsFormat": list(METRIC_FORMATS)}},
    }


def test_the_median_rule_is_medianstop_with_its_own_setting_names() -> None:
    made = experiment(
        random(Param("lr", Uniform(0.1, 0.9)), early_stop=EarlyStop("median", 5, min_trials=4))
    )
    assert made["spec"]["earlyStopping"] == {
        "algorithmName": "medianstop",
        "algorithmSettings": [
            {"name": "min_trials_required", "value": "4"},
            {"name": "start_step", "value": "5"},
        ],
    }


def test_the_median_rule_from_step_0_starts_at_katibs_first_report() -> None:
    made = experiment(random(Param("lr", Uniform(0.1, 0.9)), early_stop=EarlyStop("median", 0)))
    settings = made["spec"]["earlyStopping"]["algorithmSettings"]
    assert {"name": "start_step", "value": "1"} in settings


def test_no_early_stopping_without_the_rule() -> None:
    assert "earlyStopping" not in experiment(grid(Param("lr", Values((0.1, 0.2)))))["spec"]


# --- the trial template --------------------------------------------------------------------


def test_the_trial_template_is_the_job_without_its_name_with_the_operators_conditions() -> None:
    built = job()
    template = experiment(grid(Param("lr", Values((0.1, 0.2)))))["spec"]["trialTemplate"]
    spec = template["trialSpec"]
    assert (spec["apiVersion"], spec["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert "name" not in spec["metadata"] and "namespace" not in spec["metadata"]
    assert spec["spec"]["runPolicy"] == built["spec"]["runPolicy"]
    assert template["primaryContainerName"] == "pytorch"
    assert template["primaryPodLabels"] == {"training.kubeflow.org/job-role": "master"}
    assert template["successCondition"] == (
        'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
    )
    assert template["failureCondition"] == (
        'status.conditions.#(type=="Failed")#|#(status=="True")#'
    )
    assert template["retain"] is True


def test_every_replica_gets_the_parameters_and_the_trial_through_placeholders() -> None:
    sweep = random(Param("lr", LogUniform(1e-4, 1e-1)), Param("opt", Choice(("adam", "sgd"))))
    made = experiment(sweep)
    template = made["spec"]["trialTemplate"]
    assert template["trialParameters"] == [
        {"name": "lr", "reference": "lr", "description": "sweep parameter lr"},
        {"name": "opt", "reference": "opt", "description": "sweep parameter opt"},
        {
            "name": "distrun-trial",
            "reference": "${trialSpec.Name}",
            "description": "the trial's name, which its job is named after",
        },
    ]
    replicas = containers(made)
    assert len(replicas) == 2  # the Master and the Worker templates
    for container in replicas:
        variables = env(container)
        assert variables["DISTRUN_PARAM_LR"] == "${trialParameters.lr}"
        assert variables["DISTRUN_PARAM_OPT"] == "${trialParameters.opt}"
        assert variables["DISTRUN_SWEEP"] == "train-abcde/${trialParameters.distrun-trial}"
        assert variables["DISTRUN_JOB_ID"] == "${trialParameters.distrun-trial}"
        assert variables["DISTRUN_REPLICA"] == "$(DISTRUN_ROLE)-$(DISTRUN_REPLICA_INDEX)"
        assert json.loads(variables["DISTRUN_SWEEP_SPEC"])["search"] == "random"
        substituted = substitute(variables["DISTRUN_PARAMS"], {"lr": "0.0123", "opt": "sgd"})
        assert json.loads(substituted) == {"lr": 0.0123, "opt": "sgd"}


def test_after_katibs_substitution_a_trials_job_is_the_job_with_its_parameters() -> None:
    """Katib substitutes in the template's JSON text: what comes out must be the job distrun
    would run, with the parameters' environment, named after the trial."""
    sweep = grid(Param("lr", Values((0.1, 0.2))), Param("layers", Values((2, 4))))
    made = experiment(sweep)
    text = json.dumps(made["spec"]["trialTemplate"]["trialSpec"])
    trial = json.loads(
        substitute(text, {"lr": "0.2", "layers": "4", "distrun-trial": "train-abcde-x7k2p9q1"})
    )
    assert "${" not in json.dumps(trial)
    labels = trial["metadata"]["labels"]
    assert labels["app.kubernetes.io/instance"] == "train-abcde-x7k2p9q1"
    for container in containers({"spec": {"trialTemplate": {"trialSpec": trial}}}):
        variables = env(container)
        assert json.loads(variables["DISTRUN_PARAMS"]) == {"lr": 0.2, "layers": 4}
        assert (variables["DISTRUN_PARAM_LR"], variables["DISTRUN_PARAM_LAYERS"]) == ("0.2", "4")
        assert variables["DISTRUN_SWEEP"] == "train-abcde/train-abcde-x7k2p9q1"


def test_the_users_own_variables_stay_and_a_same_named_one_gives_way() -> None:
    made = experiment(
        grid(Param("lr", Values((0.1, 0.2)))),
        env={"WANDB_MODE": "offline", "DISTRUN_PARAMS": "{}"},
    )
    variables = [entry["name"] for entry in containers(made)[0]["env"]]
    assert "WANDB_MODE" in variables
    assert variables.count("DISTRUN_PARAMS") == 1


def test_the_experiment_carries_the_owner_and_the_sweep_but_no_queue_label() -> None:
    made = experiment(grid(Param("lr", Values((0.1, 0.2)))))
    meta = made["metadata"]
    assert (meta["name"], meta["namespace"]) == ("train-abcde", "alice-ns")
    assert meta["annotations"]["distrun.io/owner"] == "alice"
    assert json.loads(meta["annotations"][ANNOTATION_SWEEP])["params"] == {
        "lr": {"values": [0.1, 0.2]}
    }
    assert meta["labels"]["app.kubernetes.io/instance"] == "train-abcde"


@pytest.mark.parametrize("framework", ["tensorflow", "xgboost", "paddle", "jax", "mpi"])
def test_every_training_operator_kind_maps_with_its_container(framework: str) -> None:
    roles = {
        "tensorflow": {"worker": {"replicas": 2}},
        "xgboost": {"master": {"replicas": 1}, "worker": {"replicas": 1}},
        "mpi": {"launcher": {"replicas": 1}, "worker": {"replicas": 2}},
    }.get(framework, {"worker": {"replicas": 2}})
    made = katib_experiment(
        grid(Param("lr", Values((0.1, 0.2)))),
        job(framework, roles=roles),
        TARGET.namespace,
        TARGET.job_id,
    )
    template = made["spec"]["trialTemplate"]
    kind = template["trialSpec"]["kind"]
    assert (
        template["primaryContainerName"]
        == {
            "TFJob": "tensorflow",
            "XGBoostJob": "xgboost",
            "PaddleJob": "paddle",
            "JAXJob": "jax",
            "MPIJob": "mpi",
        }[kind]
    )


def test_a_job_that_is_not_a_training_operator_job_is_refused() -> None:
    trainjob = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "spec": {}}
    with pytest.raises(KatibMappingError, match="Training Operator v1 job"):
        katib_experiment(grid(Param("lr", Values((0.1, 0.2)))), trainjob, "ns", "train-abcde")


@pytest.mark.parametrize("name", ["Train-abcde", "9train", "a" * 41, "train_abcde"])
def test_a_name_katib_refuses_is_refused_first(name: str) -> None:
    with pytest.raises(KatibMappingError, match="at most 40"):
        katib_experiment(grid(Param("lr", Values((0.1, 0.2)))), job(), "ns", name)


def test_an_unchecked_sweep_is_refused_by_the_sweep_rules() -> None:
    with pytest.raises(SpecError, match="a grid needs a list"):
        experiment(grid(Param("lr", Uniform(0.1, 0.9))))


def test_the_code_configmap_is_owned_by_the_created_experiment() -> None:
    spec = JobSpec.from_dict({"framework": "pytorch", "code": "pass\n"})
    bundle = code_bundle(spec, TARGET)
    created = {"metadata": {"name": "train-abcde", "namespace": "alice-ns", "uid": "u-1"}}
    owned = experiment_configmap(bundle.configmap, created)
    assert owned["metadata"]["ownerReferences"] == [
        {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "name": "train-abcde",
         "uid": "u-1"}
    ]  # fmt: skip
    assert owned["data"] == bundle.configmap["data"]
    assert "ownerReferences" not in bundle.configmap["metadata"]
