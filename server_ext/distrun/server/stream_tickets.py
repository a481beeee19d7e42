"""Stream tickets: a job's log stream opened before the job exists.

A client picks a random ticket, opens `GET /distrun/streams/{ticket}` (the log websocket) and
sends its submission with the `Distrun-Stream-Ticket` header at the same time: the socket's
handshake and the server's follower then overlap the submission instead of waiting for its
answer, and the stream follows the job from its first line once the submission made it. A
ticket is keyed by its owner: only the same user's submission settles their socket, so a socket
never follows another user's job, whatever ticket it names. A ticket nobody settles within
`TICKET_SECONDS` is refused (the socket's `error` message and close code 4404): long enough for
a socket opened ahead of the next run (after a run, so that no handshake competes with the next
submission on the server), which counts among its user's open streams meanwhile.
"""

import asyncio
import re

from distrun.core.errors import NotFound, SpecError

STREAM_TICKET_HEADER = "Distrun-Stream-Ticket"
TICKET_PATTERN = r"[A-Za-z0-9_-]{16,64}"
TICKET_SECONDS = 600.0  # the extension opens the next run's stream after a run

_TICKET = re.compile(TICKET_PATTERN)


def parse_ticket(value: str | None) -> str | None:
    """The header's ticket, None without one; a malformed one is refused in words."""
    if value is None:
        return None
    if not _TICKET.fullmatch(value):
        raise SpecError(
            f"{STREAM_TICKET_HEADER} must be 16 to 64 letters, digits, '_' or '-' "
            "(a random id the client chose); send none to open the job's stream after the answer",
            field=STREAM_TICKET_HEADER,
        )
    return value


class StreamTickets:
    """The tickets of this server's submissions and sockets, each kept `seconds` at most."""

    def __init__(self, seconds: float = TICKET_SECONDS) -> None:
        self.seconds = seconds
        # (owner, ticket) -> the job's id once submitted, None if its submission failed.
        self._pending: dict[tuple[str, str], asyncio.Future[str | None]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def settle(self, owner: str, ticket: str, job_id: str | None) -> None:
        """`owner`'s submission with `ticket` made `job_id` (None: it made no job)."""
        future = self._future(owner, ticket)
        if not future.done():
            future.set_result(job_id)

    async def job_of(self, owner: str, ticket: str) -> str:
        """The id of the job `owner` submitted with `ticket`, once submitted."""
        key = (owner, ticket)
        future = self._future(owner, ticket)
        try:
            async with asyncio.timeout(self.seconds):
                job_id = await asyncio.shield(future)
        except TimeoutError:
            job_id = None
        finally:
            if self._pending.get(key) is future:
                del self._pending[key]  # a ticket follows one job, once
        if job_id is None:
            raise NotFound(
                f"no job of yours was submitted with stream ticket {ticket} (or its submission "
                f"failed) within {self.seconds:g} s: open the job's own stream, "
                "/distrun/jobs/{id}/logs/stream"
            )
        return job_id

    def _future(self, owner: str, ticket: str) -> "asyncio.Future[str | None]":
        key = (owner, ticket)
        future = self._pending.get(key)
        if future is None:
            loop = asyncio.get_running_loop()
            future = self._pending[key] = loop.create_future()
            loop.call_later(self.seconds, self._forget, key, future)
        return future

    def _forget(self, key: tuple[str, str], future: "asyncio.Future[str | None]") -> None:
        if self._pending.get(key) is future:
            del self._pending[key]
