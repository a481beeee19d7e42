"""Build, once per machine, everything the tiers that need more than this checkout use: the
control plane and the real controllers from their Go modules, helm, Enterprise Gateway's
virtualenv, the hub's proxy and the previous release's virtualenv (tests/compat).

`.ci/test` starts `python -m tests.prepare --report FILE` in the background before set-up
(it needs only Python and PyYAML), and runs the tiers that need none of it meanwhile; a tier that needs a
component waits for it (each component has a file lock and appears by an atomic rename, so the
tests and this build share the cache safely). The steps run in the order the tiers need them,
`--workers` at a time, and each one's start and end go to the report, from which `.ci/test`'s
closing table reads where the time went.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from tests.compat.release_venv import release_python
from tests.gateway.eg_venv import ensure_eg_venv
from tests.helm.helm_binary import ensure_helm
from tests.hub.proxy import ensure_proxy
from tests.k8s import binaries, controller_builds
from tests.releases import previous_release

Step = Callable[[], object]


def steps() -> dict[str, Step]:
    """Every component, in the order the tiers first need it (a dict keeps that order)."""
    report = binaries.report_to_stderr
    crds: dict[str, Step] = {
        f"crds:{source.name}": partial(binaries.ensure_crds, source, report)
        for source in binaries.CRD_SOURCES
    }
    manifests: dict[str, Step] = {
        f"manifests:{name}": partial(controller_builds.ensure_manifests, source, report)
        for name, source in controller_builds.MANIFEST_SOURCES.items()
    }
    return {
        "enterprise-gateway venv": ensure_eg_venv,
        "previous release venv": lambda: release_python(previous_release()),
        "etcd": lambda: binaries.ensure_etcd(report),
        "kubernetes": lambda: binaries.ensure_kubernetes(report),
        **crds,
        "kwok": lambda: binaries.ensure_kwok(report),
        "training-operator": lambda: binaries.ensure_training_operator(report),
        "kueue": lambda: binaries.ensure_kueue(report),
        "helm": ensure_helm,
        "hub proxy": ensure_proxy,
        "metrics-server": lambda: binaries.ensure_metrics_server(report),
        **manifests,
        "volcano": lambda: controller_builds.ensure_volcano(report),
        "jobset": lambda: controller_builds.ensure_jobset(report),
        "trainer": lambda: controller_builds.ensure_trainer(report),
        "katib": lambda: controller_builds.ensure_katib(report),
        "katib suggestion": lambda: controller_builds.ensure_katib_suggestion(report),
    }


def run(selected: dict[str, Step], workers: int) -> dict[str, dict[str, Any]]:
    """Each step's start and end (seconds since this run began) and its error, if any."""
    began = time.monotonic()
    record: dict[str, dict[str, Any]] = {}

    def timed(name: str, step: Step) -> None:
        start = time.monotonic() - began
        error = None
        try:
            step()
        except Exception:  # noqa: BLE001  (reported; the tier that needs it fails on it again)
            error = traceback.format_exc(limit=3)
            print(f"[prepare] {name} failed:\n{error}", file=sys.stderr, flush=True)
        record[name] = {"start": start, "end": time.monotonic() - began, "error": error}

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for name, step in selected.items():
            pool.submit(timed, name, step)
    return {name: record[name] for name in selected}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", type=Path, help="write each step's start and end here")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("only", nargs="*", help="these steps alone (default: every step)")
    args = parser.parse_args(argv)
    every = steps()
    unknown = set(args.only) - set(every)
    if unknown:
        parser.error(f"no such step: {', '.join(sorted(unknown))}; steps: {', '.join(every)}")
    selected = {name: every[name] for name in args.only} if args.only else every
    record = run(selected, args.workers)
    if args.report:
        args.report.write_text(json.dumps(record, indent=1))
    failed = [name for name, step in record.items() if step["error"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
