"""The `distrun` command: run a cell file as a distributed job and follow it from a terminal.

    distrun run train.py --framework pytorch --workers 2    # submit, stream every line, exit
    distrun submit cell.txt                                 # print the job id and return
    distrun sweep sweep.py                                  # run its trials, print the results
    distrun logs JOB [-f] [--replica worker-0] [--tail N]
    distrun ls | cancel JOB | rm JOB | status JOB [--json]

With `--url` and a token (`--token-file`, DISTRUN_TOKEN or DISTRUN_TOKEN_FILE, or
JUPYTER_SERVER_URL/JUPYTER_TOKEN; `--token` works but shows it in the process list) it
talks to a running jupyter_server; otherwise it runs the local engine in-process over the
server's default state directory, so jobs show up on both sides. Flags override the file's
header (`%framework=...` or `%%distrun ...`); a file without a header runs as `generic`.
Exit codes: 0 the job succeeded, 1 it failed or was cancelled, 2 a usage or request error,
130 interrupted (after cancelling the job that `run` started).
"""

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distrun.client.base import Client, read_files, spec_from_text
from distrun.client.connect import client_from_env
from distrun.client.console import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_SUCCEEDED,
    EXIT_USAGE,
    Console,
    LiveRows,
    Rows,
    Shown,
    draw_nothing,
    exit_code,
    job_details,
    jobs_table,
    render,
    replica_names,
    shown_for,
    status_line,
    stream_job,
    use_color,
)
from distrun.client.usage_table import usage_table
from distrun.core.errors import DistrunError, SpecError
from distrun.core.gpus import GPU_FALLBACKS, GpuAmount, parse_gpu
from distrun.core.spec import JobSpec, Limits
from distrun.core.version import distrun_version
from distrun.engines.local import capabilities

if TYPE_CHECKING:
    from distrun.client.sweep_runner import SweepRun
    from distrun.core.sweep import SweepSpec

ROLE_FLAGS = {  # role -> its flags; plural forms as the %%distrun magic accepts them
    "master": ("--master", "--masters"),
    "worker": ("--worker", "--workers"),
    "ps": ("--ps",),
    "chief": ("--chief", "--chiefs"),
    "evaluator": ("--evaluator", "--evaluators"),
    "launcher": ("--launcher", "--launchers"),
}
# JobSpec fields set by a flag of the same name (`--restart-policy` -> restart_policy)
SCALAR_FIELDS = (
    "framework",
    "image",
    "name",
    "engine",
    "namespace",
    "restart_policy",
    "restart",
    "clean_pod_policy",
    "queue",
    "priority_class",
)


# --- argument parsing -----------------------------------------------------------------------


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; write 0 or more")
    return value


def _env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def _role_resources(text: str) -> tuple[str, dict[str, Any]]:
    """`worker:cpu=2,memory=4Gi,gpu=1` -> ("worker", {"cpu": "2", "memory": "4Gi", "gpu": 1});
    gpu may be a share (0.5) or a MIG profile, gpuMemory a quantity (10Gi)."""
    role, sep, rest = text.partition(":")
    if not sep or not role or not rest:
        raise argparse.ArgumentTypeError(f"{text!r} is not ROLE:cpu=N,memory=Q,gpu=N")
    resources: dict[str, Any] = {}
    for item in rest.split(","):
        key, eq, value = item.partition("=")
        field = _ROLE_RESOURCE_KEYS.get(key)
        if field is None or not eq or not value:
            raise argparse.ArgumentTypeError(
                f"{item!r} in {text!r} is not cpu=N, memory=Q, gpu=N or gpuMemory=Q"
            )
        resources[field] = _gpu(value) if key == "gpu" else value
    return role, resources


_ROLE_RESOURCE_KEYS = {"cpu": "cpu", "memory": "memory", "gpu": "gpu", "gpuMemory": "gpu_memory"}


def _gpu(text: str) -> GpuAmount:
    try:
        return parse_gpu(text, 10**6)
    except SpecError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _file_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def add_spec_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the %%distrun magic; each overrides the file's header."""
    group = parser.add_argument_group("job spec (overrides the file's header)")
    group.add_argument(
        "--framework", help="pytorch, tensorflow, xgboost, paddle, jax, mpi, generic"
    )
    for role, flags in ROLE_FLAGS.items():
        group.add_argument(*flags, dest=f"role_{role}", type=_count, metavar="N")
    group.add_argument("--cpu", help="CPU per replica, e.g. 2 or 500m")
    group.add_argument("--memory", help="memory per replica, e.g. 4Gi")
    group.add_argument("--gpu", "--gpus", dest="gpu", type=_gpu, metavar="N",
                       help="GPUs per replica: 1, a share like 0.5, or mig-1g.5gb")  # fmt: skip
    group.add_argument("--gpu-memory", dest="gpu_memory", metavar="Q",
                       help="GPU memory per replica, e.g. 10Gi")  # fmt: skip
    group.add_argument("--gpu-fallback", dest="gpu_fallback", choices=GPU_FALLBACKS,
                       help="cpu: run on the CPU where the machine has no GPU")  # fmt: skip
    group.add_argument("--role-resources", action="append", type=_role_resources, default=[],
                       metavar="ROLE:cpu=N,memory=Q,gpu=N,gpuMemory=Q")  # fmt: skip
    group.add_argument("--image")
    group.add_argument("--name", help="job name (the id adds a random suffix)")
    group.add_argument("--engine")
    group.add_argument("--namespace")
    group.add_argument("--env", action="append", type=_env_pair, default=[], metavar="NAME=VALUE")
    group.add_argument("--files", action="append", type=_file_list, default=[],
                       metavar="A,B", help="files to ship, relative to FILE's directory")  # fmt: skip
    group.add_argument("--restart-policy", help="Never, OnFailure, Always or ExitCode")
    group.add_argument("--backoff-limit", type=_count, metavar="N")
    group.add_argument("--restart", help="what a failure restarts: job or replica")
    group.add_argument("--max-restarts", type=_count, metavar="N", help="restarts of the job")
    group.add_argument(
        "--elastic", metavar="MIN:MAX", help="elastic PyTorch: go on with MIN, take back up to MAX"
    )
    group.add_argument(
        "--checkpoint-volume", metavar="CLAIM", help="on a cluster: the claim for checkpoints"
    )
    group.add_argument(
        "--resume-from", metavar="JOB", help="start from the checkpoints of an earlier job of yours"
    )
    group.add_argument("--deadline", type=_count, metavar="SECONDS")
    group.add_argument("--startup-timeout", type=_count, metavar="SECONDS")
    group.add_argument("--clean-pod-policy", help="None, Running or All")
    group.add_argument("--queue")
    group.add_argument("--priority-class")


def _add_backend_flags(parser: argparse.ArgumentParser, default: Any) -> None:
    group = parser.add_argument_group("backend")
    group.add_argument("--url", default=default, help="a jupyter_server URL (env DISTRUN_URL)")
    group.add_argument("--token", default=default,
                       help="its token; visible in the process list and shell history: prefer "
                            "--token-file or env DISTRUN_TOKEN")  # fmt: skip
    group.add_argument("--token-file", type=Path, default=default,
                       help="a file holding the token (env DISTRUN_TOKEN_FILE)")  # fmt: skip
    group.add_argument("--state-dir", type=Path, default=default,
                       help="the local engine's state directory (without --url)")  # fmt: skip


def version_text() -> str:
    """The version, and which path each of the local engine's capabilities takes here."""
    try:
        paths = capabilities.current().paths()
    except SpecError as error:  # a DISTRUN_LOCAL_PORTABLE that names no capability
        return f"distrun {distrun_version()}\nlocal engine: {error}"
    taken = ", ".join(f"{name} {path}" for name, path in paths.items())
    return f"distrun {distrun_version()}\nlocal engine: {taken}"


class _PrintVersion(argparse.Action):
    """argparse's version action, without its re-wrapping of the lines."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="distrun",
        description="Run a notebook cell as a distributed training job and follow its logs.",
    )
    parser.add_argument("--version", action=_PrintVersion, nargs=0, help="print the version")
    _add_backend_flags(parser, None)
    # Subcommands accept the backend flags too; SUPPRESS keeps them from resetting the above.
    backend = argparse.ArgumentParser(add_help=False)
    _add_backend_flags(backend, argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for name, help_text in (
        ("run", "submit FILE and follow its logs until the job ends"),
        ("submit", "submit FILE and print the job id"),
    ):
        sub = commands.add_parser(name, parents=[backend], help=help_text)
        sub.add_argument("file", metavar="FILE", help="a .py file or a cell with a magic header")
        add_spec_flags(sub)

    sweep = commands.add_parser(
        "sweep", parents=[backend], help="run FILE's parameter sweep and print its results"
    )
    sweep.add_argument(
        "file", metavar="FILE", nargs="?", help="a cell whose header declares %%sweep.<name>="
    )
    sweep.add_argument(
        "--resume",
        metavar="SWEEP",
        help="go on with a sweep whose runner stopped, from its trials (no FILE)",
    )
    sweep.add_argument(
        "--katib",
        action="store_true",
        help="hand the sweep to the cluster's Katib as one Experiment (a server's Kubeflow engine)",
    )
    add_spec_flags(sweep)

    logs = commands.add_parser("logs", parents=[backend], help="print a job's logs")
    logs.add_argument("job_id", metavar="JOB")
    logs.add_argument("-f", "--follow", action="store_true", help="keep following new lines")
    logs.add_argument("--replica", action="append", default=[], help="only this replica")
    logs.add_argument("--tail", type=_count, metavar="N", help="the last N lines per replica")

    listing = commands.add_parser("ls", parents=[backend], help="list your jobs")
    listing.add_argument("--json", action="store_true")
    for name, help_text in (("cancel", "stop every replica"), ("rm", "delete a job and its logs")):
        commands.add_parser(name, parents=[backend], help=help_text).add_argument(
            "job_id", metavar="JOB"
        )
    top = commands.add_parser(
        "top", parents=[backend], help="show each replica's CPU, memory and GPU use"
    )
    top.add_argument("job_id", metavar="JOB")
    status = commands.add_parser("status", parents=[backend], help="show a job's status")
    status.add_argument("job_id", metavar="JOB")
    status.add_argument("--json", action="store_true")
    return parser


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The JobSpec fields the flags set (roles by replica count; resources are applied after)."""
    overrides: dict[str, Any] = {}
    for field in SCALAR_FIELDS:
        value = getattr(args, field)
        if value is not None:
            overrides[field] = value
    roles = {
        role: {"replicas": getattr(args, f"role_{role}")}
        for role in ROLE_FLAGS
        if getattr(args, f"role_{role}") is not None
    }
    if roles:
        overrides["roles"] = roles
    if args.env:
        overrides["env"] = dict(args.env)
    if args.backoff_limit is not None:
        overrides["backoff_limit"] = args.backoff_limit
    if args.max_restarts is not None:
        overrides["max_restarts"] = args.max_restarts
    if args.elastic is not None:
        overrides["elastic"] = args.elastic
    if args.checkpoint_volume is not None:
        overrides["checkpoint_volume"] = args.checkpoint_volume
    if args.resume_from is not None:
        overrides["resume_from"] = args.resume_from
    if args.deadline is not None:
        overrides["active_deadline_seconds"] = args.deadline
    if args.startup_timeout is not None:
        overrides["startup_timeout_seconds"] = args.startup_timeout
    if args.gpu_fallback is not None:
        overrides["gpu_fallback"] = args.gpu_fallback
    return overrides


def apply_resources(spec: JobSpec, args: argparse.Namespace, limits: Limits) -> JobSpec:
    """`--cpu/--memory/--gpu` on every role, then `--role-resources` per role; revalidated."""
    common = {key: getattr(args, key) for key in ("cpu", "memory", "gpu", "gpu_memory")}
    common = {key: value for key, value in common.items() if value is not None}
    per_role: dict[str, dict[str, Any]] = {}
    for role, resources in args.role_resources:
        if role not in spec.roles:
            raise SpecError(
                f"--role-resources names {role!r}, but the job's roles are {', '.join(spec.roles)}"
            )
        per_role.setdefault(role, {}).update(resources)
    if not common and not per_role:
        return spec
    data = spec.to_dict()
    for role, role_data in data["roles"].items():
        role_data["resources"] = {**role_data["resources"], **common, **per_role.get(role, {})}
    return JobSpec.from_dict(data, limits)


def build_spec(text: str, args: argparse.Namespace, limits: Limits, cwd: Path) -> JobSpec:
    """The job `distrun run/submit` asks for: FILE's header, overridden by the flags."""
    from distrun.core.header import parse_cell  # the parser loads only when a file is read

    overrides = overrides_from_args(args)
    if "framework" not in overrides and not parse_cell(text).has_header:
        overrides["framework"] = "generic"
    spec = spec_from_text(text, overrides, cwd, limits)
    spec = apply_resources(spec, args, limits)
    refs = [name for names in args.files for name in names]
    if refs:
        data = spec.to_dict()
        data["files"] = {**data["files"], **read_files(refs, cwd)}
        spec = JobSpec.from_dict(data, limits)
    return spec


# --- commands ---------------------------------------------------------------------------------


def _print(text: str) -> None:
    print(text, flush=True)


def _console(names: list[str]) -> Console:
    return Console(names, color=use_color(sys.stdout), shown=shown_for(sys.stdout))


def _outputs(console: Console) -> tuple[Callable[[str], None], Rows | None]:
    """Where lines go, and where the replicas' unfinished lines are drawn: on a terminal, rows
    redrawn in place below the lines; elsewhere nowhere (a file gets finished lines only)."""
    if console.shown is Shown.RAW:
        return _print, None
    rows = LiveRows(sys.stdout)
    return rows.print, rows.show


def _read_source(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise SpecError(f"cannot read {path}: {reason}") from None


async def submit_file(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    text = _read_source(args.file)
    spec = build_spec(text, args, await client.limits(), Path(args.file).resolve().parent)
    return await client.submit(spec)


async def follow_until_done(client: Client, job: dict[str, Any], console: Console) -> int:
    """Stream the job to stdout; on Ctrl-C cancel it first, say so, and return 130."""
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    emit, show = _outputs(console)
    streaming = asyncio.ensure_future(stream_job(client, job, console, emit, show or draw_nothing))
    waiting = asyncio.ensure_future(interrupted.wait())
    try:
        await asyncio.wait({streaming, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        waiting.cancel()
    if streaming.done():
        return exit_code(streaming.result()["state"])
    streaming.cancel()
    await asyncio.gather(streaming, return_exceptions=True)
    _print(f"[distrun] interrupted: cancelling job {job['id']}")
    _print(status_line(await client.cancel(job["id"])))
    return EXIT_INTERRUPTED


async def cmd_run(client: Client, args: argparse.Namespace) -> int:
    job = await submit_file(client, args)
    names = replica_names(job)
    _print(f"[distrun] submitted job {job['id']} ({len(names)} replicas: {', '.join(names)})")
    return await follow_until_done(client, job, _console(names))


async def cmd_submit(client: Client, args: argparse.Namespace) -> int:
    _print((await submit_file(client, args))["id"])
    return EXIT_SUCCEEDED


async def _sweep_on_katib(client: Client, template: JobSpec, sweep: "SweepSpec") -> int:
    from distrun.client.server_client import ServerClient
    from distrun.core.sweep import to_dict

    if not isinstance(client, ServerClient):
        raise SpecError(
            "--katib hands the sweep to a cluster's Katib through a server with a Kubeflow "
            "engine: name the server with --url (or DISTRUN_URL)"
        )
    created = await client.submit_experiment(template, to_dict(sweep))
    where = f"{created['namespace']}/{created['experiment']}"
    _print(f"[distrun] Katib Experiment {where} created on engine {created['engine']}")
    _print(f"[distrun] follow it with: kubectl get experiment -n {created['namespace']} -w")
    return EXIT_SUCCEEDED


async def cmd_sweep(client: Client, args: argparse.Namespace) -> int:
    """Runs the file's sweep to its end (Ctrl-C cancels the trials still running), or goes on
    with one whose runner stopped (`--resume SWEEP`); 1 when every trial failed."""
    from distrun.client.sweep_runner import SweepRun, progress_printer, resume
    from distrun.core.header import parse_cell

    if args.resume is not None:
        if args.file is not None or args.katib:
            raise SpecError("--resume SWEEP goes on with a sweep from its trials: give no FILE")
        run = await resume(client, args.resume, on_change=progress_printer(_print))
        left = sum(trial.job_id is None for trial in run.trials)
        _print(f"[distrun] sweep {run.id} resumed: {left} of {len(run.trials)} trials to start")
        return await _drive_sweep(run)
    if args.file is None:
        raise SpecError("distrun sweep needs FILE (a cell with a sweep) or --resume SWEEP")
    text = _read_source(args.file)
    sweep = parse_cell(text).sweep
    if sweep is None:
        raise SpecError(
            f"{args.file} declares no sweep: add a line like %sweep.lr=0.1,0.01 to its header"
        )
    template = build_spec(text, args, await client.limits(), Path(args.file).resolve().parent)
    if args.katib:
        return await _sweep_on_katib(client, template, sweep)
    run = SweepRun(client, template, sweep, on_change=progress_printer(_print))
    _print(f"[distrun] sweep {run.id}: {len(run.trials)} trials, {sweep.parallel} at a time")
    return await _drive_sweep(run)


async def _drive_sweep(run: "SweepRun") -> int:
    from distrun.client.sweep_runner import results_table

    runner = asyncio.ensure_future(run.run())
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, runner.cancel)
    try:
        await runner
    except asyncio.CancelledError:
        _print(f"[distrun] interrupted: sweep {run.id}'s running trials cancelled")
        _print(f"[distrun] go on with it later: distrun sweep --resume {run.id}")
        return EXIT_INTERRUPTED
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    _print(results_table(run))
    failed = all(trial.state == "failed" for trial in run.trials)
    return EXIT_FAILED if failed else EXIT_SUCCEEDED


async def cmd_logs(client: Client, args: argparse.Namespace) -> int:
    job = await client.get_job(args.job_id)
    selected = args.replica or None
    known = replica_names(job)
    unknown = [name for name in args.replica if name not in known]
    if unknown:
        raise SpecError(f"job {job['id']} has no replica {unknown[0]}; it has {', '.join(known)}")
    console = _console(selected or known)
    emit, show = _outputs(console)
    page = await client.logs(args.job_id, selected, args.tail)
    if page.lines:
        emit(console.format_lines(page.lines))
    if not args.follow:
        if show is not None and page.partial:  # a person reads: the bars as they stand now
            emit(console.format_lines(page.partial))
        return EXIT_SUCCEEDED
    draw = show or draw_nothing
    console.unfinished(page.partial)
    draw(console.unfinished_rows())
    async for event in client.follow(args.job_id, since=page.next, replicas=selected):
        render(event, console, emit, draw)
    draw([])
    return EXIT_SUCCEEDED


async def cmd_ls(client: Client, args: argparse.Namespace) -> int:
    jobs = await client.list_jobs()
    _print(json.dumps(jobs, indent=2) if args.json else jobs_table(jobs))
    return EXIT_SUCCEEDED


async def cmd_cancel(client: Client, args: argparse.Namespace) -> int:
    _print(status_line(await client.cancel(args.job_id)))
    return EXIT_SUCCEEDED


async def cmd_rm(client: Client, args: argparse.Namespace) -> int:
    await client.delete(args.job_id)
    _print(f"[distrun] job {args.job_id} deleted")
    return EXIT_SUCCEEDED


async def cmd_status(client: Client, args: argparse.Namespace) -> int:
    job = await client.get_job(args.job_id)
    _print(json.dumps(job, indent=2) if args.json else job_details(job))
    return EXIT_SUCCEEDED


async def cmd_top(client: Client, args: argparse.Namespace) -> int:
    job = await client.get_job(args.job_id)
    report = await client.usage(args.job_id)
    # What the engine cannot measure of the job (a GPU metrics-server does not report).
    notes = "".join(f"\n[distrun] {note}" for note in report.get("notes") or [])
    if not report.get("available"):
        print(f"distrun: {report.get('reason')}{notes}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    if not report.get("samples"):
        _print(f"[distrun] no usage sampled yet for {args.job_id}{notes}")
        return EXIT_SUCCEEDED
    _print(usage_table(job, report) + notes)
    return EXIT_SUCCEEDED


TOKEN_FLAG_WARNING = (
    "distrun: warning: --token shows the token to anyone who can list this machine's processes "
    "and keeps it in your shell history; set DISTRUN_TOKEN or use --token-file instead"
)

COMMANDS = {
    "run": cmd_run,
    "submit": cmd_submit,
    "sweep": cmd_sweep,
    "logs": cmd_logs,
    "ls": cmd_ls,
    "cancel": cmd_cancel,
    "rm": cmd_rm,
    "status": cmd_status,
    "top": cmd_top,
}


async def _dispatch(args: argparse.Namespace) -> int:
    if args.token:
        print(TOKEN_FLAG_WARNING, file=sys.stderr, flush=True)
    client = client_from_env(args.url, args.token, args.state_dir, token_file=args.token_file)
    try:
        return await COMMANDS[args.command](client, args)
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(_dispatch(args))
    except DistrunError as exc:
        print(f"distrun: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `distrun logs JOB | head`
        return EXIT_SUCCEEDED


if __name__ == "__main__":
    sys.exit(main())
