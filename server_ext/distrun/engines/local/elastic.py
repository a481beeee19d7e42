"""`%elastic=MIN:MAX` on the local engine: every replica runs torch's own elastic agent
(`python -m torch.distributed.run`), one training process each, meeting at a c10d rendezvous
whose store a process of the job keeps (so that any replica, the first too, may die and the
rest go on). The agents re-form the group without a replica that died (down to MIN) and take
it back when the supervisor restarts it (up to MAX); docs/fault-tolerance.md.
"""

import subprocess
from pathlib import Path

from distrun.core.elastic_agent import RDZV_CONF
from distrun.engines.local.processes import death_signal_launcher

# How often an agent looks at its training process and at replicas waiting to join (torch: 0.1
# to 5 depending on the version).
MONITOR_SECONDS = 0.5

# The rendezvous store: a TCPStore server in the replicas' Python (it has torch), the port its
# only argument. Run with `-c`: nothing of the job's is interpolated into it.
_STORE_PROGRAM = """
import datetime, sys, time
from torch.distributed import TCPStore
port = int(sys.argv[1])
store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                 timeout=datetime.timedelta(seconds=60))
print(f"distrun: the elastic rendezvous store listens on 127.0.0.1:{port}", flush=True)
while True:
    time.sleep(3600)
"""


def agent_argv(
    python: str, script: str, job_id: str, elastic: tuple[int, int], port: int, restarts: int
) -> list[str]:
    """A replica's command line: torch's elastic agent running `script` in one process."""
    low, high = elastic
    # The store is the job's own process (start_store): no agent hosts it.
    conf = ",".join(f"{key}={value}" for key, value in {"is_host": "0", **RDZV_CONF}.items())
    return [
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={low}:{high}",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id={job_id}",
        f"--rdzv-conf={conf}",
        f"--max-restarts={restarts}",
        f"--monitor-interval={MONITOR_SECONDS}",
        script,
    ]


def start_store(
    python: str, cwd: Path, env: dict[str, str], port: int
) -> "subprocess.Popen[bytes]":
    """Starts the rendezvous store, in its own process group, dying with this process, writing
    to this process's output (the supervisor's log); it carries the job's environment, so the
    job's end finds it (kill_job_processes). Raises OSError where it cannot start."""
    launcher = death_signal_launcher() or []
    return subprocess.Popen(
        [*launcher, python, "-c", _STORE_PROGRAM, str(port)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        process_group=0,
    )
