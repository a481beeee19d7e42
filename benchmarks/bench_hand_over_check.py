"""What the check before a hand-over costs: a replica goes to an interpreter started ahead only
while every file its start read is as it was (waiting_interpreters.WaitingInterpreter.changed);
the check stats each of them, once per replica handed over.

    python benchmarks/bench_hand_over_check.py [--repetitions 200] [--interpreters 3]

Side by side, in the same run: the check, the hand-over without it (writing the job to the
interpreter), and the floor it saves, a cold interpreter's start to its first line. Medians.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import median, ms, require_local_engine, skip, use_repo_package

CODE = 'print("hello", flush=True)\n'


def first_line(pipe: int) -> None:
    while b"\n" not in os.read(pipe, 65536):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=200)
    parser.add_argument("--interpreters", type=int, default=3)
    args = parser.parse_args()
    use_repo_package()
    require_local_engine()
    from distrun.core.replica_env import DEFAULT_ENV
    from distrun.engines.local import waiting_interpreters
    from distrun.engines.local.processes import spawn_replica
    from distrun.engines.local.waiting_interpreters import WaitingInterpreter

    if not waiting_interpreters.supported():
        skip("no interpreter is started ahead here (waiting_interpreters.supported)")
    env = {**os.environ, **DEFAULT_ENV}
    with tempfile.TemporaryDirectory() as tmp:
        code_dir = Path(tmp)
        (code_dir / "main.py").write_text(CODE)
        argv = [sys.executable, "main.py"]
        checks, hand_overs, handed_lines, cold_lines = [], [], [], []
        inputs = 0
        for _ in range(max(1, args.repetitions // 20)):
            waiting = [
                WaitingInterpreter.start(sys.executable, env, "bench")
                for _ in range(args.interpreters)
            ]
            time.sleep(1.0)  # up and waiting, as after a person's pause
            for interpreter in waiting:
                interpreter.changed()  # reads the report once: not part of the per-check cost
                inputs = len(interpreter.report.inputs) if interpreter.report else 0
                for _ in range(20):
                    start = time.perf_counter()
                    assert interpreter.changed() is None
                    checks.append(time.perf_counter() - start)
                start = time.perf_counter()
                spawned = interpreter.hand_over(argv, code_dir, env)
                hand_overs.append(time.perf_counter() - start)
                assert spawned is not None
                first_line(spawned.pipe)
                handed_lines.append(time.perf_counter() - start)
                os.close(spawned.pipe)
                spawned.process.wait()
            start = time.perf_counter()
            cold = spawn_replica(argv, code_dir, env)
            first_line(cold.pipe)
            cold_lines.append(time.perf_counter() - start)
            os.close(cold.pipe)
            cold.process.wait()
    print(f"the check ({inputs} files and directories stat'ed)   {ms(median(checks))}")
    print(f"the hand-over itself (the job written)        {ms(median(hand_overs))}")
    print(f"hand-over to the first line                   {ms(median(handed_lines))}")
    print(f"cold start to the first line (the floor)      {ms(median(cold_lines))}")
    print(f"check / cold start: {median(checks) / median(cold_lines):.3f}")


if __name__ == "__main__":
    main()
