"""Checks every engine applies to a log request: which replicas, and from which seq."""

from distrun.core.errors import SpecError
from distrun.core.logs import Cursor


def selected_replicas(job_id: str, names: list[str], replicas: set[str] | None) -> list[str]:
    """`names` in order, narrowed to `replicas` when given; an unknown replica is a SpecError."""
    if replicas is None:
        return names
    unknown = sorted(replicas - set(names))
    if unknown:
        raise SpecError(
            f"job {job_id} has no replica {', '.join(unknown)}; its replicas are {', '.join(names)}",
            field="replicas",
        )
    return [name for name in names if name in replicas]


def start_seqs(names: list[str], since: Cursor | None) -> dict[str, int]:
    """The seq each replica's reading starts from (0 where `since` does not say)."""
    since = since or {}
    starts = {}
    for name in names:
        seq = since.get(name, 0)
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise SpecError(f"the cursor for {name} must be a seq >= 0, not {seq!r}", field="since")
        starts[name] = seq
    return starts
