"""Lines of a streamed Kubernetes response (a log followed, a watch), however the chunks fall."""

import random
from collections.abc import AsyncIterator

from distrun.engines.kube.client import StreamedLines, iter_lines


class ChunkedResponse:
    """What iter_lines reads: `response.content.iter_any()` giving the body in chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.content = self
        self._chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def chunked(body: bytes, rng: random.Random) -> list[bytes]:
    chunks, start = [], 0
    while start < len(body):
        size = rng.randint(1, 40)
        chunks.append(body[start : start + size])
        start += size
    return chunks


async def lines_of(chunks: list[bytes], max_line: int | None = None) -> list[bytes]:
    return [line async for line in iter_lines(ChunkedResponse(chunks), max_line)]


async def test_lines_split_anywhere_come_out_whole_empty_ones_and_an_unended_last_one_too() -> None:
    body = b"first\n\nthird line\n" + b"x" * 300 + b"\nno newline at the end"
    for seed in range(20):
        got = await lines_of(chunked(body, random.Random(seed)))
        assert got == [b"first", b"", b"third line", b"x" * 300, b"no newline at the end"]


async def test_with_max_line_a_long_line_keeps_its_first_bytes_and_the_next_line_is_whole() -> None:
    long_line = bytes(b for b in range(256) if b != ord("\n")) * 4
    body = b"short\n" + long_line + b"\nafter\n"
    for seed in range(20):
        got = await lines_of(chunked(body, random.Random(seed)), max_line=100)
        assert got == [b"short", long_line[:100], b"after"]


async def test_a_line_that_never_ends_holds_only_max_line_bytes() -> None:
    progress = [b"\r[" + b"#" * (i % 50) + b"]" for i in range(20_000)]  # ~560 KB, no newline
    got = await lines_of(progress, max_line=1_000)
    assert got == [b"".join(progress)[:1_000]]


async def test_the_line_being_written_is_readable_as_it_grows() -> None:
    seen: list[bytes] = []
    response = ChunkedResponse([b"done\nloading 1", b"0%", b"\rloading 20%\nnext"])
    lines = StreamedLines(response, on_unfinished=lambda: seen.append(lines.unfinished()))
    assert [line async for line in lines] == [b"done", b"loading 10%\rloading 20%"]
    assert seen == [b"loading 1", b"loading 10%", b"next"]
    assert lines.unfinished() == b"next"  # not a line: the stream ended before its newline


async def test_past_max_line_the_newest_redraw_of_an_endless_bar_stays_readable() -> None:
    draws = [b"\r[" + b"#" * (i % 50) + b"]" for i in range(2_000)]  # no newline
    lines = StreamedLines(ChunkedResponse(draws), max_line=1_000)
    assert [line async for line in lines] == []
    assert lines.unfinished() == b"".join(draws)[:1_000] + draws[-1]
