"""What each job's first replica (the chief, master or rank 0) reported, read on from where the
last request stopped.

The sweep page asks for every trial's metrics every 2 s; reading each trial's whole log on
every poll made the server read every log again and again. This keeps, per job and user, the
series read so far and the cursor after it, so a poll reads only the lines written since. It
caches what the engine holds, it is not state: lost with the process and rebuilt by reading,
one per server process, bounded to the `capacity` jobs read most recently. A job's new lines are
read under its lock, so two requests never feed one series the same lines; the series is fed
line by line either way, so reading on gives what one whole read gives.
"""

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from distrun.core.job import Job
from distrun.core.logs import Cursor
from distrun.core.metric_series import MetricSeries
from distrun.core.sweep_summary import MAX_POINTS
from distrun.server.handlers import LogReader

DEFAULT_CAPACITY = 512


@dataclass
class _Read:
    series: MetricSeries = field(default_factory=lambda: MetricSeries(max_points=MAX_POINTS))
    cursor: Cursor = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class MetricReads:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._reads: OrderedDict[tuple[str, str, str], _Read] = OrderedDict()

    async def series(self, reader: LogReader, job: Job) -> MetricSeries:
        """`job`'s first replica's metrics, read through `reader` (the requester's)."""
        if not job.replicas:
            return MetricSeries(max_points=MAX_POINTS)
        read = self._entry((reader.owner, job.engine, job.id))
        first = job.replicas[0].name
        async with read.lock:
            async for lines, cursor in reader.pages([first], read.cursor):
                for line in lines:
                    read.series.read(line.text)
                read.cursor = cursor
        return read.series

    def _entry(self, key: tuple[str, str, str]) -> _Read:
        read = self._reads.get(key)
        if read is None:
            read = self._reads[key] = _Read()
            if len(self._reads) > self.capacity:
                self._reads.popitem(last=False)
        else:
            self._reads.move_to_end(key)
        return read
