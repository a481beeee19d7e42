"""Each replica's restarts and last failure, kept after the controller deleted its pods.

A container restarted in place (restartPolicy OnFailure) counts its restarts in its pod's
status only; the Training Operator deletes the pods still running when it fails a job past its
`backoffLimit` (cleanPodPolicy Running), and with them the counts and the exit of the last
attempt. So whoever reads or follows a job in distrun records what the pods said, per replica,
in the job ConfigMap's `distrun.io/replica-restarts` annotation: the highest restartCount seen
of each pod (by uid) and the newest failed attempt (its words, exit code and end). Counts only
grow and a failure is replaced only by a newer one, so every server writing agrees, and any
server, restarted or not, shows the same record. What no server saw (a restart that came and
went while nobody read or followed the job) is not recorded.

For the job's timeline (timeline.py) it also keeps, per replica, its newest failed attempts
(each with the job's attempt it ended: Volcano recreates every pod at a restart) and when its
container first started in each of the job's attempts.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from distrun.core.job import JobState, ReplicaStatus
from distrun.core.quantities import quantity_value
from distrun.core.usage import out_of_memory_text

RESTARTS_ANNOTATION = "distrun.io/replica-restarts"
PODS_KEPT = 8  # per replica; older pods' counts are folded into `earlier`
MAX_COUNT = 2**31  # a container's restartCount is an int32
MAX_TEXT = 1_000  # characters of a failure's words
FAILURES_KEPT = 16  # per replica, the newest
STARTS_KEPT = 16  # per replica, of the newest attempts
Obj = dict[str, Any]


@dataclass(frozen=True)
class Failure:
    text: str  # "exit code 1", "exit code 1: <termination message>", or out of memory
    code: int | None
    at: str  # the attempt's finishedAt, as the API server writes it (RFC 3339, sortable)
    attempt: int = 1  # the job's attempt it ended (the pod's, where the controller says it)
    oom: bool = False  # the container was OOMKilled
    run: str = ""  # "<pod uid>/<n>": the pod's container's n-th run (0: its first)

    @property
    def key(self) -> tuple[str, str, int | None]:
        """One container run ends once: its pod and number name it, whoever saw it (its end
        and code where the number was not written)."""
        return (self.run, "", None) if self.run else ("", self.at, self.code)


@dataclass
class ReplicaRecord:
    pods: dict[str, int] = field(default_factory=dict)  # pod uid -> highest restartCount seen
    earlier: int = 0  # restarts of pods no longer listed
    failures: list[Failure] = field(default_factory=list)  # the newest, oldest first
    starts: dict[int, str] = field(default_factory=dict)  # job attempt -> first startedAt seen

    @property
    def failure(self) -> Failure | None:
        """The newest failed attempt."""
        return self.failures[-1] if self.failures else None

    def restarts(self, pod: Obj | None) -> int:
        """The replica's restarts, with its current pod's own count."""
        uid = _uid(pod) if pod is not None else None
        current = _restart_count(pod) if pod is not None else 0
        others = sum(count for key, count in self.pods.items() if key != uid)
        return self.earlier + others + max(current, self.pods.get(uid or "", 0))


RestartBook = dict[str, ReplicaRecord]  # by replica name


def observe(
    book: RestartBook, replica: str, pod: Obj, attempt: int = 1, peak: int | None = None
) -> bool:
    """Adds what `pod`, of the job's `attempt`, says of `replica` to `book`; True when the
    book changed. `peak`: the replica's largest working set read so far, which an OOM kill's
    words name."""
    record = book.setdefault(replica, ReplicaRecord())
    changed = False
    uid, count = _uid(pod), _restart_count(pod)
    if uid and count > record.pods.get(uid, 0):
        record.pods[uid] = count
        changed = True
        while len(record.pods) > PODS_KEPT:
            oldest = next(iter(record.pods))
            record.earlier += record.pods.pop(oldest)
    for failure in pod_failures(pod, attempt, peak):
        changed = add_failure(record, failure) or changed
    started = first_start(pod)
    if started is not None:
        changed = add_start(record, attempt, started) or changed
    return changed


def lasting_part(book: RestartBook) -> dict[str, tuple[Any, ...]]:
    """What of `book` only the ledger can keep once the pods are gone and a read must write:
    restart counts and failures. A start is on its pod while the attempt runs, and whoever
    follows the job records it; a read that wrote every start it saw made each viewer's
    connect a write (hundreds a minute when a hub's viewers connect at once)."""
    lasting = {
        name: (tuple(record.pods.items()), record.earlier, tuple(f.key for f in record.failures))
        for name, record in book.items()
    }
    return {name: part for name, part in lasting.items() if part != ((), 0, ())}


def add_failure(record: ReplicaRecord, failure: Failure) -> bool:
    """Adds `failure` unless it is there already; the newest FAILURES_KEPT stay."""
    if any(known.key == failure.key for known in record.failures):
        return False
    record.failures = sorted([*record.failures, failure], key=lambda f: f.at)[-FAILURES_KEPT:]
    return failure in record.failures


def add_start(record: ReplicaRecord, attempt: int, started: str) -> bool:
    """Keeps the earliest start seen of each attempt, of the newest STARTS_KEPT attempts."""
    known = record.starts.get(attempt)
    if known is not None and known <= started:
        return False
    record.starts[attempt] = started
    for old in sorted(record.starts)[:-STARTS_KEPT]:
        del record.starts[old]
    return attempt in record.starts


def last_failure(pod: Obj) -> Failure | None:
    """The newest attempt of the pod's container that ended other than with exit 0."""
    failures = pod_failures(pod)
    return failures[-1] if failures else None


def pod_failures(pod: Obj, attempt: int = 1, peak: int | None = None) -> list[Failure]:
    """The runs of the pod's container that ended other than with exit 0, oldest first: the
    one before the current run (lastState) and the one that ends now (state); an OOM kill's
    words with the replica's `peak`, where known."""
    container = _container(pod)
    count = _restart_count(pod)
    failures = []
    for state, run in ((container.get("lastState"), count - 1), (container.get("state"), count)):
        terminated = (state or {}).get("terminated")
        if terminated and (terminated.get("exitCode") != 0 or _oom(terminated)):
            code = terminated.get("exitCode")
            text = attempt_words(pod, terminated, peak)[:MAX_TEXT]
            at = str(terminated.get("finishedAt") or "")
            code = code if isinstance(code, int) else None
            key = f"{_uid(pod)}/{run}" if _uid(pod) and run >= 0 else ""
            failures.append(Failure(text, code, at, attempt, _oom(terminated), key))
    return failures


def first_start(pod: Obj) -> str | None:
    """The earliest start the pod's container status tells of (its run before a restart in
    place, else its current or ended run)."""
    container = _container(pod)
    starts = [
        str(inner["startedAt"])
        for state in (container.get("lastState"), container.get("state"))
        for inner in ((state or {}).get("terminated"), (state or {}).get("running"))
        if inner and inner.get("startedAt")
    ]
    return min(starts) if starts else None


def attempt_words(pod: Obj, terminated: Obj, peak: int | None = None) -> str:
    """How a failed attempt of the pod's container ended, as the local engine says it (an
    OOM kill with the replica's `peak` working set, where one is known)."""
    if terminated.get("reason") == "OOMKilled":
        return out_of_memory_text(peak, memory_limit(pod))
    code = terminated.get("exitCode")
    words = f"exit code {code}" if code is not None else "failed"
    message = terminated.get("message") or (pod.get("status") or {}).get("message")
    return f"{words}: {message.strip()}" if message else words


def memory_limit(pod: Obj) -> int | None:
    """The replica container's memory limit in bytes, where its spec sets one."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    limit = ((containers[0].get("resources") or {}).get("limits") or {}).get("memory")
    try:
        return int(quantity_value(str(limit))) if limit is not None else None
    except ValueError:
        return None


def apply(book: RestartBook, replicas: list[ReplicaStatus], pods: dict[str, Obj]) -> None:
    """Each replica's restarts as the book and its pod say them together."""
    for replica in replicas:
        record = book.get(replica.name)
        if record is not None:
            replica.restarts = max(replica.restarts, record.restarts(pods.get(replica.name)))


def blame(book: RestartBook, replicas: list[ReplicaStatus]) -> ReplicaStatus | None:
    """For a failed job whose failed pod is gone: the replica whose recorded failure is the
    newest, marked failed with that failure's words and exit."""
    candidates = [
        (record.failure, replica)
        for replica in replicas
        if replica.state != JobState.SUCCEEDED
        and (record := book.get(replica.name)) is not None
        and record.failure is not None
    ]
    if not candidates:
        return None
    failure, replica = max(candidates, key=lambda pair: pair[0].at)
    replica.state, replica.reason, replica.exit_code = JobState.FAILED, failure.text, failure.code
    return replica


def read_book(raw: str | None) -> RestartBook:
    """The book as written; entries this module did not write (the ConfigMap is the user's to
    edit) are left out."""
    try:
        data = json.loads(raw or "{}")
    except (ValueError, RecursionError):
        return {}
    book: RestartBook = {}
    if not isinstance(data, dict):
        return book
    for replica, entry in data.items():
        if isinstance(entry, dict):
            book[replica] = _record(entry)
    return book


def write_book(book: RestartBook) -> str:
    data = {
        replica: {
            "pods": record.pods,
            "earlier": record.earlier,
            "failures": [[f.text, f.code, f.at, f.attempt, f.oom, f.run] for f in record.failures],
            "starts": {str(attempt): at for attempt, at in record.starts.items()},
        }
        for replica, record in book.items()
    }
    return json.dumps(data, separators=(",", ":"))


def merge(into: RestartBook, other: RestartBook) -> bool:
    """Adds `other` to `into` (counts: the highest; failures: every one; starts: the
    earliest); True if it changed."""
    changed = False
    for replica, theirs in other.items():
        ours = into.setdefault(replica, ReplicaRecord())
        for uid, count in theirs.pods.items():
            if count > ours.pods.get(uid, 0):
                ours.pods[uid] = count
                changed = True
        if theirs.earlier > ours.earlier:
            ours.earlier = theirs.earlier
            changed = True
        for failure in theirs.failures:
            changed = add_failure(ours, failure) or changed
        for attempt, at in theirs.starts.items():
            changed = add_start(ours, attempt, at) or changed
    return changed


def _record(entry: dict[str, Any]) -> ReplicaRecord:
    pods = entry.get("pods")
    record = ReplicaRecord(
        pods={
            uid: count
            for uid, count in (pods.items() if isinstance(pods, dict) else ())
            if isinstance(uid, str) and _whole(count)
        }
    )
    if _whole(entry.get("earlier")):
        record.earlier = entry["earlier"]
    failures = entry.get("failures")
    written = [*(failures if isinstance(failures, list) else []), entry.get("failure")]
    for item in written:  # "failure": one, as written before the timeline
        failure = _failure(item)
        if failure is not None:
            add_failure(record, failure)
    starts = entry.get("starts")
    for attempt, at in starts.items() if isinstance(starts, dict) else ():
        if isinstance(at, str) and attempt.isdigit() and _whole(int(attempt)) and int(attempt):
            add_start(record, int(attempt), at)
    return record


def _failure(item: Any) -> Failure | None:
    if not isinstance(item, list) or len(item) not in (3, 6):
        return None
    text, code, at, *rest = item
    attempt, oom, run = rest or (1, False, "")
    if not (isinstance(text, str) and isinstance(at, str) and (code is None or _whole(code))):
        return None
    if not (_whole(attempt) and attempt >= 1 and isinstance(oom, bool) and isinstance(run, str)):
        return None
    return Failure(text[:MAX_TEXT], code, at, attempt, oom, run[:MAX_TEXT])


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _container(pod: Obj) -> Obj:
    containers = (pod.get("status") or {}).get("containerStatuses") or []
    return containers[0] if containers else {}


def _restart_count(pod: Obj) -> int:
    count = _container(pod).get("restartCount", 0)
    return count if _whole(count) else 0


def _uid(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _oom(terminated: Obj) -> bool:
    return terminated.get("reason") == "OOMKilled"
