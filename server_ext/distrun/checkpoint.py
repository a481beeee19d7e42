"""`distrun.checkpoint`: save and resume from the directory distrun keeps for a job.

    state = checkpoint.load()                       # None on the first attempt
    start = state["step"] + 1 if state else 0
    ...
    checkpoint.save({"step": step, "model": model.state_dict()}, step=step)

Runs inside the replicas: standard library only, torch when it is installed (`torch.save` and
`torch.load`, else pickle). The directory is DISTRUN_CHECKPOINT_DIR, which every replica of a
job gets and which outlives the job's restarts (see docs/fault-tolerance.md). A checkpoint is
written to a hidden temporary file and renamed into place, so a replica killed mid-save leaves
the last complete one as the newest; `save` writes only on rank 0 (RANK), all ranks `load`.
"""

import contextlib
import json
import os
import pickle
import re
import sys
import time
from pathlib import Path
from typing import Any

from distrun.core.checkpoint_env import (
    CHECKPOINT_DIR_ENV,
    IMPORTS_FILE,
    RESTART_ENV,
    RESUMED_FILE,
)

_NAME = re.compile(r"^step-(\d{12})\.ckpt\Z")
_TEMPORARY_PREFIX = ".partial-"
_recorded_imports = 0  # how many modules this process had when it last recorded them


def directory(path: str | os.PathLike[str] | None = None) -> Path:
    """`path`, else DISTRUN_CHECKPOINT_DIR; raises RuntimeError when neither is set."""
    chosen = path if path is not None else os.environ.get(CHECKPOINT_DIR_ENV)
    if not chosen:
        raise RuntimeError(
            f"{CHECKPOINT_DIR_ENV} is not set: run the code as a distrun job, or pass the "
            "directory to save/load"
        )
    return Path(chosen)


def is_saving_rank() -> bool:
    """Whether this process writes checkpoints: rank 0, or a process with no RANK."""
    return os.environ.get("RANK", "0") == "0"


def save(
    state: Any, step: int, *, keep: int = 3, path: str | os.PathLike[str] | None = None
) -> Path | None:
    """Writes `state` as the checkpoint of `step` (on rank 0 only: None elsewhere) and deletes
    all but the newest `keep`. The file appears complete or not at all."""
    if step < 0:
        raise ValueError(f"step must be 0 or more, not {step}")
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")
    if not is_saving_rank():
        return None
    folder = directory(path)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"step-{step:012d}.ckpt"
    temporary = folder / f"{_TEMPORARY_PREFIX}{final.name}.{os.getpid()}"
    try:
        with open(temporary, "wb") as file:
            _dump(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    _sync_directory(folder)
    for old in complete(folder)[:-keep]:
        with contextlib.suppress(FileNotFoundError):
            old.unlink()
    _record_imports(folder)
    return final


def load(path: str | os.PathLike[str] | None = None, *, map_location: Any = "cpu") -> Any:
    """The newest complete checkpoint's state, or None when there is none yet. Rank 0 notes
    the step it resumed from for the job's timeline."""
    folder = directory(path)
    found = complete(folder)
    if not found:
        return None
    with open(found[-1], "rb") as file:
        state = _load(file, map_location)
    if is_saving_rank():
        _note_resumed(folder, _step_of(found[-1]))
    return state


def latest_step(path: str | os.PathLike[str] | None = None) -> int | None:
    """The step of the newest complete checkpoint, or None."""
    found = complete(directory(path))
    return _step_of(found[-1]) if found else None


def complete(folder: Path) -> list[Path]:
    """The complete checkpoints in `folder`, oldest first."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return [folder / name for name in sorted(names) if _NAME.match(name)]


def _step_of(checkpoint: Path) -> int:
    match = _NAME.match(checkpoint.name)
    assert match is not None
    return int(match[1])


def _note_resumed(folder: Path, step: int) -> None:
    restart = os.environ.get(RESTART_ENV, "0")
    entry = {"time": time.time(), "restart": int(restart) if restart.isdigit() else 0}
    line = json.dumps({**entry, "step": step}) + "\n"
    with contextlib.suppress(OSError), open(folder / RESUMED_FILE, "a") as file:
        file.write(line)


def _record_imports(folder: Path) -> None:
    """Notes the modules this process imported (once, and again whenever it imported more), so
    that the job's next attempt can start in interpreters that imported them ahead."""
    global _recorded_imports
    if len(sys.modules) <= _recorded_imports:
        return
    _recorded_imports = len(sys.modules)
    temporary = folder / f"{_TEMPORARY_PREFIX}{IMPORTS_FILE}.{os.getpid()}"
    with contextlib.suppress(OSError):
        temporary.write_text(json.dumps(_imported_modules()))
        os.replace(temporary, folder / IMPORTS_FILE)


def _imported_modules() -> list[list[str]]:
    """[name, file] of every module imported from a file (not frozen or built in), in import
    order, but the program's
    own (those under its script's directory or the working directory): what importing them by
    name again, from the same sys.path, loads from the same files."""
    own = [os.path.realpath(os.getcwd())]
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if isinstance(main_file, str):
        own.append(os.path.dirname(os.path.realpath(main_file)))
    found = []
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        file = getattr(module, "__file__", None)
        if spec is None or spec.name != name or not spec.has_location or not isinstance(file, str):
            continue
        real = os.path.realpath(file)
        if not any(real.startswith(directory + os.sep) for directory in own):
            found.append([name, file])
    return found


def _dump(state: Any, file: Any) -> None:
    try:
        import torch
    except ImportError:
        pickle.dump(state, file, protocol=pickle.HIGHEST_PROTOCOL)
        return
    torch.save(state, file)


def _load(file: Any, map_location: Any) -> Any:
    try:
        import torch
    except ImportError:
        return pickle.load(file)  # the job's own file, written by save
    # weights_only=False: the state may hold RNG states and plain objects the job saved itself.
    return torch.load(file, map_location=map_location, weights_only=False)


def _sync_directory(folder: Path) -> None:
    """Makes the rename durable (a machine that crashes keeps the new name)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
