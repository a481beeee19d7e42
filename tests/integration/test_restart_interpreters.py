"""Interpreters started ahead of a job's restart with the job's modules imported
(restart_interpreters.py), with real processes: the modules are the ones `distrun.checkpoint`
recorded; a program handed one sees what the same program started cold sees (environment,
arguments, `sys.path`, `__main__`, the modules loaded and their files, seeded random numbers,
threads); one whose preload or environment differs is not handed the replica."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from distrun.core.checkpoint_env import IMPORTS_FILE
from distrun.core.replica_env import DEFAULT_ENV
from distrun.engines.local.processes import spawn_replica
from distrun.engines.local.restart_interpreters import RestartInterpreters, recorded_modules

from .test_waiting_interpreters import run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("replicas_start_ahead"),
]

# What a training program's start does that a preload could change: its imports (torch where
# installed), its seeds, and then everything it can observe of its process.
PROBE = """
import json, os, random, sys, threading, decimal, fractions
try:
    import torch
    import torch.distributed
    from torch.nn.parallel import DistributedDataParallel
    import torch._dynamo
except ImportError:
    torch = None
from distrun import checkpoint

random.seed(7)
seeded = {"random": random.random()}
if torch is not None:
    torch.manual_seed(0)
    seeded["torch"] = torch.rand(3).tolist()
    seeded["torch_seed"] = torch.initial_seed()
checkpoint.save({"step": 0}, step=0)  # records the imports (on rank 0)
main = sys.modules["__main__"]
print(json.dumps({
    "seeded": seeded,
    "modules": {name: getattr(m, "__file__", None) for name, m in sorted(sys.modules.items())
                if name != "__main__" and name != "__mp_main__"},
    "mp_main": sys.modules.get("__mp_main__") is main,
    "environ": dict(os.environ),
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "path": sys.path,
    "globals": sorted(vars(main)),
    "file": main.__file__,
    "name": __name__,
    "cwd": os.getcwd(),
    "threads": [t.name for t in threading.enumerate()],
    "fds": sorted(os.listdir("/proc/self/fd")),
}))
"""


def job_env(checkpoints: Path, port: str, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        **DEFAULT_ENV,
        "DISTRUN_CHECKPOINT_DIR": str(checkpoints),
        "DISTRUN_RESTART": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": port,
        "RANK": "0",
        **more,
    }


def recorded(tmp_path: Path) -> tuple[Path, Path, list[tuple[str, str]]]:
    """The job's directory, its checkpoint directory and the modules its first run recorded
    (the probe run once with a checkpoint saved)."""
    code, checkpoints = tmp_path / "code", tmp_path / "checkpoints"
    code.mkdir()
    (code / "main.py").write_text(PROBE)
    env = job_env(checkpoints, "0")
    status, output = run(spawn_replica([sys.executable, "main.py"], code, env))
    assert status == 0, output
    modules = recorded_modules(checkpoints / IMPORTS_FILE)
    assert modules is not None
    return code, checkpoints, modules


async def started_ahead(
    code: Path, start_env: dict[str, str], modules: list[tuple[str, str]]
) -> RestartInterpreters:
    ahead = RestartInterpreters.start(
        1, [sys.executable, "main.py"], code, {"master-0": start_env}, modules
    )
    assert ahead is not None
    await ahead.ready()
    return ahead


ADDRESSES = frozenset({"MASTER_ADDR", "MASTER_PORT"})


async def test_the_checkpoint_helper_records_the_jobs_imports_but_its_own_files(
    tmp_path: Path,
) -> None:
    code, _, modules = recorded(tmp_path)
    names = dict(modules)
    assert "decimal" in names and "distrun.checkpoint" in names
    if "torch" in sys.modules or _installed("torch"):
        assert {"torch", "torch.distributed", "torch._dynamo"} <= names.keys()
    assert not any(file.startswith(str(code)) for file in names.values())
    assert "__main__" not in names


async def test_a_program_handed_a_preloaded_interpreter_sees_what_a_cold_start_shows(
    tmp_path: Path,
) -> None:
    code, checkpoints, modules = recorded(tmp_path)
    argv = [sys.executable, "main.py"]
    env = job_env(checkpoints, "29517")
    cold_status, cold_output = run(spawn_replica(argv, code, env))
    ahead = await started_ahead(code, job_env(checkpoints, "0"), modules)
    try:
        interpreter = ahead.take("master-0", argv, env, ADDRESSES)
        assert interpreter is not None, "it fits: only the address differs"
        handed = interpreter.hand_over(argv, code, env)
        assert handed is not None
        status, output = run(handed)
    finally:
        ahead.close()
    assert (status, cold_status) == (0, 0), output + cold_output
    cold, warm = json.loads(cold_output), json.loads(output)
    extra = {k: v for k, v in warm["modules"].items() if cold["modules"].get(k, "?") != v}
    missing = {k: v for k, v in cold["modules"].items() if k not in warm["modules"]}
    assert warm == cold, (extra, missing)
    assert warm["environ"]["MASTER_PORT"] == "29517"
    if "torch" in warm["modules"]:  # set by torch._inductor as it is imported: kept
        assert "TORCHINDUCTOR_CACHE_DIR" in warm["environ"]


async def test_an_interpreter_whose_environment_differs_beyond_the_addresses_is_not_handed_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, checkpoints, modules = recorded(tmp_path)
    argv = [sys.executable, "main.py"]
    ahead = await started_ahead(code, job_env(checkpoints, "0"), modules)
    try:
        env = job_env(checkpoints, "29518", OMP_NUM_THREADS="3")
        assert ahead.take("master-0", argv, env, ADDRESSES) is None
        assert ahead.take("master-0", argv, env, ADDRESSES) is None, "ended, not kept"
    finally:
        ahead.close()
    assert "its environment differs in OMP_NUM_THREADS" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("modules", "said"),
    [
        ([("json", "/elsewhere/json/__init__.py")], "its preload: json is "),
        ([("no_such_module_distrun", "/nowhere/x.py")], "importing no_such_module_distrun failed"),
    ],
    ids=["found elsewhere", "import fails"],
)
async def test_an_interpreter_whose_preload_went_otherwise_is_not_handed_over(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    modules: list[tuple[str, str]],
    said: str,
) -> None:
    code, checkpoints = tmp_path / "code", tmp_path / "checkpoints"
    code.mkdir()
    (code / "main.py").write_text("print('cold')\n")
    argv = [sys.executable, "main.py"]
    ahead = await started_ahead(code, job_env(checkpoints, "0"), modules)
    try:
        assert ahead.take("master-0", argv, job_env(checkpoints, "1"), ADDRESSES) is None
    finally:
        ahead.close()
    assert said in capsys.readouterr().err


def test_a_record_that_is_not_a_list_of_pairs_is_none(tmp_path: Path) -> None:
    record = tmp_path / IMPORTS_FILE
    assert recorded_modules(record) is None  # absent
    for text in ("{", "[]", '{"a": 1}', '[["a"]]', '[["a", 1]]'):
        record.write_text(text)
        assert recorded_modules(record) is None, text
    record.write_text('[["a", "/a.py"]]')
    assert recorded_modules(record) == [("a", "/a.py")]


def _installed(module: str) -> bool:
    found = subprocess.run([sys.executable, "-c", f"import {module}"], check=False)
    return found.returncode == 0
