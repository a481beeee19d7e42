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
Obj = dict[str, Any]


@dataclass(frozen=True)
class Failure:
    text: str  # "exit code 1", "exit code 1: <termination message>", or out of memory
    code: int | None
    at: str  # the attempt's finishedAt, as the API server writes it (RFC 3339, sortable)


@dataclass
class ReplicaRecord:
    pods: dict[str, int] = field(default_factory=dict)  # pod uid -> highest restartCount seen
    earlier: int = 0  # restarts of pods no longer listed
    failure: Failure | None = None

    def restarts(self, pod: Obj | None) -> int:
        """The replica's restarts, with its current pod's own count."""
        uid = _uid(pod) if pod is not None else None
        current = _restart_count(pod) if pod is not None else 0
        others = sum(count for key, count in self.pods.items() if key != uid)
        return self.earlier + others + max(current, self.pods.get(uid or "", 0))


RestartBook = dict[str, ReplicaRecord]  # by replica name


def observe(book: RestartBook, replica: str, pod: Obj) -> bool:
    """Adds what `pod` says of `replica` to `book`; True when the book changed."""
    record = book.setdefault(replica, ReplicaRecord())
    changed = False
    uid, count = _uid(pod), _restart_count(pod)
    if uid and count > record.pods.get(uid, 0):
        record.pods[uid] = count
        changed = True
        while len(record.pods) > PODS_KEPT:
            oldest = next(iter(record.pods))
            record.earlier += record.pods.pop(oldest)
    failure = last_failure(pod)
    if failure is not None and (record.failure is None or failure.at > record.failure.at):
        record.failure = failure
        changed = True
    return changed


def last_failure(pod: Obj) -> Failure | None:
    """The newest attempt of the pod's container that ended other than with exit 0: the one
    that ends now (state), else the one before the current run (lastState)."""
    container = _container(pod)
    for state in (container.get("state"), container.get("lastState")):
        terminated = (state or {}).get("terminated")
        if terminated and (terminated.get("exitCode") != 0 or _oom(terminated)):
            code = terminated.get("exitCode")
            text = attempt_words(pod, terminated)[:MAX_TEXT]
            at = str(terminated.get("finishedAt") or "")
            return Failure(text, code if isinstance(code, int) else None, at)
    return None


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
            "failure": (
                None
                if record.failure is None
                else [record.failure.text, record.failure.code, record.failure.at]
            ),
        }
        for replica, record in book.items()
    }
    return json.dumps(data, separators=(",", ":"))


def merge(into: RestartBook, other: RestartBook) -> bool:
    """Adds `other` to `into` (counts: the highest; failure: the newest); True if it changed."""
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
        if theirs.failure is not None and (
            ours.failure is None or theirs.failure.at > ours.failure.at
        ):
            ours.failure = theirs.failure
            changed = True
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
    failure = entry.get("failure")
    if isinstance(failure, list) and len(failure) == 3:
        text, code, at = failure
        if isinstance(text, str) and isinstance(at, str) and (code is None or _whole(code)):
            record.failure = Failure(text[:MAX_TEXT], code, at)
    return record


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
