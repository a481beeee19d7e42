"""A trial's parameters reach its code: params_env sets them, distrun.params() reads them, and
the same cell run alone gets its defaults."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import distrun
from distrun.core.trial_env import PARAM_ENV_PREFIX, PARAMS_ENV, params_env

PACKAGE_PARENT = Path(__file__).resolve().parents[2] / "server_ext"


def test_params_env_holds_the_object_and_each_parameter() -> None:
    env = params_env({"lr": 0.001, "batch": 64, "opt": "adam", "big": 1e16})
    assert env == {
        PARAMS_ENV: '{"lr":0.001,"batch":64,"opt":"adam","big":1e+16}',
        f"{PARAM_ENV_PREFIX}LR": "0.001",
        f"{PARAM_ENV_PREFIX}BATCH": "64",
        f"{PARAM_ENV_PREFIX}OPT": "adam",
        f"{PARAM_ENV_PREFIX}BIG": "1e+16",
    }
    assert json.loads(env["DISTRUN_PARAMS"]) == {
        "lr": 0.001,
        "batch": 64,
        "opt": "adam",
        "big": 1e16,
    }


def test_alone_a_cell_gets_its_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PARAMS_ENV, raising=False)
    assert distrun.params(lr=0.01, batch=32) == {"lr": 0.01, "batch": 32}
    assert distrun.params() == {}


def test_a_trial_gets_its_parameters_cast_to_the_defaults_types(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        PARAMS_ENV, params_env({"lr": 1, "batch": 64.0, "opt": "sgd", "x": 3})[PARAMS_ENV]
    )
    got = distrun.params(lr=0.01, batch=32, opt="adam", shuffle=True)
    assert got == {"lr": 1.0, "batch": 64, "opt": "sgd", "shuffle": True, "x": 3}
    assert type(got["lr"]) is float and type(got["batch"]) is int


@pytest.mark.parametrize(
    ("default", "chosen", "cast"),
    [
        (True, "false", False),
        (False, "yes", True),
        (False, 1, True),
        (1, "12", 12),
        (1, 12.0, 12),
        (1.5, "0.25", 0.25),
        ("a", 3, "3"),
        ("a", 0.5, "0.5"),
        (None, 0.5, 0.5),
        ([1], [2], [2]),
    ],
)
def test_casts(
    monkeypatch: pytest.MonkeyPatch, default: object, chosen: object, cast: object
) -> None:
    monkeypatch.setenv(PARAMS_ENV, json.dumps({"p": chosen}))
    got = distrun.params(p=default)["p"]
    assert got == cast and type(got) is type(cast)


@pytest.mark.parametrize(
    ("default", "chosen"), [(1, 1.5), (1, "x"), (1, True), (1.0, "x"), (True, 2), (True, "maybe")]
)
def test_a_value_the_default_cannot_take_is_an_error(
    monkeypatch: pytest.MonkeyPatch, default: object, chosen: object
) -> None:
    monkeypatch.setenv(PARAMS_ENV, json.dumps({"p": chosen}))
    with pytest.raises(ValueError, match="^parameter 'p' is"):
        distrun.params(p=default)


@pytest.mark.parametrize("raw", ["[1]", "{", "3"])
def test_a_malformed_environment_is_an_error(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(PARAMS_ENV, raw)
    with pytest.raises(ValueError, match="DISTRUN_PARAMS is not a JSON object"):
        distrun.params(p=1)


def test_distrun_params_imports_only_the_standard_library() -> None:
    probe = """
import sys
sys.path.insert(0, sys.argv[1])
before = set(sys.modules)
import distrun
assert sorted(set(sys.modules) - before) == ["distrun"], sorted(set(sys.modules) - before)
distrun.params(a=1)
distrun.params(a=1)  # still the function after its module was imported
from distrun import params
new = sorted(set(sys.modules) - before)
print([m for m in new if m.split(".")[0] not in sys.stdlib_module_names])
"""
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe, str(PACKAGE_PARENT)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.strip() == str(
        ["distrun", "distrun.core", "distrun.core.trial_env", "distrun.trial"]
    ), result.stderr
