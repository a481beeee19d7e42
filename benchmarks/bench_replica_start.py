"""Where a restarted PyTorch replica's seconds go (issue 32, goodput): two gloo ranks started
together, as a whole-job restart starts them, each timing its phases from the moment both were
started: `import torch`, `init_process_group` (the rendezvous) and wrapping a model in DDP,
whose constructor imports `torch._dynamo` the first time. Beside it, in the same run, the same
pair with `torch._dynamo` imported up front (what an interpreter waiting with torch imported
would have done before the failure).

    python benchmarks/bench_replica_start.py [--repeat 3]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

_RANK = """
import json, sys, time
started = float(sys.argv[2])
import torch, torch.distributed as dist
if sys.argv[3] == "preload":
    import torch._dynamo
imported = time.time()
dist.init_process_group("gloo", rank=int(sys.argv[1]), world_size=2)
joined = time.time()
torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
wrapped = time.time()
dist.destroy_process_group()
print(json.dumps({"import": imported - started, "rendezvous": joined - imported,
                  "ddp": wrapped - joined, "ready": wrapped - started}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pair(variant: str) -> dict[str, float]:
    """The slower rank's phases of one pair started together."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    started = str(time.time())
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK, str(rank), started, variant],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    phases = [json.loads(rank.communicate(timeout=300)[0]) for rank in ranks]
    return max(phases, key=lambda each: each["ready"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "preload": []}
    for _ in range(args.repeat):
        for variant, each in runs.items():
            each.append(_pair(variant))
    for variant, each in runs.items():
        medians = {phase: statistics.median(run[phase] for run in each) for phase in each[0]}
        print(variant, " ".join(f"{phase} {value:.2f} s" for phase, value in medians.items()))


if __name__ == "__main__":
    main()
