"""Which capabilities DISTRUN_LOCAL_PORTABLE forces onto the portable path."""

import pytest

from distrun.core.errors import SpecError
from distrun.engines.local.capabilities import NAMES, detect, forced_portable


def test_one_forces_every_capability_and_nothing_forces_none() -> None:
    assert forced_portable("1") == set(NAMES)
    assert forced_portable(None) == forced_portable("") == forced_portable("0") == set()
    assert set(detect("1").paths().values()) == {"portable"}


def test_a_list_forces_just_those() -> None:
    assert forced_portable(" proc , inotify") == {"proc", "inotify"}
    paths = detect("proc,inotify").paths()
    assert paths["proc"] == paths["inotify"] == "portable"


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SpecError, match="unknown capability procfs; write 1 .* pidfd, pdeathsig"):
        forced_portable("procfs")
