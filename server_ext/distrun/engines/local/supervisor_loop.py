"""The supervisor's event loop: reads the replicas' output into the log store, restarts them
by the restart policy, decides the job's outcome (success policy, failures, deadline, cancel)
and records everything in `status.json`. `supervisor.main` starts the replicas, then `run`.
"""

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import traceback
from collections import deque
from typing import Any

from distrun.core.checkpoint_env import IMPORTS_FILE
from distrun.core.errors import EngineError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.job import JobState, ReplicaStatus, TimelineEvent
from distrun.core.logs import PARTIAL_MAX_CHARS
from distrun.core.restarts import restart_plan
from distrun.core.terminal import last_redraws, visible_line
from distrun.core.tracebacks import TRACEBACK_START, TracebackTracker, group_tracebacks
from distrun.core.usage import failure_text, format_bytes, memory_limits, out_of_memory_text
from distrun.engines.local import capabilities
from distrun.engines.local.exits import ExitWatcher
from distrun.engines.local.jobdir import JobFiles, JobStatus, write_json_atomic
from distrun.engines.local.launch import Launch
from distrun.engines.local.logstore import (
    LineSplitter,
    LogWriter,
    clear_partial,
    decode_line,
    write_partial,
)
from distrun.engines.local.processes import (
    Spawned,
    describe_exit,
    is_retryable_exit,
    kill_job_processes,
    oom_kills,
    spawn_replica,
)
from distrun.engines.local.restart_interpreters import RestartInterpreters, recorded_modules
from distrun.engines.local.usage_sampler import UsageSampler
from distrun.engines.local.usage_store import UsageWriter

LAST_LINES = 20
# How often at most a replica's unfinished line (a progress bar redrawn in place) is recorded
# for readers: the newest state at the end of each interval is what they see.
PARTIAL_INTERVAL = 0.25
_READ_SIZE = 64 * 1024
# After the job succeeds, how long the other replicas may take to end on their own (PyTorch
# workers end just after the master) before they are stopped; at most the grace period.
SUCCESS_DRAIN_SECONDS = 2.0
# Roles that serve until stopped: never waited for.
_SERVING_ROLES = frozenset({"ps"})
_TRACEBACK_MARK = TRACEBACK_START.encode()
# How often the supervisor of a job that restarts looks for the modules its code recorded, to
# start the next attempt's interpreters with them imported (restart_interpreters.py).
_IMPORTS_POLL_SECONDS = 0.25
_FILE_CLOCK_SLACK = 0.05
# How long an elastic job's failed replica waits before it starts again (a back-off, as the
# kubelet's): the others re-form the group without it and train meanwhile, rather than wait for
# a replica that may fail again at once; it joins their next round when it is back. Long enough
# for the smaller group's training processes to start (importing torch: some 10 s here).
ELASTIC_REJOIN_SECONDS = 30.0


class JobDirectoryGone(EngineError):
    """The job's directory was removed while its supervisor ran: nothing of it can be recorded
    any more, so the supervisor stops its replicas and ends."""


def run(launch: Launch) -> int:
    """Runs the job whose replicas `launch` started until it is over; 0 when all went well."""
    supervisor = Supervisor(launch)
    try:
        asyncio.run(supervisor.run())
    except JobDirectoryGone as gone:
        print(f"distrun supervisor: {gone}", file=sys.stderr, flush=True)
        _record_crash(supervisor, gone)
        return 1
    except BaseException as error:
        traceback.print_exc()
        _record_crash(supervisor, error)
        raise
    return 0


class _Replica:
    def __init__(self, status: ReplicaStatus, env: dict[str, str], files: JobFiles, max_line: int):
        self.status = status
        self.env = env
        self.log_dir = files.logs
        self.writer = LogWriter(files.logs, status.name)
        self.recent: deque[str] = deque(maxlen=LAST_LINES)
        self.splitter = LineSplitter(max_line)
        self.process: subprocess.Popen[bytes] | None = None
        self.pidfd: int | None = None
        self.pipe: int | None = None
        self.exited = asyncio.Event()
        self.startup_timer: asyncio.TimerHandle | None = None
        self.hung_reason: str | None = None  # set when it was killed as hung at start-up
        self.stopped = False  # signalled to stop once the job's outcome was decided
        self.stopped_for_restart = False  # killed by the supervisor to restart the whole job
        self.partial_shown = ""  # the unfinished line as last recorded for readers
        self.partial_timer: asyncio.TimerHandle | None = None
        self.partial_written_at = 0.0  # loop time
        self.peak_rss: int | None = None  # the largest sampled this attempt
        self.memory_killed = False  # killed by the supervisor for going over its memory limit
        self.traceback = TracebackTracker()  # its last traceback this attempt

    @property
    def running(self) -> bool:
        return self.process is not None and not self.exited.is_set()

    def log(self, raw_lines: list[bytes]) -> None:
        self.writer.append_captured(time.time(), raw_lines)
        self.recent.extend(decode_line(raw) for raw in raw_lines[-LAST_LINES:])
        # Lines are decoded for it only in or at the start of a traceback (one search in C).
        if self.traceback.capturing or _TRACEBACK_MARK in b"\n".join(raw_lines):
            self.traceback.feed([decode_line(raw) for raw in raw_lines])

    def note(self, text: str) -> None:
        self.writer.append([(time.time(), text)])
        self.recent.append(text)

    def record_partial(self) -> None:
        """Records the unfinished line as a terminal shows it, if it changed."""
        self.partial_timer = None
        self.partial_written_at = asyncio.get_running_loop().time()
        unfinished = last_redraws(self.splitter.unfinished(), 4 * PARTIAL_MAX_CHARS)
        shown = visible_line(unfinished)[:PARTIAL_MAX_CHARS]
        if shown == self.partial_shown:
            return
        self.partial_shown = shown
        if shown:
            write_partial(self.log_dir, self.status.name, self.writer.next_seq, time.time(), shown)
        else:
            clear_partial(self.log_dir, self.status.name)

    def partial_changed(self) -> None:
        """At most one record per PARTIAL_INTERVAL: at once after a quiet interval, else at its
        end, with the newest state."""
        if self.partial_timer is not None:
            return
        loop = asyncio.get_running_loop()
        due = self.partial_written_at + PARTIAL_INTERVAL
        if loop.time() >= due:
            self.record_partial()
        else:
            self.partial_timer = loop.call_at(due, self.record_partial)

    def forget_partial(self) -> None:
        """No unfinished line any more (the output ended)."""
        if self.partial_timer is not None:
            self.partial_timer.cancel()
            self.partial_timer = None
        self.partial_shown = ""
        clear_partial(self.log_dir, self.status.name)


class Supervisor:
    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.files = launch.files
        self.job_id = launch.job_id
        self.spec = launch.spec
        self.runtime = launch.runtime
        self.status = JobStatus.pending(self.spec)
        self.replicas: dict[str, _Replica] = {}
        self.restarts = 0
        self.plan = restart_plan(self.spec)
        self._oom_kills = oom_kills()  # the cgroup's count when the attempt started
        self._attempt_started = time.time()
        self._restarting: asyncio.Task[None] | None = None  # the whole job starting again
        self._outcome: asyncio.Future[None] | None = None
        self._stop_state = JobState.CANCELLED
        self._stop_reason = ""
        self._exits = ExitWatcher(self._on_exit)  # used where pidfds are not
        self._memory_limits = memory_limits(self.spec)
        self._sampling: asyncio.Task[None] | None = None
        self._ahead: RestartInterpreters | None = None  # for the next restart
        self._preparing: asyncio.Task[None] | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._outcome = loop.create_future()
        loop.set_exception_handler(self._on_callback_error)
        loop.add_signal_handler(signal.SIGTERM, self._on_cancel_signal)
        for status in self.status.replicas:
            self.replicas[status.name] = _Replica(
                status, self.launch.envs[status.name], self.files, self.runtime.max_log_line_bytes
            )
        self.status.state = JobState.RUNNING
        self.status.started_at = self.launch.started_at or time.time()
        self._attempt_started = self.status.started_at
        self._event(self.status.started_at, "started", "attempt 1 started")
        self._start_sampling()
        await self._attach_all()
        self.launch.close_interpreters()
        if self.plan.scope == "job" and self.plan.limit > 0 and self.runtime.restart_ahead:
            self._preparing = loop.create_task(self._prepare_restarts())
        if self.spec.active_deadline_seconds is not None:
            loop.call_later(self.spec.active_deadline_seconds, self._on_deadline)
        self._write_status()
        await self._outcome
        self._close_ahead()
        await self._stop_all()
        if self._sampling is not None:
            self._sampling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampling
        kill_job_processes(self.job_id, self.launch.mark)
        if self.status.state == JobState.FAILED:
            self._record_tracebacks()
        self.status.finalized = True
        self._write_status()
        for replica in self.replicas.values():
            replica.writer.close()

    async def _attach_all(self) -> None:
        """Attaches the replicas the launch started and starts those it left to the loop, one
        at a time, letting the loop read the output of those already running in between."""
        launch = self.launch
        for name, replica in self.replicas.items():
            if name not in launch.spawned and launch.failed is None:
                if self._outcome is not None and self._outcome.done():  # cancelled meanwhile
                    return
                await asyncio.sleep(0)
                launch.spawn(name)
            spawned = launch.spawned.get(name)
            if spawned is not None:
                self._attach(replica, spawned)
            elif launch.failed is not None and launch.failed[0] == name:
                self._not_started(replica, launch.failed[1])

    def _start(self, replica: _Replica) -> None:
        argv = self.launch.argv
        spawned = self._hand_over_ahead(replica, argv)
        try:
            spawned = spawned or spawn_replica(argv, self.files.code, replica.env)
        except OSError as error:
            self._not_started(replica, error)
            return
        self._attach(replica, spawned)

    def _hand_over_ahead(self, replica: _Replica, argv: list[str]) -> Spawned | None:
        """Replica's process from the interpreters started ahead of this restart, if one
        fits."""
        ahead, name = self._ahead, replica.status.name
        if ahead is None or ahead.restart != self.restarts:
            return None
        interpreter = ahead.take(name, argv, replica.env, self.launch.address_names(name))
        spawned = interpreter.hand_over(argv, self.files.code, replica.env) if interpreter else None
        if spawned is not None:
            replica.note(
                f"[distrun] {name} starts in an interpreter that imported the job's "
                f"{ahead.modules} modules ahead"
            )
        return spawned

    async def _prepare_restarts(self) -> None:
        """Keeps interpreters that imported what the job imports ready for its next restart,
        once its code recorded its imports (restart_interpreters.py)."""
        record = self.files.checkpoints / IMPORTS_FILE
        while self._outcome is not None and not self._outcome.done():
            if self._ahead is None and self._restarting is None and self.restarts < self.plan.limit:
                # Recorded by this attempt (the kernel's file clock may run a tick behind).
                since = self._attempt_started - _FILE_CLOCK_SLACK
                modules = recorded_modules(record, since)
                if modules is not None:
                    restart = self.restarts + 1
                    self._ahead = RestartInterpreters.start(
                        restart,
                        self.launch.argv,
                        self.files.code,
                        self.launch.ahead_envs(restart),
                        modules,
                    )
                    if self._ahead is None:
                        return  # not here
            await asyncio.sleep(_IMPORTS_POLL_SECONDS)

    def _close_ahead(self) -> None:
        if self._preparing is not None:
            self._preparing.cancel()
        if self._ahead is not None:
            self._ahead.close()
            self._ahead = None

    def _not_started(self, replica: _Replica, error: OSError) -> None:
        replica.note(f"[distrun] could not start {replica.status.name}: {error}")
        replica.status.state = JobState.FAILED
        replica.status.reason = f"could not start: {error}"
        self._fail(replica, f"{replica.status.name} could not start: {error}")

    def _attach(self, replica: _Replica, spawned: Spawned) -> None:
        """Reads the started replica's output and notices its exit on the event loop."""
        loop = asyncio.get_running_loop()
        replica.process = spawned.process
        os.set_blocking(spawned.pipe, False)
        replica.pipe = spawned.pipe
        replica.exited = asyncio.Event()
        loop.add_reader(spawned.pipe, self._on_output, replica)
        if capabilities.current().pidfd:
            replica.pidfd = os.pidfd_open(spawned.process.pid)
            loop.add_reader(replica.pidfd, self._on_exit, replica)
        else:
            self._exits.watch(replica)
        replica.hung_reason = None
        replica.peak_rss, replica.memory_killed = None, False
        replica.traceback = TracebackTracker()
        if self.spec.startup_timeout_seconds is not None:
            replica.startup_timer = loop.call_later(
                self.spec.startup_timeout_seconds, self._on_startup_timeout, replica
            )
        replica.status.state = JobState.RUNNING
        replica.status.started_at = time.time()
        replica.status.finished_at = None
        replica.status.exit_code = None
        replica.status.reason = None
        self.status.pids[replica.status.name] = spawned.process.pid

    def _on_output(self, replica: _Replica) -> None:
        assert replica.pipe is not None
        try:
            data = os.read(replica.pipe, _READ_SIZE)
        except BlockingIOError:
            return
        if data:
            self._cancel_startup_timer(replica)
            replica.log(replica.splitter.feed(data))
            replica.partial_changed()
        else:
            self._close_pipe(replica)

    def _on_startup_timeout(self, replica: _Replica) -> None:
        """The replica has written nothing since it started: kill it as hung; its exit then
        goes through the restart policy like any other failure."""
        replica.startup_timer = None
        if not replica.running or (self._outcome is not None and self._outcome.done()):
            return
        seconds = self.spec.startup_timeout_seconds
        replica.hung_reason = (
            f"hung at start-up: no output within {seconds} s (startup_timeout_seconds)"
        )
        replica.note(
            f"[distrun] {replica.status.name} wrote nothing within {seconds} s of starting: "
            "killing it as hung at start-up"
        )
        _signal_group(replica, signal.SIGKILL)

    def _cancel_startup_timer(self, replica: _Replica) -> None:
        if replica.startup_timer is not None:
            replica.startup_timer.cancel()
            replica.startup_timer = None

    def _close_pipe(self, replica: _Replica) -> None:
        if replica.pipe is None:
            return
        asyncio.get_running_loop().remove_reader(replica.pipe)
        os.close(replica.pipe)
        replica.pipe = None
        replica.log(replica.splitter.flush())
        replica.forget_partial()

    def _drain(self, replica: _Replica) -> None:
        """Everything the exited process wrote is already in its pipe: read it to the end."""
        while replica.pipe is not None:
            try:
                data = os.read(replica.pipe, _READ_SIZE)
            except BlockingIOError:  # a surviving grandchild still holds the pipe open
                data = b""
            if not data:
                self._close_pipe(replica)
                return
            replica.log(replica.splitter.feed(data))

    def _on_exit(self, replica: _Replica) -> None:
        exited = replica.exited  # a restart gives the replica a new one
        try:
            self._settle_exit(replica)
        finally:  # whatever the bookkeeping raised, whoever waits for its end goes on
            exited.set()
        self._write_status()

    def _settle_exit(self, replica: _Replica) -> None:
        """The ended replica's state, and what its end means for the job."""
        assert replica.process is not None
        if replica.pidfd is not None:
            asyncio.get_running_loop().remove_reader(replica.pidfd)
            os.close(replica.pidfd)
            replica.pidfd = None
        self._cancel_startup_timer(replica)
        pid = replica.process.pid
        # Still a zombie, so its pid cannot be reused yet: clear out anything it left behind
        # in its process group, as a container's end would.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        code = replica.process.wait()
        self._drain(replica)
        status = replica.status
        status.exit_code = code
        oom = code == -signal.SIGKILL and (replica.memory_killed or self._oom_killed())
        cause = replica.hung_reason if code != 0 and replica.hung_reason else describe_exit(code)
        if oom:
            limit = self._memory_limits.get(status.name)
            cause = out_of_memory_text(replica.peak_rss, limit)
        status.finished_at = time.time()
        if replica.stopped_for_restart:
            replica.stopped_for_restart = False
            status.state, status.reason = JobState.PENDING, "stopped: the whole job restarts"
        elif self._outcome is not None and self._outcome.done():
            if replica.stopped or self.status.state != JobState.SUCCEEDED:
                status.state, status.reason = self._stop_state, self._stop_reason
            else:  # ended on its own after the job succeeded: as its exit says
                status.state = JobState.SUCCEEDED if code == 0 else JobState.FAILED
                status.reason = None if code == 0 else cause
        elif code == 0:
            status.state = JobState.SUCCEEDED
            self._check_success()
        elif self._may_restart(code):
            self._record_failure(replica, code, cause, oom)
            if self.plan.scope == "job":
                self._restart_job(replica, cause)
            else:
                self._restart(replica, cause)
        else:
            self._record_failure(replica, code, cause, oom)
            status.state = JobState.FAILED
            status.reason = cause
            self._fail(replica, failure_text(status.name, cause))

    def _may_restart(self, code: int) -> bool:
        plan = self.plan
        if plan.scope is None or (plan.policy == "ExitCode" and not is_retryable_exit(code)):
            return False
        if self._restarting is not None:  # the whole job is starting again already
            return True
        # The count is the whole job's, as the operator's RunPolicy backoffLimit is.
        return self.restarts < plan.limit

    def _restart(self, replica: _Replica, cause: str) -> None:
        self.restarts += 1
        replica.status.restarts += 1
        text = (
            f"restarting {replica.status.name} (restart {self.restarts}/{self.plan.limit} of "
            f"the job) after {cause}"
        )
        if self.spec.elastic is not None:
            text += f", in {ELASTIC_REJOIN_SECONDS:g} s: the others go on without it meanwhile"
        replica.note(f"[distrun] {text}")
        self._event(time.time(), "restarting", text, replica=replica.status.name)
        if self.spec.elastic is None:
            self._start(replica)
            return
        replica.status.state, replica.status.reason = JobState.PENDING, "rejoins the job soon"
        loop = asyncio.get_running_loop()
        loop.call_later(ELASTIC_REJOIN_SECONDS, self._rejoin, replica)

    def _rejoin(self, replica: _Replica) -> None:
        """Starts an elastic job's failed replica again (its agent joins the next round)."""
        if self._outcome is not None and not self._outcome.done():
            self._start(replica)
            self._write_status()

    def _restart_job(self, failed: _Replica, cause: str) -> None:
        """Stops every replica at once (the failed one's peers would otherwise wait in a
        collective until its timeout) and starts the whole job again once they are gone."""
        failed.status.state, failed.status.reason = JobState.FAILED, cause
        if self._restarting is not None:
            return  # a second failure of the attempt being stopped
        self.restarts += 1
        text = (
            f"restart {self.restarts}/{self.plan.limit} of the job: {failed.status.name} "
            f"failed ({cause}); stopping every replica and starting them all again"
        )
        failed.note(f"[distrun] {text}")
        self._event(time.time(), "restarting", text, replica=failed.status.name)
        for replica in self.replicas.values():
            if replica.running and replica is not failed:
                replica.stopped_for_restart = True
                replica.note(f"[distrun] stopped: {failed.status.name} failed, the job restarts")
                _signal_group(replica, signal.SIGKILL)
        self._restarting = asyncio.get_running_loop().create_task(self._start_again())

    async def _start_again(self) -> None:
        try:
            await self._stop_and_start_all()
        except (OSError, EngineError) as error:  # the job ends, not waits for replicas forever
            traceback.print_exc()
            reason = f"could not restart the job: {error!r}"
            self._finish(JobState.FAILED, reason, JobState.CANCELLED, "stopped: restart failed")

    async def _stop_and_start_all(self) -> None:
        try:
            stopping = [r.exited.wait() for r in self.replicas.values() if r.running]
            await asyncio.gather(*stopping)
            if self._outcome is None or self._outcome.done():  # cancelled meanwhile
                return
            # Anything an earlier attempt left behind outside its process groups goes too.
            ahead = self._ahead
            keep = ahead.pids() if ahead is not None else frozenset()
            kill_job_processes(self.job_id, self.launch.mark, keep)
            if ahead is not None and ahead.restart == self.restarts:
                await ahead.ready()
                if self._outcome.done():
                    return
            envs = self.launch.attempt_envs(self.restarts)
            self.status.attempt = self.restarts + 1
            self._oom_kills = oom_kills()
            self._attempt_started = time.time()
            self._event(time.time(), "started", f"attempt {self.status.attempt} started")
            for name, replica in self.replicas.items():
                replica.env = envs[name]
                replica.status.restarts += 1
                self._start(replica)
                if self._outcome.done():  # one could not start
                    break
        finally:
            if self._ahead is not None:
                self._ahead.close()  # those not taken; the next restart gets new ones
                self._ahead = None
            self._restarting = None
        self._write_status()

    def _record_failure(self, replica: _Replica, code: int, cause: str, oom: bool) -> None:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else None
        self._event(
            time.time(),
            "failed",
            failure_text(replica.status.name, cause),
            replica=replica.status.name,
            exit_code=code,
            signal_name=name,
            oom=oom,
        )

    def _oom_killed(self) -> bool:
        now = oom_kills()
        return now is not None and self._oom_kills is not None and now > self._oom_kills

    def _event(
        self,
        at: float,
        kind: str,
        text: str,
        replica: str | None = None,
        exit_code: int | None = None,
        signal_name: str | None = None,
        oom: bool = False,
    ) -> None:
        attempt = self.status.attempt
        event = TimelineEvent(at, kind, attempt, text, replica, exit_code, signal_name, oom)
        self.status.timeline.append(event)

    def _record_tracebacks(self) -> None:
        """Each replica's last traceback, the same one on several replicas told once."""
        found = {
            name: replica.traceback.last
            for name, replica in self.replicas.items()
            if replica.traceback.last is not None
        }
        self.status.tracebacks = [group.to_json() for group in group_tracebacks(found)]

    def _start_sampling(self) -> None:
        """Samples the replicas' usage every `usage_interval` seconds while the job runs."""
        interval = self.runtime.usage_interval
        if interval <= 0:
            return
        sampler = UsageSampler(self.launch.gpus)
        writer = UsageWriter(self.files.usage)
        self._sampling = asyncio.get_running_loop().create_task(
            self._sample_every(interval, sampler, writer)
        )

    async def _sample_every(
        self, interval: float, sampler: UsageSampler, writer: UsageWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                due = loop.time() + interval
                self._sample(sampler, writer)
                await asyncio.sleep(max(0.0, due - loop.time()))
        except OSError:  # the disk is full, say: the job runs on without its usage
            traceback.print_exc()
        finally:
            sampler.close()
            writer.close()

    def _sample(self, sampler: UsageSampler, writer: UsageWriter) -> None:
        roots = {
            name: r.process.pid
            for name, r in self.replicas.items()
            if r.running and r.process is not None
        }
        if not roots:
            return
        usage = sampler.sample(roots)
        writer.append(time.time(), usage)
        for name, used in usage.items():
            replica = self.replicas[name]
            replica.peak_rss = max(replica.peak_rss or 0, used.rss_bytes)
            limit = self._memory_limits.get(name)
            if limit is not None and used.rss_bytes > limit:
                self._kill_for_memory(replica, used.rss_bytes, limit)

    def _kill_for_memory(self, replica: _Replica, rss: int, limit: int) -> None:
        """The replica's processes hold more memory than its role's `memory`: SIGKILL, as the
        kernel does to a container over its memory limit."""
        if replica.memory_killed or not replica.running:
            return
        if self._outcome is not None and self._outcome.done():
            return
        replica.memory_killed = True
        replica.note(
            f"[distrun] {replica.status.name} holds {format_bytes(rss)}, over its memory limit "
            f"of {format_bytes(limit)}: killing it"
        )
        _signal_group(replica, signal.SIGKILL)

    def _check_success(self) -> None:
        completion = [
            r for r in FRAMEWORKS[self.spec.framework].completion_roles if r in self.spec.roles
        ]
        roles = completion or (["worker"] if "worker" in self.spec.roles else list(self.spec.roles))
        deciding = [r for r in self.replicas.values() if r.status.role in roles]
        if all(r.status.state == JobState.SUCCEEDED for r in deciding):
            self._finish(JobState.SUCCEEDED, None, JobState.SUCCEEDED, "stopped: the job succeeded")

    def _fail(self, replica: _Replica, reason: str) -> None:
        self.status.failed_replica = replica.status.name
        self.status.last_lines = list(replica.recent)
        stopped = f"stopped because {replica.status.name} failed"
        self._finish(JobState.FAILED, reason, JobState.CANCELLED, stopped)

    def _on_deadline(self) -> None:
        reason = (
            f"DeadlineExceeded: the job ran longer than active_deadline_seconds="
            f"{self.spec.active_deadline_seconds}"
        )
        self._finish(JobState.FAILED, reason, JobState.CANCELLED, "stopped: deadline exceeded")

    def _on_callback_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """An exception in one of the loop's callbacks (a replica's output or exit, a timer)
        leaves the job in a state nobody decides any more: the supervisor ends, as when its
        own code fails (its replicas are stopped, the job recorded as failed where it can be),
        instead of waiting for an outcome that will not come."""
        error = context.get("exception")
        if isinstance(error, OSError) and not self.files.dir.is_dir():
            error = self._directory_gone()  # why, in words: its traceback says no more
        if not isinstance(error, JobDirectoryGone):
            loop.default_exception_handler(context)  # the traceback, in supervisor.log
        if not isinstance(error, BaseException):
            error = EngineError(str(context.get("message") or "an event loop callback failed"))
        if self._outcome is not None and not self._outcome.done():
            self._outcome.set_exception(error)

    def _on_cancel_signal(self) -> None:
        self._finish(JobState.CANCELLED, "cancelled by the user", JobState.CANCELLED, "cancelled")

    def _finish(
        self, state: JobState, reason: str | None, stop_state: JobState, stop_reason: str
    ) -> None:
        """Decides the job's outcome (the first decision wins) and records it at once; the
        remaining replicas are stopped afterwards."""
        if self._outcome is None or self._outcome.done():
            return
        self.status.state = state
        self.status.reason = reason
        self.status.finished_at = time.time()
        self._event(self.status.finished_at, "ended", reason or f"the job {state.value}")
        self._stop_state, self._stop_reason = stop_state, stop_reason
        self._outcome.set_result(None)
        self._write_status()

    async def _stop_all(self) -> None:
        if self.status.state == JobState.SUCCEEDED:
            await self._let_finish()
        running = [r for r in self.replicas.values() if r.running]
        for replica in running:
            replica.stopped = True
            _signal_group(replica, signal.SIGTERM)
        waits = [asyncio.create_task(r.exited.wait()) for r in running]
        if not waits:
            return
        _, pending = await asyncio.wait(waits, timeout=self.runtime.grace_seconds)
        if pending:
            for replica in running:
                if replica.running:
                    replica.note(
                        f"[distrun] {replica.status.name} ignored SIGTERM for "
                        f"{self.runtime.grace_seconds:g} s: sending SIGKILL"
                    )
                    _signal_group(replica, signal.SIGKILL)
            await asyncio.wait(pending)

    async def _let_finish(self) -> None:
        """Gives the replicas still running after the job succeeded a moment to end on their
        own, so the last lines they print (a worker's final metrics) are not cut off."""
        finishing = [
            asyncio.create_task(r.exited.wait())
            for r in self.replicas.values()
            if r.running and r.status.role not in _SERVING_ROLES
        ]
        if finishing:
            timeout = min(SUCCESS_DRAIN_SECONDS, self.runtime.grace_seconds)
            _, pending = await asyncio.wait(finishing, timeout=timeout)
            for task in pending:
                task.cancel()

    def _write_status(self) -> None:
        try:
            write_json_atomic(self.files.status, self.status.to_json())
        except FileNotFoundError:
            if self.files.dir.is_dir():
                raise
            raise self._directory_gone() from None

    def _directory_gone(self) -> "JobDirectoryGone":
        return JobDirectoryGone(
            f"job {self.job_id}: its directory {self.files.dir} was removed while the job ran; "
            "stopping its replicas (nothing of the job can be recorded any more)"
        )


def _signal_group(replica: _Replica, signum: int) -> None:
    assert replica.process is not None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(replica.process.pid, signum)


def _record_crash(supervisor: Supervisor, error: BaseException) -> None:
    """The supervisor itself failed: stop its replicas and say so in status.json."""
    supervisor.launch.close_interpreters()
    supervisor._close_ahead()
    for replica in supervisor.replicas.values():
        if replica.process is not None and replica.process.poll() is None:
            _signal_group(replica, signal.SIGKILL)
    with contextlib.suppress(OSError):
        kill_job_processes(supervisor.job_id, supervisor.launch.mark)
    status = supervisor.status
    if not status.state.terminal or not status.finalized:
        status.state = JobState.FAILED if not status.state.terminal else status.state
        status.reason = status.reason or f"the supervisor failed: {error!r}"
        status.finished_at = status.finished_at or time.time()
        status.finalized = True
        with contextlib.suppress(OSError, JobDirectoryGone):
            supervisor._write_status()
