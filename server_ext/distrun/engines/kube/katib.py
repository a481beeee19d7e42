"""A sweep as a Katib `Experiment` (kubeflow.org/v1beta1), for clusters with Katib installed:
Katib's controller runs the trials, each the same Training Operator job that `KubeflowEngine`
builds for the cell, with the trial's parameters substituted into its environment.

`katib_experiment` is pure: the sweep and the job object in, the Experiment out. What Katib
v0.19 does with each field was read in its sources (pkg/apis/controller, the experiment
webhook's validator, the StdOut metrics collector, the hyperopt/optuna suggestion and
medianstop services):

- parameters: a list of numbers is `discrete`, of words `categorical`; uniform(a,b) a `double`,
  loguniform(a,b) a `double` with `distribution: logUniform`, int(a,b) an `int` (both ends
  included, as in distrun). A list mixing numbers and words does not map (see below).
- search: grid is Katib's `grid` (Optuna's grid sampler: every combination, in its own order),
  random is `random` (hyperopt) with `random_state` from the seed; without a seed, the one
  distrun derives from the sweep, so the same header makes the same Experiment. Katib draws
  its own points: the same seed does not give the trials distrun's own runner would. tpe is
  Katib's `tpe` (hyperopt's TPE; its service refuses every setting but `random_state`,
  `gamma`, `prior_weight` and `n_EI_candidates`, and draws its first request, the
  `parallelTrialCount` trials, at random), bayes is `bayesianoptimization` (scikit-optimize's
  Gaussian process, `n_initial_points` the random draws distrun's runner makes first):
  another model than distrun's TPE, which `bayes` is there.
- asha does not map: Katib's only early stopping is `medianstop`, and its `hyperband` is a
  search of its own (the budget a trial parameter), not a stopping rule beside a search.
- objective: `minimize`/`maximize` of the metric; `:last` is the metric strategy `latest`,
  `:best` is `min`/`max`. The StdOut collector reads the primary pod's output (the master or
  first worker, the replica distrun reads) with `METRIC_FORMATS`: distrun's `key=value` and
  `key: value` forms (Keras' `- loss: 0.3` too). What does not map: the spaced form
  (`loss 0.31`), values in `[...]` or `tensor(...)`, `N/M`, the rule that a number must end
  cleanly, keys in another case (Katib compares names exactly: print `loss`, not `Loss`), and
  steps (Katib orders values as they come). The collector redirects the primary container's
  output into a file its sidecar reads: that replica's lines do not reach distrun's logs.
- early stopping: `medianstop` with `min_trials_required` and `start_step` (at least 1: Katib
  counts reported values, not steps, so step 0 becomes 1). Katib's service compares a running
  trial with the average of the succeeded trials' first `start_step` values, not with the
  median of every trial's best by the same step as distrun does.
- the trial template: the job without name and namespace; every replica's environment gets
  `DISTRUN_PARAM_<NAME>` = `${trialParameters.<name>}`, `DISTRUN_PARAMS` as a JSON object of
  the same placeholders (words quoted), `DISTRUN_SWEEP` = `<experiment>/<trial name>` (Katib
  numbers no trials: `trial_of` reads none), `DISTRUN_SWEEP_SPEC` the sweep, and
  `DISTRUN_JOB_ID` the trial's name (Katib names the trial's job after the trial); the
  instance label is the trial's name too. Success and failure are the Training Operator's
  `Succeeded`/`Failed` conditions, Katib's own defaults for its Kubeflow kinds, written out
  because Katib defaults them for PyTorchJob, TFJob, XGBoostJob and MPIJob only. Trials'
  jobs are retained, so their pods keep their logs until the Experiment is deleted.

The code: trials mount the job's code ConfigMap (`code_bundle`); their pods wait for it.
`experiment_configmap` makes it owned by the created Experiment, so it goes with it
(`KubeflowEngine.submit_experiment` creates both).

What cannot map raises `KatibMappingError` (a SpecError and a ValueError): no objective, a
list mixing numbers and words, a seed hyperopt cannot take, a name Katib refuses, a job that
is not a Training Operator v1 job.
"""

import copy
import json
import re
from typing import Any

from distrun.core.errors import SpecError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.search import startup_trials
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
    check,
    effective_seed,
    format_value,
    to_dict,
    trial_count,
)
from distrun.core.trial_env import PARAM_ENV_PREFIX, PARAMS_ENV, SWEEP_ENV, SWEEP_SPEC_ENV
from distrun.engines.kube.client import Obj, Resource
from distrun.engines.kube.manifests.common import (
    ANNOTATION_OWNER,
    ANNOTATION_SPEC,
    KUEUE_QUEUE_LABEL,
    LABEL_INSTANCE,
)
from distrun.engines.kube.manifests.kubeflow import KINDS

API_VERSION = "kubeflow.org/v1beta1"
KIND = "Experiment"
EXPERIMENTS = Resource("kubeflow.org", "v1beta1", "experiments")
ANNOTATION_SWEEP = "distrun.io/sweep"
# Katib's experiment webhook refuses an Experiment in a namespace without this label (its
# pod webhook injects the metrics collector there).
INJECTION_LABEL = "katib.kubeflow.org/metrics-collector-injection"
INJECTION_ENABLED = "enabled"
# A trial parameter no swept parameter can be named (theirs have no '-'): the trial's name.
TRIAL_NAME_PARAMETER = "distrun-trial"
TRIAL_NAME_REFERENCE = "${trialSpec.Name}"
PRIMARY_POD_LABELS = {"training.kubeflow.org/job-role": "master"}
SUCCESS_CONDITION = 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
FAILURE_CONDITION = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
MAX_NAME = 40  # Katib's webhook: an Experiment's name has at most 40 characters
MAX_RANDOM_STATE = 2**32 - 1  # hyperopt seeds numpy's RandomState, which takes 32 bits
STRATEGIES = {"last": "latest", "min": "min", "max": "max"}
# distrun's search -> Katib's algorithm: random and tpe are served by Katib's hyperopt service,
# bayesianoptimization by its scikit-optimize one (Gaussian process).
ALGORITHMS = {"random": "random", "tpe": "tpe", "bayes": "bayesianoptimization"}

# Go regular expressions (RE2) for Katib's StdOut collector: group 1 the name, group 2 the
# value. distrun's `key=value` and `key: value` (core/metrics), the key not glued to a word
# before it (RE2 has no look-behind: the character before is matched instead). No `;`: Katib's
# pod webhook hands the filters to its collector joined by `;`.
_KEY = r"[A-Za-z_][A-Za-z0-9_]*(?:[/.][A-Za-z_][A-Za-z0-9_]*)*"
_NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_BEFORE = r"(?:^|[^A-Za-z0-9_./-])['\"]?"
METRIC_FORMATS = (
    rf"{_BEFORE}({_KEY})['\"]?\s*=\s*({_NUMBER})",
    rf"{_BEFORE}({_KEY})['\"]?:\s+({_NUMBER})",
)
_NAME_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


class KatibMappingError(SpecError, ValueError):
    """The sweep (or the job) has something a Katib Experiment cannot express."""


def placeholder(name: str) -> str:
    """What Katib replaces with a trial parameter's value in the trial template."""
    return "${trialParameters." + name + "}"


def katib_experiment(sweep: SweepSpec, job: Obj, namespace: str, name: str) -> dict[str, Any]:
    """The Experiment `name` in `namespace` that runs `sweep`, each trial the Training Operator
    `job` (as `KubeflowEngine.build` made it) with the trial's parameters."""
    check(sweep)
    kind = job.get("kind")
    if job.get("apiVersion") != "kubeflow.org/v1" or kind not in KINDS:
        raise KatibMappingError(
            f"a Katib trial template here is a Training Operator v1 job ({', '.join(KINDS)}), "
            f"not {job.get('apiVersion')}/{kind}"
        )
    if not _NAME_RE.fullmatch(name) or len(name) > MAX_NAME:
        raise KatibMappingError(
            f"experiment name {name!r}: Katib takes lower-case letters, digits and '-', "
            f"starting with a letter, at most {MAX_NAME} characters"
        )
    objective = _objective(sweep.objective)
    parameters = [_parameter(param) for param in sweep.params]
    numeric = {spec["name"]: spec["parameterType"] != "categorical" for spec in parameters}
    trials = trial_count(sweep)
    spec: dict[str, Any] = {
        "parameters": parameters,
        "objective": objective,
        "algorithm": _algorithm(sweep),
        "maxTrialCount": trials,
        # Katib refuses more at once than there are trials.
        "parallelTrialCount": min(sweep.parallel, trials),
        "metricsCollectorSpec": {
            "collector": {"kind": "StdOut"},
            "source": {"filter": {"metricsFormat": list(METRIC_FORMATS)}},
        },
        "trialTemplate": {
            "retain": True,
            "primaryContainerName": _container_name(kind),
            "primaryPodLabels": dict(PRIMARY_POD_LABELS),
            "successCondition": SUCCESS_CONDITION,
            "failureCondition": FAILURE_CONDITION,
            "trialParameters": [
                *(
                    {
                        "name": p.name,
                        "reference": p.name,
                        "description": f"sweep parameter {p.name}",
                    }
                    for p in sweep.params
                ),
                {
                    "name": TRIAL_NAME_PARAMETER,
                    "reference": TRIAL_NAME_REFERENCE,
                    "description": "the trial's name, which its job is named after",
                },
            ],
            "trialSpec": _trial_spec(job, name, numeric, to_dict(sweep)),
        },
    }
    if sweep.early_stop is not None:
        spec["earlyStopping"] = _early_stopping(sweep.early_stop)
    metadata = job.get("metadata") or {}
    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k != KUEUE_QUEUE_LABEL}
    if LABEL_INSTANCE in labels:
        labels[LABEL_INSTANCE] = name
    annotations = {
        key: value
        for key, value in (metadata.get("annotations") or {}).items()
        if key in (ANNOTATION_OWNER, ANNOTATION_SPEC)
    }
    annotations[ANNOTATION_SWEEP] = json.dumps(to_dict(sweep), separators=(",", ":"))
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def experiment_configmap(configmap: Obj, experiment: Obj) -> dict[str, Any]:
    """The job's code ConfigMap (`CodeBundle.configmap`), owned by the created `experiment`
    (it has a uid), so that it exists for every trial and goes with the Experiment."""
    meta = experiment["metadata"]
    owned = copy.deepcopy(configmap)
    owned["metadata"]["namespace"] = meta["namespace"]
    owned["metadata"]["ownerReferences"] = [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": meta["name"],
            "uid": meta["uid"],
        }
    ]
    return owned


# ---------------------------------------------------------------------------------------------


def _objective(objective: Objective | None) -> dict[str, Any]:
    if objective is None:
        raise KatibMappingError(
            "a Katib Experiment needs an objective; add one, like %objective=loss:min",
            field="objective",
        )
    strategy = STRATEGIES[objective.read if objective.read == "last" else objective.goal]
    return {
        "type": "minimize" if objective.goal == "min" else "maximize",
        "objectiveMetricName": objective.metric,
        "metricStrategies": [{"name": objective.metric, "value": strategy}],
    }


def _parameter(param: Param) -> dict[str, Any]:
    space = param.space
    if isinstance(space, Values | Choice):
        words = [isinstance(value, str) for value in space.values]
        if any(words) and not all(words):
            raise KatibMappingError(
                f"{param.name!r} lists numbers and words ({', '.join(map(format_value, space.values))}); "
                "Katib puts one text into DISTRUN_PARAMS for every trial, so a value cannot be a "
                "number in some trials and a word in others: list only numbers or only words",
                field=f"sweep.{param.name}",
            )
        return {
            "name": param.name,
            "parameterType": "categorical" if all(words) else "discrete",
            "feasibleSpace": {"list": [format_value(value) for value in space.values]},
        }
    if isinstance(space, IntRange):
        feasible = {"min": str(space.low), "max": str(space.high)}
        return {"name": param.name, "parameterType": "int", "feasibleSpace": feasible}
    assert isinstance(space, Uniform | LogUniform)
    feasible = {
        "min": format_value(space.low),
        "max": format_value(space.high),
        "distribution": "logUniform" if isinstance(space, LogUniform) else "uniform",
    }
    return {"name": param.name, "parameterType": "double", "feasibleSpace": feasible}


def _algorithm(sweep: SweepSpec) -> dict[str, Any]:
    if sweep.search == "grid":
        return {"algorithmName": "grid"}
    seed = sweep.seed if sweep.seed is not None else effective_seed(sweep) % (MAX_RANDOM_STATE + 1)
    if seed > MAX_RANDOM_STATE:
        raise KatibMappingError(
            f"seed {seed} is over {MAX_RANDOM_STATE}, the largest Katib's {sweep.search} search "
            "(numpy's RandomState) takes; pick a smaller one",
            field="seed",
        )
    settings = [{"name": "random_state", "value": str(seed)}]
    if sweep.search == "bayes":
        # The random draws before the model proposes: as many as distrun's own runner makes.
        # (Katib's tpe refuses any setting of it: it draws its first request at random.)
        settings.append({"name": "n_initial_points", "value": str(startup_trials(sweep))})
    return {"algorithmName": ALGORITHMS[sweep.search], "algorithmSettings": settings}


def _early_stopping(stop: EarlyStop) -> dict[str, Any]:
    if stop.rule == "asha":
        raise KatibMappingError(
            "Katib has no asha early stopping: its only early-stopping service is medianstop, "
            "and its hyperband is a search of its own that runs each trial for a budget it "
            "passes as a trial parameter; use %earlyStop=median:N with Katib, or run the "
            "sweep with distrun sweep",
            field="earlyStop",
        )
    return {
        "algorithmName": "medianstop",
        "algorithmSettings": [
            {"name": "min_trials_required", "value": str(stop.min_trials)},
            {"name": "start_step", "value": str(max(stop.after, 1))},
        ],
    }


def _container_name(kind: str) -> str:
    return next(fw.container_name for fw in FRAMEWORKS.values() if fw.kubeflow_kind == kind)


def _trial_spec(
    job: Obj, experiment: str, numeric: dict[str, bool], definition: dict[str, Any]
) -> dict[str, Any]:
    """The job as Katib's trial template: no name or namespace (Katib names it after the
    trial), the trial's name as the instance label, the parameters in every container's
    environment. Placeholders go in as they are: a `${...}` is nothing to the kubelet, which
    expands `$(...)` only, and what Katib puts in their place is a number or a word."""
    template = copy.deepcopy(job)
    metadata = template.setdefault("metadata", {})
    metadata.pop("name", None)
    metadata.pop("namespace", None)
    trial = placeholder(TRIAL_NAME_PARAMETER)
    if LABEL_INSTANCE in (metadata.get("labels") or {}):
        metadata["labels"][LABEL_INSTANCE] = trial
    fields = ",".join(
        f"{json.dumps(name)}:{placeholder(name) if is_number else json.dumps(placeholder(name))}"
        for name, is_number in numeric.items()
    )
    env = [
        {"name": PARAMS_ENV, "value": "{" + fields + "}"},
        *(
            {"name": PARAM_ENV_PREFIX + name.upper(), "value": placeholder(name)}
            for name in numeric
        ),
        {"name": SWEEP_ENV, "value": f"{experiment}/{trial}"},
        # No `$` in it (numbers and words only): nothing for the kubelet to expand.
        {"name": SWEEP_SPEC_ENV, "value": json.dumps(definition, separators=(",", ":"))},
    ]
    replica_specs = template["spec"][KINDS[template["kind"]][1]]
    for replica in replica_specs.values():
        pod = replica.get("template") or {}
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if LABEL_INSTANCE in labels:
            labels[LABEL_INSTANCE] = trial
        for container in (pod.get("spec") or {}).get("containers") or []:
            ours = {entry["name"] for entry in env}
            kept = [entry for entry in container.get("env") or [] if entry["name"] not in ours]
            for entry in kept:
                if entry["name"] == "DISTRUN_JOB_ID":
                    entry["value"] = trial
            container["env"] = [*kept, *copy.deepcopy(env)]
    return template
