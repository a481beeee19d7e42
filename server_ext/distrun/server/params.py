"""The query parameters of the log endpoints, parsed and checked: a bad one is a SpecError
that names the parameter and what to write instead."""

import re

from distrun.core.errors import SpecError
from distrun.core.job import Job
from distrun.core.logs import Cursor

REPLICA_RE = re.compile(r"^[a-z][a-z0-9]*-[0-9]{1,6}\Z")
MAX_TAIL = 100_000
MAX_TAIL_BYTES = 16 * 1024 * 1024  # what a tail answer holds at most, whatever its line count
# Longer numbers are refused before int() reads them: it takes quadratic time on thousands of
# digits and raises past 4300 (CPython's int_max_str_digits), which would be a 500.
MAX_DIGITS = 18


def parse_since(value: str | None) -> Cursor:
    """`worker-0:10,master-0:0` -> {"worker-0": 10, "master-0": 0}; empty or absent -> {}."""
    cursor: Cursor = {}
    if not value:
        return cursor
    for item in value.split(","):
        replica, colon, seq = item.partition(":")
        if not (colon and REPLICA_RE.match(replica) and _is_number(seq)):
            raise SpecError(
                f"since item {item[:60]!r} is not valid; write replica:seq pairs separated by "
                "commas, like worker-0:10,master-0:0",
                field="since",
            )
        if replica in cursor:
            raise SpecError(f"since names {replica} twice; name each replica once", field="since")
        cursor[replica] = int(seq)
    return cursor


def parse_replicas(values: list[str]) -> set[str] | None:
    """Repeated `replica=` arguments (each may also be a comma-separated list); none -> all."""
    names = {name for value in values for name in value.split(",") if name}
    for name in names:
        if not REPLICA_RE.match(name):
            raise SpecError(
                f"replica {name[:60]!r} is not valid; write a replica name like worker-0",
                field="replica",
            )
    return names or None


def parse_int(value: str | None, name: str, default: int | None, low: int, high: int) -> int | None:
    if value is None or value == "":
        return default
    if not _is_number(value) or not low <= int(value) <= high:
        raise SpecError(
            f"{name} {value[:30]!r} is not valid; write a whole number from {low} to {high}",
            field=name,
        )
    return int(value)


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS


def parse_flag(value: str | None, name: str) -> bool | None:
    """`1`/`true` or `0`/`false`; None when absent."""
    if value is None or value == "":
        return None
    if value in ("1", "true"):
        return True
    if value in ("0", "false"):
        return False
    raise SpecError(f"{name} {value[:30]!r} is not valid; write 1 or 0", field=name)


def check_replicas(job: Job, wanted: set[str] | None) -> set[str] | None:
    names = [replica.name for replica in job.replicas]
    unknown = sorted((wanted or set()) - set(names))
    if unknown:
        raise SpecError(
            f"job {job.id} has no replica {unknown[0]}; its replicas are {', '.join(names)}",
            field="replica",
        )
    return wanted
