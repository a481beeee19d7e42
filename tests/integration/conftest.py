"""The integration tier's one shared fixture: whether replicas can start ahead here."""

import pytest

from distrun.engines.local import capabilities
from distrun.engines.local.processes import death_signal_launcher

COLD = "no PR_SET_PDEATHSIG or /proc here (not Linux, or forced portable): replicas start cold"


@pytest.fixture
def replicas_start_ahead() -> None:
    """Skips where the platform (or DISTRUN_LOCAL_PORTABLE) rules waiting interpreters out by
    design; fails where it allows them and only util-linux's setpriv is missing, as
    test_replica_spawn does: setpriv is part of a Linux machine's toolchain, and its absence
    must not turn these tests into skips."""
    linux = capabilities.current()
    if not (linux.pdeathsig and linux.proc and linux.pidfd):
        pytest.skip(COLD)
    if death_signal_launcher() is None:
        pytest.fail("setpriv with --pdeathsig (util-linux >= 2.33) is part of this toolchain")
