"""A Kubernetes job's timeline, in the local engine's shape (core/job.py TimelineEvent):
submitted, each attempt's start, each failure with its replica and exit, each restart, the end.

Built from what reading a job already reads: the job object (its creation, the controller's
restart count and times), the pods, and the restart ledger (restart_ledger.py), which keeps
the failures and starts of pods the controller has since deleted. What no distrun server saw
(an attempt whose pods came and went while nobody read or followed the job) has no event of
its own; a restart the controller counted but nobody saw the cause of says so.
"""

import signal
from dataclasses import dataclass

from distrun.core.job import JobState, TimelineEvent
from distrun.core.usage import failure_text
from distrun.engines.kube.logs import parse_time
from distrun.engines.kube.restart_ledger import Failure, RestartBook

# Same-moment events in the order they happen (the API server's times are whole seconds); a
# failure and the restart after it keep their order, the one after the other.
_ORDER = {"submitted": 0, "started": 1, "resumed": 2, "failed": 3, "restarting": 3, "ended": 5}
Restarts = tuple[dict[int, TimelineEvent], list[TimelineEvent]]  # after failure i; unpaired
_UNSEEN = "its pods were gone before a distrun server read them"


@dataclass(frozen=True)
class Attempts:
    """What the job object and the engine say of the job's attempts."""

    current: int  # 1 for the first run
    limit: int  # restarts allowed (core/restarts.py)
    scope: str | None  # "job", "replica" or None: what a restart restarts
    started_at: float | None = None  # the current attempt's start, where the object says it
    restarted_at: float | None = None  # the latest whole-job restart, where the object says it
    replica_restarts: int = 0  # restarts of single replicas in their pods, all replicas together


def kube_timeline(
    created: float,
    book: RestartBook,
    attempts: Attempts,
    state: JobState,
    finished: float | None,
    reason: str | None,
) -> list[TimelineEvent]:
    failures = _failures(book)
    events = [TimelineEvent(created, "submitted", 1, "submitted"), *_starts(book, attempts)]
    after, unpaired = _restarts(failures, attempts)
    for index, (replica, failure) in enumerate(failures):
        events.append(_failed(replica, failure))
        if index in after:
            events.append(after[index])
    events += unpaired
    if state.terminal and finished is not None:
        text = "the job succeeded" if state == JobState.SUCCEEDED else reason
        events.append(TimelineEvent(finished, "ended", attempts.current, text or state.value))
    return sorted(events, key=lambda e: (e.time, e.attempt, _ORDER.get(e.kind, 9)))


def _failures(book: RestartBook) -> list[tuple[str, Failure]]:
    found = [
        (replica, failure)
        for replica, record in book.items()
        for failure in record.failures
        if parse_time(failure.at) is not None
    ]
    return sorted(found, key=lambda pair: pair[1].at)


def _starts(book: RestartBook, attempts: Attempts) -> list[TimelineEvent]:
    """Each attempt's start: its first replica's, as recorded; the current one's from the
    object where no pod of it was seen."""
    starts: dict[int, float] = {}
    for record in book.values():
        for attempt, at in record.starts.items():
            when = parse_time(at)
            if when is not None and attempt <= attempts.current:
                starts[attempt] = min(when, starts.get(attempt, when))
    if attempts.current not in starts and attempts.started_at is not None:
        starts[attempts.current] = attempts.started_at
    return [
        TimelineEvent(at, "started", attempt, f"attempt {attempt} started")
        for attempt, at in sorted(starts.items())
    ]


def _failed(replica: str, failure: Failure) -> TimelineEvent:
    at = parse_time(failure.at)
    assert at is not None
    return TimelineEvent(
        at,
        "failed",
        failure.attempt,
        failure_text(replica, failure.text),
        replica=replica,
        exit_code=failure.code,
        signal=signal_name(failure.code),
        oom=failure.oom,
    )


def signal_name(code: int | None) -> str | None:
    """The signal a container's exit code 128+N says killed it (the runtimes' convention)."""
    if code is None or not 128 < code < 128 + 65:
        return None
    number = code - 128
    return signal.Signals(number).name if number in signal.valid_signals() else None


def _restarts(failures: list[tuple[str, Failure]], attempts: Attempts) -> Restarts:
    if attempts.scope == "job":
        return _job_restarts(failures, attempts)
    if attempts.scope == "replica":
        return _replica_restarts(failures, attempts), []
    return {}, []


def _job_restarts(failures: list[tuple[str, Failure]], attempts: Attempts) -> Restarts:
    """Each attempt before the current one ended in a restart of the whole job, after its
    first failure; the object's time of the latest restart where that failure was not seen."""
    after: dict[int, TimelineEvent] = {}
    unpaired = []
    for attempt in range(1, attempts.current):
        head = f"restart {attempt}/{attempts.limit} of the job"
        first = next((i for i, (_r, f) in enumerate(failures) if f.attempt == attempt), None)
        if first is not None:
            replica, failure = failures[first]
            text = (
                f"{head}: {replica} failed ({failure.text}); the controller stops every "
                "replica and starts them all again"
            )
            at = parse_time(failure.at)
            assert at is not None
            after[first] = TimelineEvent(at, "restarting", attempt, text, replica=replica)
        elif attempt == attempts.current - 1 and attempts.restarted_at is not None:
            text = f"{head}: why attempt {attempt} ended is not known ({_UNSEEN})"
            unpaired.append(TimelineEvent(attempts.restarted_at, "restarting", attempt, text))
    return after, unpaired


def _replica_restarts(
    failures: list[tuple[str, Failure]], attempts: Attempts
) -> dict[int, TimelineEvent]:
    """The oldest failures, as many as the replicas restarted, each restarted its replica in
    place (a failure past the limit ends the job instead). Numbered where every restart's
    failure was seen."""
    restarted = failures[: attempts.replica_restarts]
    numbered = len(restarted) == attempts.replica_restarts
    after = {}
    for index, (replica, failure) in enumerate(restarted):
        at = parse_time(failure.at)
        assert at is not None
        which = f" (restart {index + 1}/{attempts.limit} of the job)" if numbered else ""
        text = f"restarting {replica}{which} after {failure.text}"
        after[index] = TimelineEvent(at, "restarting", failure.attempt, text, replica=replica)
    return after
