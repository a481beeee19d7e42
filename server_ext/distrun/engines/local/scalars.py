"""Reads the TensorBoard event files under a job's `tensorboard/` directory (one directory per
replica, `DISTRUN_TENSORBOARD_DIR`) with TensorBoard's own reader, incrementally: each job's
multiplexer is kept and reloaded, reading only what was appended since.

TensorBoard is optional: without it the report says what to install. It is made to use its
TensorFlow stub (its `notf` switch), so reading event files never imports TensorFlow into the
server.
"""

import sys
import threading
import types
from collections import OrderedDict
from pathlib import Path
from typing import Any

from distrun.core.scalars import MAX_POINTS_PER_TAG, Scalars, ScalarsReport

MISSING_READER = (
    "TensorBoard scalars need the tensorboard package on the server: pip install tensorboard"
)
KEPT_JOBS = 16  # multiplexers kept between requests (the jobs being looked at)

_lock = threading.Lock()
_multiplexers: "OrderedDict[Path, Any]" = OrderedDict()


def read_scalars(root: Path) -> ScalarsReport:
    """Every scalar series under `root`: a run's first path part is its replica; deeper runs
    (`SummaryWriter(dir + "/train")`) prefix their tags with the rest (`train/loss`)."""
    if not root.is_dir() or not any(root.rglob("*tfevents*")):
        return ScalarsReport(True)
    try:
        multiplexer = _reloaded(root)
        from tensorboard.util import tensor_util
    except ImportError:
        return ScalarsReport(False, MISSING_READER)
    scalars: Scalars = {}
    for run, tags in sorted(multiplexer.PluginRunToTagToContent("scalars").items()):
        replica, _, sub = run.partition("/")
        for tag in sorted(tags):
            name = f"{sub}/{tag}" if sub else tag
            points = [
                (int(event.step), float(tensor_util.make_ndarray(event.tensor_proto)))
                for event in multiplexer.Tensors(run, tag)
            ]
            scalars.setdefault(replica, {})[name] = sorted(points)
    return ScalarsReport(True, None, scalars)


def _reloaded(root: Path) -> Any:
    with _lock:
        multiplexer = _multiplexers.pop(root, None)
        if multiplexer is None:
            multiplexer = _new_multiplexer()
        _multiplexers[root] = multiplexer
        while len(_multiplexers) > KEPT_JOBS:
            _multiplexers.popitem(last=False)
        multiplexer.AddRunsFromDirectory(str(root))  # runs made since are added
        multiplexer.Reload()
        return multiplexer


def _new_multiplexer() -> Any:
    # TensorBoard's own switch to its TensorFlow stub: the module's presence is the switch.
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.backend.event_processing import plugin_event_multiplexer

    return plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={"scalars": MAX_POINTS_PER_TAG}
    )
