"""The running engines by name, built from configuration.

Each configured engine names a class and its keyword arguments; `state_dir` and `limits` are
added when the class's constructor takes them, so the local engine needs no entry of its own.
"""

import asyncio
import importlib
import inspect
import logging
from pathlib import Path
from typing import Any

from distrun.core.errors import DistrunError, EngineError, NotFound, SpecError
from distrun.core.job import Job
from distrun.core.spec import Limits
from distrun.engines.protocol import Engine

log = logging.getLogger(__name__)

# Class paths from before the engines moved into engines/local and engines/kube: still accepted
# in configuration (with a deprecation warning), so existing jupyter_server_config.py files work.
DEPRECATED_CLASS_PATHS = {
    "distrun.engines.kubeflow.KubeflowEngine": "distrun.engines.kube.kubeflow.KubeflowEngine",
    "distrun.engines.trainer.TrainerEngine": "distrun.engines.kube.trainer.TrainerEngine",
    "distrun.engines.volcano.VolcanoEngine": "distrun.engines.kube.volcano.VolcanoEngine",
}


class EngineRegistry:
    """The running engines by name, the default first."""

    def __init__(self, engines: dict[str, Engine], default_engine: str) -> None:
        if default_engine not in engines:
            raise ValueError(
                f"DistrunApp.default_engine is {default_engine!r}, which is not configured; "
                f"configured engines are {', '.join(engines) or 'none'}"
            )
        self.default_name = default_engine
        self._engines = {default_engine: engines[default_engine], **engines}

    def names(self) -> list[str]:
        return list(self._engines)

    def all(self) -> list[Engine]:
        return list(self._engines.values())

    def get(self, name: str | None) -> Engine:
        engine = self._engines.get(name or self.default_name)
        if engine is None:
            raise SpecError(
                f"unknown engine {name!r}; write one of {', '.join(self._engines)}", field="engine"
            )
        return engine

    async def find_job(self, job_id: str, owner: str) -> tuple[Engine, Job]:
        """The engine holding `job_id` for `owner`. Ids are unique per engine, so ask each."""
        unreachable: EngineError | None = None
        for engine in self.all():
            try:
                return engine, await engine.get_job(job_id, owner)
            except NotFound:
                continue
            except EngineError as err:
                unreachable = err
        if unreachable is not None:
            raise unreachable
        raise NotFound(f"no job {job_id!r}")

    async def close(self) -> None:
        await asyncio.gather(*(engine.close() for engine in self.all()), return_exceptions=True)


def build_engine(name: str, entry: Any, state_dir: Path, limits: Limits) -> Engine:
    """The engine `{'class': 'module.Class', 'kwargs': {...}}` configures under `name`."""
    if not isinstance(entry, dict) or not isinstance(entry.get("class"), str):
        raise TypeError(
            f"DistrunApp.engines[{name!r}] must be {{'class': 'module.Class', 'kwargs': {{}}}}"
        )
    class_path = entry["class"]
    if class_path in DEPRECATED_CLASS_PATHS:
        log.warning(
            "engine %r: %s is deprecated; write %s",
            name,
            class_path,
            DEPRECATED_CLASS_PATHS[class_path],
        )
        class_path = DEPRECATED_CLASS_PATHS[class_path]
    module_name, _, class_name = class_path.rpartition(".")
    try:
        engine_class = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"engine {name!r}: cannot import {entry['class']}: {err}") from err
    kwargs = dict(entry.get("kwargs", {}))
    parameters = inspect.signature(engine_class).parameters
    if "state_dir" in parameters:
        kwargs.setdefault("state_dir", state_dir)
    if "limits" in parameters:
        kwargs.setdefault("limits", limits)
    try:
        engine: Engine = engine_class(**kwargs)
    except (DistrunError, TypeError, ValueError, OSError) as err:
        raise ValueError(f"engine {name!r}: cannot start {entry['class']}: {err}") from err
    # The configured name is the engine's name (in its info, its jobs, `%engine=`), so one
    # class can serve twice, e.g. two clusters as "kubeflow-a" and "kubeflow-b".
    engine.name = name
    return engine
