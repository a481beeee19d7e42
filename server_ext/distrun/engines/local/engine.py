"""The local engine: every replica is a process on this machine, no cluster needed.

Each job lives in `<state_dir>/jobs/<job_id>/` (see `supervisor.JobFiles`) and is run by its
own detached supervisor process; this engine writes the job directory, starts the supervisor,
and afterwards answers only from the files, so jobs and logs outlive a server restart. File
work runs in threads: nothing here blocks the event loop for longer than a `stat`, except the
small read of lines just written (page cache) that followers at the live edge share.
"""

import asyncio
import base64
import contextlib
import contextvars
import heapq
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from distrun.core import jobids
from distrun.core.checkpoint_env import RESUMED_FILE
from distrun.core.entrypoint import code_file
from distrun.core.errors import EngineError, LimitExceeded, NotFound, SpecError
from distrun.core.job import Job, JobState, TimelineEvent
from distrun.core.logs import Cursor, JobUpdate, LogEvent, LogLine
from distrun.core.restarts import restart_plan
from distrun.core.scalars import ScalarsReport
from distrun.core.spec import JobSpec, Limits, check_relative_path
from distrun.core.tracebacks import TracebackGroup
from distrun.core.usage import UsageReport, UsageUpdate, memory_limits
from distrun.engines.cursors import selected_replicas, start_seqs
from distrun.engines.local import capabilities, gpu_devices, inotify
from distrun.engines.local.inherited_env import inherited_env
from distrun.engines.local.job_watcher import JobWatcher, wake_gap
from distrun.engines.local.jobdir import (
    JobFiles,
    JobStatus,
    Runtime,
    interpreter_mark,
    read_json,
    stored_spec,
    write_json_atomic,
)
from distrun.engines.local.log_followers import LIVE_EDGE_LINES, Follower, close_after
from distrun.engines.local.logstore import LogReader, partial_path, read_partial
from distrun.engines.local.private_files import make_private_dir, write_private
from distrun.engines.local.processes import kill_job_processes, process_start_time, start_clock
from distrun.engines.local.resume import copy_checkpoints
from distrun.engines.local.scalars import read_scalars
from distrun.engines.local.usage_store import UsageTail
from distrun.engines.local.waiting_interpreters import supported as interpreters_supported
from distrun.engines.local.warm_supervisor import WAIT_FLAG, WarmSupervisor
from distrun.engines.protocol import EngineInfo

NOT_SAMPLED_REASON = (
    "this job's usage was not sampled: it was submitted with usage_interval 0, or before "
    "distrun sampled usage"
)
LOST_REASON = "lost: the supervisor process died (was the machine restarted?)"
# How long a job directory may exist without a recorded supervisor (a submit in progress).
_LAUNCH_WINDOW_SECONDS = 30.0
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[3])
# Runs the supervisor with this copy of distrun importable, whether or not it is installed.
_LAUNCHER = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from distrun.engines.local.supervisor import main; sys.exit(main(sys.argv[2:]))"
)


def _supervisor_process(
    args: list[str], cwd: Path, stdin: Any, output: Any
) -> "subprocess.Popen[bytes]":
    process = subprocess.Popen(
        # -S: no site-packages (it needs none), a faster start.
        [sys.executable, "-S", "-c", _LAUNCHER, _PACKAGE_PARENT, *args],
        cwd=cwd,
        env=inherited_env(os.environ),  # the replicas inherit the supervisor's
        stdin=stdin,
        stdout=output,
        stderr=output,
        start_new_session=True,  # detached: it outlives this server
    )
    # Reap it when it ends, so it never lingers as a zombie of this server.
    threading.Thread(target=process.wait, name=f"reap-{process.pid}", daemon=True).start()
    return process


GPU_INFO_SECONDS = 30.0  # how long the engine list may show GPUs found before


class LocalEngine:
    name = "local"
    # Every job runs as the server's own OS user, its code in one state directory: a server
    # several users share must not offer it unless told they trust each other.
    runs_as_server_user = True

    def __init__(
        self,
        state_dir: Path,
        limits: Limits,
        python: str = sys.executable,
        grace_seconds: float = 5.0,
        nice: int = 10,
        gpu_discovery: str = "auto",
        mps_pipe_directory: str | None = None,
        warm_supervisor: bool = True,
        waiting_interpreters: int = 4,
        usage_interval: float = 1.0,
    ) -> None:
        """`gpu_discovery`: how to find this machine's GPUs (auto: NVML, then nvidia-smi;
        none: treat it as having none); `mps_pipe_directory`: where the CUDA MPS daemon's pipes
        are (else $CUDA_MPS_PIPE_DIRECTORY or /tmp/nvidia-mps); `warm_supervisor`: keep the
        next job's supervisor started and waiting (warm_supervisor.py), from the first
        submission or `prepare()` on; `waiting_interpreters`: at most how many replica
        interpreters it starts ahead of the job (waiting_interpreters.py): as many as the last
        job had replicas, one before the first job, and for a job that restarts as a whole, one
        per replica ahead of each restart with the job's modules imported
        (restart_interpreters.py); 0: none; `usage_interval`: seconds between
        two samples of each replica's CPU, memory and GPUs (usage_sampler.py), which is also
        how soon a replica over its `memory` limit is killed; 0: no sampling, no limit."""
        if gpu_discovery not in gpu_devices.DISCOVERY:
            raise SpecError(
                f"gpu_discovery {gpu_discovery!r} is not valid; configure one of "
                f"{', '.join(gpu_devices.DISCOVERY)}",
                field="gpu_discovery",
            )
        self.gpu_discovery = gpu_discovery
        self._devices_seen: tuple[float, list[gpu_devices.GpuDevice]] = (-GPU_INFO_SECONDS, [])
        self.mps_pipe_directory = mps_pipe_directory
        self.limits = limits
        self.python = python
        self.grace_seconds = grace_seconds
        # Replicas share this machine with the server: run them below it (0: beside it).
        self.nice = nice
        if waiting_interpreters < 0:
            raise SpecError(
                f"waiting_interpreters is {waiting_interpreters}; configure 0 or more",
                field="waiting_interpreters",
            )
        self.waiting_interpreters = waiting_interpreters
        if not 0 <= usage_interval <= 3600:
            raise SpecError(
                f"usage_interval is {usage_interval}; configure 0 (no sampling) to 3600 seconds",
                field="usage_interval",
            )
        self.usage_interval = usage_interval
        # The next job is likely the last one again (a cell run once more): as many replicas.
        self._interpreters_next = min(1, waiting_interpreters)
        self._jobs_dir = Path(state_dir) / "jobs"
        # (name, inode, mtime) of job directories whose status was final when read.
        self._finalized: set[tuple[str, int, int]] = set()
        self._warm = WarmSupervisor(self._waiting_supervisor) if warm_supervisor else None
        self._submit_lock = asyncio.Lock()
        self._watchers: dict[str, JobWatcher] = {}
        # One descriptor for the engine's life (None: poll instead), read once a job is followed.
        self._inotify_instance = (
            inotify.Inotify.create() if capabilities.current().inotify else None
        )
        # wd -> (handler, whether the watch is one-shot, gone after its first event)
        self._inotify_handlers: dict[int, tuple[Callable[[int, int], None], bool]] = {}

    async def info(self) -> EngineInfo:
        unsupported = unsupported_platform_reason()
        return EngineInfo(
            name=self.name,
            description="Runs every replica as a process on the Jupyter server's own machine.",
            available=unsupported is None,
            reason=unsupported,
            options={
                "python": self.python,
                "nice": self.nice,
                # At most how many replica interpreters wait for the next job (0: none here).
                "waiting_interpreters": self.waiting_interpreters
                if self._warm is not None and interpreters_supported()
                else 0,
                "process_paths": capabilities.current().paths() if unsupported is None else {},
                "gpus": await asyncio.to_thread(self._gpu_info),
            },
        )

    def _known_devices(self) -> list[gpu_devices.GpuDevice]:
        """The GPUs found at most GPU_INFO_SECONDS ago: the engine list is asked for often (every
        form the UI draws) and nvidia-smi takes a while; a submission discovers afresh."""
        found_at, devices = self._devices_seen
        if time.monotonic() - found_at > GPU_INFO_SECONDS:
            devices = gpu_devices.discover(self.gpu_discovery)
            self._devices_seen = (time.monotonic(), devices)
        return devices

    def _gpu_info(self) -> dict[str, Any]:
        devices = self._known_devices()
        mps = gpu_devices.mps_running(self.mps_pipe_directory)
        offers = (
            "whole GPUs (%gpu=1) and shares of one (%gpu=0.5, %gpuMemory=10Gi), one job per "
            "device unless shared"
            if devices
            else "no GPU on this machine: add %gpuFallback=cpu to run GPU jobs on the CPU"
        )
        return {
            "mode": "local",
            "offers": offers,
            "fractions": bool(devices),
            "memory": bool(devices),
            "mig_profiles": [],
            "resources": [],
            "devices": [asdict(device) for device in devices],
            "mps": mps,
        }

    async def submit(self, spec: JobSpec, owner: str) -> Job:
        unsupported = unsupported_platform_reason()
        if unsupported is not None:
            raise EngineError(unsupported)
        async with self._submit_lock:  # the unfinished-job count must not race
            unfinished = await asyncio.to_thread(self._unfinished_jobs)
            mine = sum(job.get("owner") == owner for job in unfinished)
            if mine >= self.limits.max_jobs_per_user:
                raise LimitExceeded(
                    f"you have {mine} unfinished jobs, the limit is "
                    f"{self.limits.max_jobs_per_user}; cancel or wait for one first"
                )
            earlier = await asyncio.to_thread(self._resumed_checkpoints, spec, owner)
            grants = await asyncio.to_thread(self._gpu_grants, spec, _held_grants(unfinished))
            files = await asyncio.to_thread(self._create_job_dir, spec, owner, grants)
        if earlier is not None:
            try:
                await asyncio.to_thread(copy_checkpoints, earlier, files.checkpoints)
            except SpecError:
                await asyncio.to_thread(shutil.rmtree, files.dir, True)
                raise
        replicas = len(spec.replica_names())
        self._interpreters_next = min(self.waiting_interpreters, replicas)
        await asyncio.to_thread(self._launch, files)
        return await self.get_job(files.dir.name, owner)

    async def list_jobs(self, owner: str) -> list[Job]:
        return await asyncio.to_thread(self._list_jobs, owner)

    async def get_job(self, job_id: str, owner: str) -> Job:
        return await asyncio.to_thread(self._load_job, job_id, owner)

    async def cancel(self, job_id: str, owner: str) -> Job:
        await asyncio.to_thread(self._cancel, job_id, owner)
        return await self.get_job(job_id, owner)

    async def delete(self, job_id: str, owner: str) -> None:
        await asyncio.to_thread(self._cancel, job_id, owner)
        files = self._files(job_id)
        await asyncio.to_thread(shutil.rmtree, files.dir, ignore_errors=True)

    async def read_logs(
        self,
        job_id: str,
        owner: str,
        *,
        since: Cursor | None = None,
        replicas: set[str] | None = None,
        limit: int = 10_000,
    ) -> list[LogLine]:
        if limit < 1:
            raise SpecError(f"limit must be at least 1, not {limit}", field="limit")
        job = await self.get_job(job_id, owner)
        names = selected_replicas(job.id, [r.name for r in job.replicas], replicas)
        starts = start_seqs(names, since)
        return await asyncio.to_thread(self._read_logs, self._files(job_id), starts, limit)

    async def read_partials(
        self, job_id: str, owner: str, *, replicas: set[str] | None = None
    ) -> list[LogLine]:
        job, status = await asyncio.to_thread(self._snapshot, job_id, owner)
        if status.finalized:
            return []
        log_dir = self._files(job_id).logs
        names = selected_replicas(job.id, [r.name for r in job.replicas], replicas)
        found = [read_partial(str(partial_path(log_dir, name)), name) for name in names]
        return [line for line in found if line is not None]

    async def follow(
        self,
        job_id: str,
        owner: str,
        *,
        since: Cursor | None = None,
        replicas: set[str] | None = None,
        max_batch: int = 5_000,
    ) -> AsyncIterator[LogEvent]:
        if max_batch < 1:
            raise SpecError(f"max_batch must be at least 1, not {max_batch}", field="max_batch")
        # Swapped for the watcher's job (shared by all its followers) as soon as they differ.
        sent = await self.get_job(job_id, owner)
        names = selected_replicas(sent.id, [r.name for r in sent.replicas], replicas)
        log_dir = self._files(job_id).logs  # not all the job's paths: this frame lives long
        readers = [LogReader(log_dir, name) for name in names]
        starts = start_seqs(names, since)
        watcher = self._watch(job_id, sent)
        follower = Follower(watcher, readers, starts, max_batch)
        try:
            yield JobUpdate(sent)
            while True:
                version = watcher.version
                if watcher.job is not sent:
                    sent = watcher.job
                    yield JobUpdate(sent)
                batch, settled = await follower.next_batch()
                if len(batch):
                    yield batch
                partial = follower.partial_update()
                if partial is not None:
                    yield partial
                if len(batch) > LIVE_EDGE_LINES:
                    continue  # catching up: read on at once
                # At the live edge the next read waits for the next wake (at most one per
                # wake gap), so lines that keep coming arrive in fewer, bigger batches.
                if settled and not len(batch):
                    return
                await watcher.wait_for_change(version)
        finally:
            self._unwatch(job_id)
            close_after(follower.reading, readers)

    async def read_scalars(self, job_id: str, owner: str) -> ScalarsReport:
        return await asyncio.to_thread(read_scalars, await self.tensorboard_dir(job_id, owner))

    async def tensorboard_dir(self, job_id: str, owner: str) -> Path:
        await self.get_job(job_id, owner)
        return self._files(job_id).tensorboard

    async def read_usage(self, job_id: str, owner: str, *, since: int = 0) -> UsageReport:
        job, _ = await asyncio.to_thread(self._snapshot, job_id, owner)
        interval = await asyncio.to_thread(self._usage_interval, job_id)
        if not interval:
            return UsageReport(False, NOT_SAMPLED_REASON)
        samples = await asyncio.to_thread(UsageTail(self._files(job_id).usage, since).read)
        return UsageReport(True, None, interval, samples, memory_limits(job.spec))

    async def follow_usage(
        self, job_id: str, owner: str, *, since: int = 0
    ) -> AsyncIterator[UsageUpdate]:
        await self.get_job(job_id, owner)
        interval = await asyncio.to_thread(self._usage_interval, job_id)
        if not interval:
            return
        tail = UsageTail(self._files(job_id).usage, since)
        samples = await asyncio.to_thread(tail.read)  # the kept series: maybe a large read
        while True:
            if samples:
                yield UsageUpdate(samples)
            else:  # a sample is due every interval: none new, the job may be over
                _, status = await asyncio.to_thread(self._snapshot, job_id, owner)
                if status.finalized:
                    last = await asyncio.to_thread(tail.read)  # after the status: the last
                    if last:
                        yield UsageUpdate(last)
                    return
            await asyncio.sleep(interval)
            samples = tail.read_new()

    def _usage_interval(self, job_id: str) -> float:
        """The job's sampling interval in seconds; 0 where it is not sampled."""
        runtime = read_json(self._files(job_id).job).get("runtime", {})
        return float(runtime.get("usage_interval", 0.0))

    async def prepare(self) -> None:
        """Starts the next job's supervisor now, so that even the first job starts warm."""
        if self._warm is None or unsupported_platform_reason() is not None:
            return
        try:
            await asyncio.to_thread(self._jobs_dir.mkdir, parents=True, exist_ok=True)
        except OSError:
            return  # submissions will say why
        await asyncio.to_thread(self._warm.prepare)

    async def close(self) -> None:
        if self._warm is not None:
            await asyncio.to_thread(self._warm.close)
        for watcher in self._watchers.values():
            watcher.stop()
        self._watchers.clear()
        if self._inotify_instance is not None:
            self._inotify_instance.close()
            self._inotify_instance = None
        self._inotify_handlers.clear()

    # --- the job directory ---

    def _resumed_checkpoints(self, spec: JobSpec, owner: str) -> Path | None:
        """The checkpoint directory of the job `spec` resumes from (one of `owner`'s)."""
        if spec.resume_from is None:
            return None
        files = self._files(spec.resume_from)
        try:
            self._read_job_json(files, owner)
        except NotFound:
            raise SpecError(
                f"resume_from: you have no job {spec.resume_from!r} on the local engine to "
                "resume from (distrun list shows your jobs)",
                field="resume_from",
            ) from None
        return files.checkpoints

    def _files(self, job_id: str) -> JobFiles:
        return JobFiles(self._jobs_dir / jobids.check_job_id(job_id))

    def _gpu_grants(self, spec: JobSpec, held: list[gpu_devices.Grant]) -> dict[str, Any] | None:
        """Each replica's GPUs besides those `held` by unfinished jobs, as job.json keeps them;
        None on a machine with no GPU where the job asks for none (its replicas' environment
        stays as it is)."""
        devices = gpu_devices.discover(self.gpu_discovery)
        mps = gpu_devices.mps_running(self.mps_pipe_directory)
        grants = gpu_devices.assign(spec, devices, held, mps=mps)
        if not devices and not grants:
            return None
        return {name: grant.to_json() for name, grant in grants.items()}

    def _unfinished_jobs(self) -> list[dict[str, Any]]:
        """The job.json of every job on this machine that is not over, whoever owns it. A
        job whose status is final never changes again: it is remembered and not read again
        while its directory stays the same one (a submit then reads the few unfinished jobs,
        not a person's whole history)."""
        found = []
        finalized = set()  # of the directories there now: the deleted ones are forgotten
        with contextlib.suppress(FileNotFoundError), os.scandir(self._jobs_dir) as entries:
            for entry in entries:
                try:
                    stat = entry.stat(follow_symlinks=False)
                    key = (entry.name, stat.st_ino, stat.st_mtime_ns)
                    if key in self._finalized:
                        finalized.add(key)
                        continue
                    files = JobFiles(Path(entry.path))
                    job = read_json(files.job)
                    status = self._current_status(files, job)
                except (OSError, ValueError, TypeError, KeyError):
                    continue  # half-written or deleted meanwhile
                if status.finalized:
                    finalized.add(key)
                if not status.state.terminal:
                    found.append(job)
        self._finalized = finalized
        return found

    def _create_job_dir(
        self, spec: JobSpec, owner: str, gpus: dict[str, Any] | None = None
    ) -> JobFiles:
        entrypoint, code = code_file(spec.code)
        if entrypoint in spec.files:
            raise SpecError(f"a shipped file cannot be named {entrypoint}", field="files")
        make_private_dir(self._jobs_dir.parent)
        make_private_dir(self._jobs_dir)
        files = self._new_job_dir(spec.name)
        try:
            files.code.mkdir(mode=0o700)
            files.checkpoints.mkdir(mode=0o700)
            for path, content in spec.files.items():
                target = files.code / check_relative_path(path)
                target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                write_private(target, base64.b64decode(content))
            write_private(files.code / entrypoint, code.encode())
        except OSError as error:
            shutil.rmtree(files.dir, ignore_errors=True)
            raise SpecError(
                f"the shipped files cannot be written: {error}", field="files"
            ) from None
        runtime = Runtime(
            self.python,
            entrypoint,
            self.grace_seconds,
            self.limits.max_log_line_bytes,
            self.nice,
            self.usage_interval,
            restart_ahead=self.waiting_interpreters > 0,
        )
        job = {
            "id": files.dir.name,
            "owner": owner,
            "created_at": time.time(),
            "spec": spec.to_dict(),
            "runtime": asdict(runtime),
            **({"gpus": gpus} if gpus is not None else {}),
        }
        write_json_atomic(files.status, JobStatus.pending(spec).to_json())
        write_json_atomic(files.job, job)  # last: a job.json means a complete directory
        return files

    def _new_job_dir(self, name: str) -> JobFiles:
        for _ in range(20):
            job_dir = self._jobs_dir / jobids.new_job_id(name)
            try:
                job_dir.mkdir(mode=0o700)
            except FileExistsError:
                continue
            return JobFiles(job_dir)
        raise EngineError("could not find a free job id; try again")

    def _launch(self, files: JobFiles) -> None:
        waiting = self._warm.take(files.dir) if self._warm is not None else None
        process = waiting.process if waiting is not None else self._start_supervisor(files)
        clock = start_clock()
        started = process_start_time(process.pid, clock)
        record = {"pid": process.pid, "start_time": started, "clock": clock}
        if waiting is not None:
            record["mark"] = waiting.mark
        write_json_atomic(files.supervisor, record)

    def _start_supervisor(self, files: JobFiles) -> "subprocess.Popen[bytes]":
        try:
            log_fd = os.open(files.supervisor_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with open(log_fd, "ab") as log:
                return _supervisor_process(
                    [str(files.dir)], cwd=files.dir, stdin=subprocess.DEVNULL, output=log
                )
        except OSError as error:
            self._settle(files, JobState.FAILED, f"could not start the supervisor: {error}")
            raise EngineError(f"could not start the job's supervisor: {error}") from None

    def _waiting_supervisor(self, mark: str) -> "subprocess.Popen[bytes]":
        return _supervisor_process(
            [WAIT_FLAG, str(self.nice), self.python, str(self._interpreters_next), mark],
            cwd=self._jobs_dir,
            stdin=subprocess.PIPE,
            output=subprocess.DEVNULL,
        )

    # --- reading state ---

    def _list_jobs(self, owner: str) -> list[Job]:
        if not self._jobs_dir.is_dir():
            return []
        jobs = []
        for job_dir in self._jobs_dir.iterdir():
            with contextlib.suppress(NotFound):
                jobs.append(self._load_job(job_dir.name, owner))
        return sorted(jobs, key=lambda job: job.created_at, reverse=True)

    def _load_job(self, job_id: str, owner: str) -> Job:
        return self._snapshot(job_id, owner)[0]

    def _snapshot(self, job_id: str, owner: str) -> tuple[Job, JobStatus]:
        files = self._files(job_id)
        job = self._read_job_json(files, owner)
        status = self._current_status(files, job)
        return _to_job(job, status, _resumed_events(files)), status

    def _read_job_json(self, files: JobFiles, owner: str) -> dict[str, Any]:
        try:
            job = read_json(files.job)
        except (OSError, ValueError, TypeError):
            job = {}
        if job.get("owner") != owner:  # the same answer as for a job that does not exist
            raise NotFound(f"no job {files.dir.name!r}")
        return job

    def _current_status(self, files: JobFiles, job: dict[str, Any]) -> JobStatus:
        """status.json, settled as lost if it says unfinished but its supervisor is dead."""
        status = _read_status(files, job)
        if status.finalized or self._supervisor_alive(files, job):
            return status
        status = _read_status(files, job)  # it may have finished just before it exited
        if status.finalized:
            return status
        if status.state.terminal:
            return self._settle(files, status.state, status.reason)
        return self._settle(files, JobState.FAILED, LOST_REASON)

    def _supervisor_alive(self, files: JobFiles, job: dict[str, Any]) -> bool:
        try:
            supervisor = read_json(files.supervisor)
        except (OSError, ValueError, TypeError):
            return bool(time.time() - job["created_at"] < _LAUNCH_WINDOW_SECONDS)
        started = supervisor["start_time"]  # None: it had ended before it was recorded
        return started is not None and _started_at(supervisor) == started

    def _settle(self, files: JobFiles, state: JobState, reason: str | None) -> JobStatus:
        """Finishes a job whose supervisor is gone: kills whatever is left of its processes
        (its replicas died with the supervisor, not always their children) and records the
        outcome."""
        job = read_json(files.job)
        status = _read_status(files, job)
        # Found by their DISTRUN_JOB_ID (or the mark of the interpreters the supervisor started
        # ahead), not by recorded group ids, which may have been reused.
        kill_job_processes(job["id"], interpreter_mark(files))
        now = time.time()
        if not status.state.terminal:
            status.state, status.reason, status.finished_at = state, reason, now
        for replica in status.replicas:
            if not replica.state.terminal:
                replica.state = state
                replica.reason = reason
                replica.finished_at = now
        status.finalized = True
        write_json_atomic(files.status, status.to_json())
        return status

    # --- cancelling ---

    def _cancel(self, job_id: str, owner: str) -> None:
        files = self._files(job_id)
        job = self._read_job_json(files, owner)
        if self._current_status(files, job).finalized:
            return
        deadline = time.monotonic() + self.grace_seconds + 10
        self._signal_supervisor(files, signal.SIGTERM)
        while self._supervisor_alive(files, job) and time.monotonic() < deadline:
            time.sleep(0.02)
        if self._supervisor_alive(files, job):  # stuck: its replicas die with it
            self._signal_supervisor(files, signal.SIGKILL)
        status = _read_status(files, job)
        if not status.finalized:
            self._settle(files, JobState.CANCELLED, "cancelled by the user")

    def _signal_supervisor(self, files: JobFiles, signum: int) -> None:
        try:
            supervisor = read_json(files.supervisor)
        except (OSError, ValueError, TypeError):
            return
        if not capabilities.current().pidfd:
            # Checked, then signalled: a pid reused in between would get it (portable.py).
            if _started_at(supervisor) == supervisor["start_time"]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(supervisor["pid"], signum)
            return
        try:
            pidfd = os.pidfd_open(supervisor["pid"])
        except (OSError, TypeError):
            return
        try:
            # Through a pidfd checked against the recorded start time: a reused pid is safe.
            if _started_at(supervisor) == supervisor["start_time"]:
                signal.pidfd_send_signal(pidfd, signum)
        except ProcessLookupError:
            pass
        finally:
            os.close(pidfd)

    # --- logs ---

    def _read_logs(self, files: JobFiles, starts: dict[str, int], limit: int) -> list[LogLine]:
        per_replica = []
        for name, seq in starts.items():
            reader = LogReader(files.logs, name)
            per_replica.append(reader.read(seq, limit))
            reader.close()
        merged = heapq.merge(*per_replica, key=lambda line: line.time)
        return list(itertools.islice(merged, limit))

    def _watch(self, job_id: str, job: Job) -> JobWatcher:
        watcher = self._watchers.get(job_id)
        if watcher is None:
            # The watcher serves every follower of the job, so its tasks and callbacks must not
            # carry the first follower's context: jupyter_server's CallContext in it holds that
            # follower's request handler, which would live as long as the watcher.
            watcher = contextvars.Context().run(JobWatcher, self, job_id, job)
            self._watchers[job_id] = watcher
        watcher.followers += 1
        return watcher

    def _wake_gap(self) -> float:
        return wake_gap(len(self._watchers))

    def _inotify(self) -> inotify.Inotify | None:
        """The engine's inotify instance, read on the running loop (None: poll instead)."""
        if self._inotify_instance is not None:
            self._inotify_instance.listen(self._on_inotify_events)
        return self._inotify_instance

    def _watch_inotify(
        self, path: str, mask: int, handler: Callable[[int, int], None]
    ) -> int | None:
        """A watch whose events go to `handler(wd, mask)`; None if the path cannot be watched."""
        if self._inotify_instance is None:
            return None
        try:
            wd = self._inotify_instance.add_watch(path, mask)
        except OSError:
            return None
        self._inotify_handlers[wd] = (handler, bool(mask & inotify.IN_ONESHOT))
        return wd

    def _unwatch_inotify(self, wd: int) -> None:
        if self._inotify_handlers.pop(wd, None) is not None and self._inotify_instance:
            self._inotify_instance.remove_watch(wd)

    def _on_inotify_events(self, events: inotify.Events) -> None:
        if inotify.OVERFLOW_WD in events:  # events were dropped: tell everyone
            events = dict.fromkeys(self._inotify_handlers, inotify.IN_MODIFY)
        for wd, mask in events.items():
            entry = self._inotify_handlers.get(wd)
            if entry is None:
                continue
            handler, oneshot = entry
            if oneshot or mask & inotify.IN_IGNORED:  # the kernel dropped the watch
                del self._inotify_handlers[wd]
            handler(wd, mask)

    def _unwatch(self, job_id: str) -> None:
        watcher = self._watchers.get(job_id)
        if watcher is None:
            return
        watcher.followers -= 1
        if watcher.followers == 0:
            watcher.stop()
            del self._watchers[job_id]


def unsupported_platform_reason() -> str | None:
    """Why this machine cannot run the local engine, or None. Its supervisor owns replicas
    through Linux's pidfds, /proc and PR_SET_PDEATHSIG where they work, and otherwise through
    what POSIX and psutil give (capabilities.py): any POSIX system but Windows."""
    if not sys.platform.startswith(("win", "cygwin")):
        try:
            capabilities.current()
        except SpecError as error:  # a DISTRUN_LOCAL_PORTABLE that names no capability
            return str(error)
        return None
    return (
        f"the local engine needs a POSIX system (Linux, macOS) and this server runs on "
        f"{sys.platform}: use a Kubernetes engine, or run JupyterLab in WSL or a Linux container"
    )


def _started_at(supervisor: dict[str, Any]) -> int | None:
    """The supervisor's start time now, by the clock it was recorded with."""
    return process_start_time(supervisor["pid"], supervisor.get("clock", "proc"))


def _held_grants(jobs: list[dict[str, Any]]) -> list[gpu_devices.Grant]:
    """The GPUs the jobs (job.json) hold."""
    held = []
    for job in jobs:
        with contextlib.suppress(TypeError, KeyError, ValueError):
            held += [gpu_devices.Grant.from_json(g) for g in (job.get("gpus") or {}).values()]
    return held


def _read_status(files: JobFiles, job: dict[str, Any]) -> JobStatus:
    try:
        return JobStatus.from_json(read_json(files.status))
    except FileNotFoundError:
        return JobStatus.pending(stored_spec(job))


def _resumed_events(files: JobFiles) -> list[TimelineEvent]:
    """What the job's code reported resuming from (`distrun.checkpoint.load`), in order."""
    try:
        text = (files.checkpoints / RESUMED_FILE).read_text()
    except (OSError, UnicodeDecodeError):
        return []
    events = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError):
            entry = json.loads(line)
            step, attempt = int(entry["step"]), int(entry["restart"]) + 1
            text = f"attempt {attempt} resumed from the checkpoint of step {step}"
            events.append(TimelineEvent(float(entry["time"]), "resumed", attempt, text, step=step))
    return events


def _timeline(
    job: dict[str, Any], status: JobStatus, resumed: list[TimelineEvent]
) -> list[TimelineEvent]:
    submitted = TimelineEvent(job["created_at"], "submitted", 1, "submitted")
    return sorted([submitted, *status.timeline, *resumed], key=lambda event: event.time)


def _to_job(job: dict[str, Any], status: JobStatus, resumed: list[TimelineEvent]) -> Job:
    spec = stored_spec(job)
    plan = restart_plan(spec)
    reason = status.reason
    if status.state == JobState.PENDING and reason is None:
        reason = "starting the replicas"
    for replica in status.replicas:
        grant = (job.get("gpus") or {}).get(replica.name)
        replica.gpu = gpu_devices.Grant.from_json(grant).describe() if grant else None
    return Job(
        id=job["id"],
        name=spec.name,
        owner=job["owner"],
        engine=LocalEngine.name,
        framework=spec.framework,
        state=status.state,
        created_at=job["created_at"],
        replicas=status.replicas,
        spec=spec,
        started_at=status.started_at,
        finished_at=status.finished_at,
        reason=reason,
        failed_replica=status.failed_replica,
        last_lines=status.last_lines,
        attempt=status.attempt,
        max_restarts=plan.limit,
        restart_scope=plan.scope,
        timeline=_timeline(job, status, resumed),
        tracebacks=[TracebackGroup.from_json(group) for group in status.tracebacks],
    )
