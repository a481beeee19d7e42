"""How a sweep trial's parameters reach its code: environment variables, read by
`distrun.params()`. Standard library only, so the helper stays cheap to import in a replica.

DISTRUN_PARAMS holds every parameter as one JSON object ({"lr": 0.01, "opt": "adam"}), and
DISTRUN_PARAM_<NAME> each one alone (DISTRUN_PARAM_LR=0.01), for shell scripts and launchers.
"""

import json
from collections.abc import Mapping
from typing import Any

PARAMS_ENV = "DISTRUN_PARAMS"
PARAM_ENV_PREFIX = "DISTRUN_PARAM_"
SWEEP_ENV = "DISTRUN_SWEEP"
SWEEP_SPEC_ENV = "DISTRUN_SWEEP_SPEC"  # the sweep's definition, as core/sweep.to_dict writes it
ORIGIN_ENV = "DISTRUN_TRIAL_ORIGIN"  # in a model search: "tpe" (the model's) or "random"


def params_env(params: Mapping[str, int | float | str]) -> dict[str, str]:
    """The environment that gives a trial its `params` (names as core/sweep allows them)."""
    env = {PARAMS_ENV: json.dumps(dict(params), separators=(",", ":"))}
    for name, value in params.items():
        env[PARAM_ENV_PREFIX + name.upper()] = (
            value if isinstance(value, str) else json.dumps(value)
        )
    return env


def trial_env(
    sweep_id: str,
    number: int,
    params: Mapping[str, int | float | str],
    definition: Mapping[str, Any] | None = None,
    origin: str | None = None,
) -> dict[str, str]:
    """A trial's parameters, which sweep and trial it is (DISTRUN_SWEEP, "<id>/<number>": what
    groups a sweep's trials wherever jobs are listed), the sweep's `definition` (its
    objective and size, for whoever shows the sweep from its trials alone) and, in a model
    search, what proposed its parameters (`origin`)."""
    env = {**params_env(params), SWEEP_ENV: f"{sweep_id}/{number}"}
    if definition is not None:
        env[SWEEP_SPEC_ENV] = json.dumps(definition, separators=(",", ":"))
    if origin is not None:
        env[ORIGIN_ENV] = origin
    return env


def trial_of(env: Mapping[str, str]) -> tuple[str, int] | None:
    """(sweep id, trial number) of a job whose environment is `env`, when it is a trial."""
    sweep_id, _, number = env.get(SWEEP_ENV, "").partition("/")
    return (sweep_id, int(number)) if sweep_id and number.isdigit() else None


def sweep_definition(env: Mapping[str, str]) -> Any:
    """The sweep definition a trial carries (JSON, unchecked), or None."""
    try:
        return json.loads(env[SWEEP_SPEC_ENV])
    except (KeyError, ValueError):
        return None


def without_trial_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less what makes a job a sweep's trial (its parameters stay): a trial run again
    on its own."""
    return {k: v for k, v in env.items() if k not in (SWEEP_ENV, SWEEP_SPEC_ENV, ORIGIN_ENV)}
