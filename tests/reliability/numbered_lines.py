"""Numbered log lines that are hard to carry faithfully, and a writer that emits them badly.

This file is both imported by the tests (to know what each line must read) and shipped as a
replica's code (run as a script, it writes the lines). Line `i` of a replica is a pure function
of the replica name and `i`, so a reader checks every line it receives without storing any.

What the writer does to the stream: bursts of thousands of lines in one go, then a pause;
writes cut at random byte positions (mid-line, mid-UTF-8 character) with a flush in between;
long lines up to 1 MiB; invalid UTF-8; ANSI colour codes and carriage returns; progress bars
redrawn in place over a second (so readers see the unfinished line change); and a last line
without a newline.
"""

import os
import random
import sys
import time
from typing import BinaryIO

LONG_LINE_SIZES = (64 * 1024, 256 * 1024, 1024 * 1024)  # bytes, without the newline
LONG_LINE_EVERY = 25_000
BAR_EVERY = 10_000
BAR_DRAWS = (b"\x1b[32mbar\x1b[0m   0%|   |", b"\x1b[32mbar\x1b[0m  50%|#  |", b"bar 100%|###|")
BAR_PAUSE = 0.35  # seconds between two draws: longer than the engine's partial interval


def is_bar(i: int) -> bool:
    return i % BAR_EVERY == BAR_EVERY // 3


def line_bytes(replica: str, i: int) -> bytes:
    """Line `i` as the replica writes it, without its newline."""
    prefix = b"%s %07d " % (replica.encode(), i)
    if is_bar(i):
        return prefix + b"\r".join(BAR_DRAWS)
    if i % LONG_LINE_EVERY == LONG_LINE_EVERY // 2:
        size = LONG_LINE_SIZES[(i // LONG_LINE_EVERY) % len(LONG_LINE_SIZES)]
        return prefix + b"L" * (size - len(prefix))
    if i % 7 == 3:
        return prefix + b"bad \xff\xfe utf-8 \xc3 cut"
    if i % 11 == 5:
        return prefix + b"\x1b[31mred\x1b[0m \x1b[1;32mbold green\x1b[0m 50%\r100%"
    if i % 13 == 8:
        return prefix + "caf\u00e9 \u6f22\u5b57 \U0001f642".encode()
    return prefix + b"plain"


def line_text(replica: str, i: int) -> str:
    """Line `i` as a reader must receive it: invalid UTF-8 replaced by U+FFFD."""
    return line_bytes(replica, i).decode("utf-8", errors="replace")


def write_lines(replica: str, count: int, seed: int) -> None:
    rng = random.Random(f"{seed}-{replica}")
    out = sys.stdout.buffer
    i = 0
    while i < count:
        if is_bar(i) and i < count - 1:
            _draw_bar(out, line_bytes(replica, i))
            i += 1
            continue
        burst = min(count - i, rng.choice((1, 10, 500, 5_000)))
        bars = [n for n in range(i + 1, i + burst) if is_bar(n)]
        burst = bars[0] - i if bars else burst  # a bar is drawn on its own
        chunk = b"".join(line_bytes(replica, n) + b"\n" for n in range(i, i + burst))
        i += burst
        if i == count:
            chunk = chunk[:-1]  # the last line ends without a newline
        _write_in_pieces(out, chunk, rng)
        if rng.random() < 0.05:
            time.sleep(rng.random() * 0.01)


def _draw_bar(out: BinaryIO, line: bytes) -> None:
    """A progress bar: its draws written one by one, a pause apart, then its newline."""
    for draw, piece in enumerate(line.split(b"\r")):
        out.write(piece if draw == 0 else b"\r" + piece)
        out.flush()
        time.sleep(BAR_PAUSE)
    out.write(b"\n")
    out.flush()


def _write_in_pieces(out: BinaryIO, data: bytes, rng: random.Random) -> None:
    """Usually one write; sometimes cut at random byte positions, flushing at each cut, so
    the reader sees lines (and UTF-8 characters) arrive in parts."""
    if rng.random() < 0.7:
        out.write(data)
        out.flush()
        return
    start = 0
    while start < len(data):
        end = min(len(data), start + rng.randint(1, 4096))
        out.write(data[start:end])
        out.flush()
        start = end


if __name__ == "__main__":
    write_lines(
        os.environ["DISTRUN_REPLICA"],
        int(os.environ["FIDELITY_LINES"]),
        int(os.environ["FIDELITY_SEED"]),
    )
