"""How a sweep trial's parameters reach its code: environment variables, read by
`distrun.params()`. Standard library only, so the helper stays cheap to import in a replica.

DISTRUN_PARAMS holds every parameter as one JSON object ({"lr": 0.01, "opt": "adam"}), and
DISTRUN_PARAM_<NAME> each one alone (DISTRUN_PARAM_LR=0.01), for shell scripts and launchers.
"""

import json
from collections.abc import Mapping

PARAMS_ENV = "DISTRUN_PARAMS"
PARAM_ENV_PREFIX = "DISTRUN_PARAM_"
SWEEP_ENV = "DISTRUN_SWEEP"


def params_env(params: Mapping[str, int | float | str]) -> dict[str, str]:
    """The environment that gives a trial its `params` (names as core/sweep allows them)."""
    env = {PARAMS_ENV: json.dumps(dict(params), separators=(",", ":"))}
    for name, value in params.items():
        env[PARAM_ENV_PREFIX + name.upper()] = (
            value if isinstance(value, str) else json.dumps(value)
        )
    return env


def trial_env(
    sweep_id: str, number: int, params: Mapping[str, int | float | str]
) -> dict[str, str]:
    """A trial's parameters and which sweep and trial it is (DISTRUN_SWEEP, "<id>/<number>":
    what groups a sweep's trials wherever jobs are listed)."""
    return {**params_env(params), SWEEP_ENV: f"{sweep_id}/{number}"}


def trial_of(env: Mapping[str, str]) -> tuple[str, int] | None:
    """(sweep id, trial number) of a job whose environment is `env`, when it is a trial."""
    sweep_id, _, number = env.get(SWEEP_ENV, "").partition("/")
    return (sweep_id, int(number)) if sweep_id and number.isdigit() else None
