"""A job that resumes from an earlier one (`resume_from`): it starts with a copy of that job's
checkpoint directory, so `distrun.checkpoint.load` (or Lightning's and Hugging Face's resume
paths) find its newest checkpoint, and the earlier job's own checkpoints stay as they were.

A copy, not a link: code that overwrites a checkpoint file in place (`torch.save` to the same
name) would otherwise change the earlier job's. The files distrun keeps beside the checkpoints
for the earlier job's own timeline and restarts are not copied.
"""

import shutil
from pathlib import Path

from distrun.core.checkpoint_env import IMPORTS_FILE, RESUMED_FILE
from distrun.core.errors import SpecError

_THE_EARLIER_JOBS_OWN = shutil.ignore_patterns(RESUMED_FILE, IMPORTS_FILE)


def copy_checkpoints(earlier: Path, into: Path) -> None:
    """Copies the earlier job's checkpoint directory `earlier` into the new job's `into`."""
    if not earlier.is_dir():  # a job from before checkpoints were kept: nothing to resume
        return
    try:
        shutil.copytree(earlier, into, ignore=_THE_EARLIER_JOBS_OWN, dirs_exist_ok=True)
    except (OSError, shutil.Error) as error:
        raise SpecError(
            f"the checkpoints of {earlier.parent.name} cannot be copied: {error}",
            field="resume_from",
        ) from None
