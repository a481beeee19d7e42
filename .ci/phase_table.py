"""Where a run of .ci/test spent its time: each step, and each background build, as a table.

`python .ci/phase_table.py DIR` reads DIR/steps.tsv (name, start, end, exit status: seconds
from the start of .ci/test, one step a line), DIR/prepare_started (when tests/prepare.py was
started, on the same clock) and DIR/prepare.json (its report: each build's start and end on its
own clock).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d}"


def rows(directory: Path) -> list[tuple[str, float, float, str]]:
    steps = []
    for line in (directory / "steps.tsv").read_text().splitlines():
        name, start, end, status = line.split("\t")
        steps.append((name, float(start), float(end), "" if status == "0" else f"exit {status}"))
    return steps


def build_rows(directory: Path) -> list[tuple[str, float, float, str]]:
    report, offset_file = directory / "prepare.json", directory / "prepare_started"
    if not report.exists() or not offset_file.exists():
        return []
    offset = float(offset_file.read_text())
    return [
        (
            f"  {name}",
            offset + step["start"],
            offset + step["end"],
            "failed" if step["error"] else "",
        )
        for name, step in json.loads(report.read_text()).items()
    ]


def table(directory: Path) -> str:
    steps, builds = rows(directory), build_rows(directory)
    width = max(len(name) for name, *_ in steps + builds)
    lines = ["", "=== where the time went (minutes:seconds since .ci/test started)"]
    lines.append(f"{'step':<{width}}  {'start':>6}  {'end':>6}  {'took':>6}")

    def line(name: str, start: float, end: float, note: str) -> str:
        took = clock(end - start)
        return f"{name:<{width}}  {clock(start):>6}  {clock(end):>6}  {took:>6}  {note}".rstrip()

    lines += [line(*row) for row in steps]
    if builds:
        lines.append("builds, in the background (tests/prepare.py):")
        lines += [line(*row) for row in builds]
    total = max(end for _, _, end, _ in steps)
    lines.append(f"{'total':<{width}}  {'':>6}  {clock(total):>6}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(Path(sys.argv[1])))
