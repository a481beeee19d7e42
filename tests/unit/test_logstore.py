import os
import random
from pathlib import Path

import pytest

from distrun.engines.local.logstore import (
    INDEX_EVERY,
    LineSplitter,
    LogReader,
    LogWriter,
    decode_line,
    index_path,
    log_path,
)


def _write(log_dir: Path, count: int, replica: str = "worker-0") -> None:
    writer = LogWriter(log_dir, replica)
    writer.append([(1000.0 + i, f"line {i}") for i in range(count)])
    writer.close()


def test_reading_from_any_seq_returns_that_line_onwards(tmp_path: Path) -> None:
    _write(tmp_path, 3 * INDEX_EVERY + 10)
    reader = LogReader(tmp_path, "worker-0")
    for start in (0, 1, INDEX_EVERY - 1, INDEX_EVERY, 2 * INDEX_EVERY + 5, 3 * INDEX_EVERY + 9):
        lines = reader.read(start, 3)
        assert [line.seq for line in lines] == list(range(start, min(start + 3, 3 * 1024 + 10)))
        assert lines[0].text == f"line {start}"
        assert lines[0].time == 1000.0 + start
    assert reader.read(3 * INDEX_EVERY + 10, 5) == []
    reader.close()


def test_index_holds_the_offset_of_every_1024th_record(tmp_path: Path) -> None:
    _write(tmp_path, 2 * INDEX_EVERY + 1)
    entries = index_path(tmp_path, "worker-0").read_bytes()
    assert len(entries) == 3 * 8
    data = log_path(tmp_path, "worker-0").read_bytes()
    second = int.from_bytes(entries[8:16], "little")
    assert data[second:].startswith(b"%d\tline %d\n" % ((1000 + INDEX_EVERY) * 1000, INDEX_EVERY))
    assert data[second - 1 : second] == b"\n"


def test_a_torn_record_is_never_returned(tmp_path: Path) -> None:
    _write(tmp_path, 2)
    with open(log_path(tmp_path, "worker-0"), "ab") as log:
        log.write(b"1234\thalf a li")
    reader = LogReader(tmp_path, "worker-0")
    tail = reader.tail(0)
    assert [line.text for line in tail.read(10)] == ["line 0", "line 1"]
    assert tail.read(10) == []
    with open(log_path(tmp_path, "worker-0"), "ab") as log:
        log.write(b"ne\n")
    assert [(line.seq, line.text) for line in tail.read(10)] == [(2, "half a line")]


def test_reopened_writer_drops_a_torn_tail_and_continues_seqs(tmp_path: Path) -> None:
    _write(tmp_path, INDEX_EVERY + 3)
    with open(log_path(tmp_path, "worker-0"), "ab") as log:
        log.write(b"99\ttorn")
    writer = LogWriter(tmp_path, "worker-0")
    assert writer.next_seq == INDEX_EVERY + 3
    writer.append([(2000.0, "after restart")])
    writer.close()
    lines = LogReader(tmp_path, "worker-0").read(INDEX_EVERY, 10)
    assert [line.text for line in lines][-2:] == [f"line {INDEX_EVERY + 2}", "after restart"]
    assert lines[-1].seq == INDEX_EVERY + 3


def test_reopened_writer_rebuilds_a_lost_index(tmp_path: Path) -> None:
    _write(tmp_path, 2 * INDEX_EVERY + 1)
    before = index_path(tmp_path, "worker-0").read_bytes()
    os.truncate(index_path(tmp_path, "worker-0"), 5)  # a torn index entry
    LogWriter(tmp_path, "worker-0").close()
    assert index_path(tmp_path, "worker-0").read_bytes() == before


def test_tail_follows_appends_without_rescanning(tmp_path: Path) -> None:
    writer = LogWriter(tmp_path, "worker-0")
    tail = LogReader(tmp_path, "worker-0").tail(0)
    assert tail.read(10) == []
    writer.append([(1.0, "a"), (2.0, "b")])
    assert [line.text for line in tail.read(1)] == ["a"]
    offset = tail.offset
    writer.append([(3.0, "c")])
    assert [line.text for line in tail.read(10)] == ["b", "c"]
    assert tail.offset > offset and tail.next_seq == 3


def test_text_with_tabs_carriage_returns_and_ansi_codes_round_trips(tmp_path: Path) -> None:
    text = "\x1b[31mred\x1b[0m\tcol\rprogress 50%\r ünï ✓"
    writer = LogWriter(tmp_path, "worker-0")
    writer.append([(1.5, text), (1.5, "")])
    assert [line.text for line in LogReader(tmp_path, "worker-0").read(0, 5)] == [text, ""]


def test_a_line_longer_than_the_read_chunk_is_read_whole(tmp_path: Path) -> None:
    long = "x" * (3 * 1024 * 1024)
    writer = LogWriter(tmp_path, "worker-0")
    writer.append([(1.0, long), (2.0, "next")])
    lines = LogReader(tmp_path, "worker-0").read(0, 5)
    assert [len(line.text) for line in lines] == [len(long), 4]


def test_read_stops_at_the_byte_budget_but_returns_at_least_one_line(tmp_path: Path) -> None:
    writer = LogWriter(tmp_path, "worker-0")
    writer.append([(1.0, "y" * 1000) for _ in range(10)])
    tail = LogReader(tmp_path, "worker-0").tail(0)
    assert len(tail.read(100, max_bytes=10)) == 1
    assert len(tail.read(100, max_bytes=2500)) == 3


def test_a_missing_log_reads_as_empty(tmp_path: Path) -> None:
    reader = LogReader(tmp_path, "nobody-0")
    assert reader.read(0, 10) == [] and reader.size() == 0


def test_writer_rejects_a_line_with_a_newline(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        LogWriter(tmp_path, "worker-0").append([(1.0, "two\nlines")])


def test_splitter_holds_a_partial_line_until_its_newline() -> None:
    splitter = LineSplitter(100)
    assert splitter.feed(b"hel") == []
    assert splitter.feed(b"lo\nwor") == [b"hello"]
    assert splitter.feed(b"ld\n\n") == [b"world", b""]
    assert splitter.feed(b"tail") == []
    assert splitter.flush() == [b"tail"]
    assert splitter.flush() == []


def test_splitter_cuts_long_lines_at_the_limit() -> None:
    splitter = LineSplitter(4)
    assert splitter.feed(b"abcdefghij\n") == [b"abcd", b"efgh", b"ij"]
    assert splitter.feed(b"abcd\n") == [b"abcd"]
    assert splitter.feed(b"abcd") == []  # may still be followed by its newline
    assert splitter.feed(b"e") == [b"abcd"]


def test_splitter_does_not_cut_inside_a_utf8_character() -> None:
    splitter = LineSplitter(4)
    lines = splitter.feed("aaé€\n".encode())  # b"aa\xc3\xa9\xe2\x82\xac\n"
    assert lines == ["aaé".encode(), "€".encode()]


@pytest.mark.parametrize("seed", range(20))
def test_splitter_gives_the_same_lines_whatever_the_pieces(seed: int) -> None:
    rng = random.Random(seed)
    data = b"".join(
        rng.choice([b"\r", b"x" * rng.randint(0, 30), b"\xc3\xa9", b"\n", b"y" * 200])
        for _ in range(300)
    )
    whole = LineSplitter(64)
    expected = whole.feed(data) + whole.flush()
    pieces = LineSplitter(64)
    got: list[bytes] = []
    start = 0
    while start < len(data):
        end = start + rng.randint(1, 40)
        got += pieces.feed(data[start:end])
        start = end
    assert got + pieces.flush() == expected


def test_the_unfinished_line_holds_back_a_cut_character() -> None:
    splitter = LineSplitter(64)
    splitter.feed(b"done\nloading caf\xc3")
    assert splitter.unfinished() == "loading caf"
    splitter.feed(b"\xa9")
    assert splitter.unfinished() == "loading café"


def test_text_with_unicode_line_breaks_stays_one_line(tmp_path: Path) -> None:
    texts = ["a\u2028b", "c\x85d", "e\x0bf\x0cg\x1ch\x1di\x1ej", "k\u2029l", "\r"]
    writer = LogWriter(tmp_path, "worker-0")
    writer.append([(2.0, text) for text in texts])
    lines = LogReader(tmp_path, "worker-0").read(0, 10)
    assert [line.text for line in lines] == texts
    assert [line.seq for line in lines] == list(range(len(texts)))


def test_invalid_utf8_in_a_log_is_replaced_in_its_own_line_only(tmp_path: Path) -> None:
    (tmp_path / "worker-0.log").write_bytes(b"1000\tbad \xc3\n2000\tgood\n")
    lines = LogReader(tmp_path, "worker-0").read(0, 10)
    assert [(line.time, line.text) for line in lines] == [(1.0, "bad \ufffd"), (2.0, "good")]


def _read_reference(lengths: list[int], start: int, max_lines: int, max_bytes: int) -> list[int]:
    """The seqs one read returns: whole lines from `start` while fewer than `max_bytes` bytes
    (a line and its record's newline, without the time) were taken, at most `max_lines`."""
    seqs: list[int] = []
    taken = 0
    for seq in range(start, len(lengths)):
        if len(seqs) >= max_lines or taken >= max_bytes:
            break
        seqs.append(seq)
        taken += len(b"%d\t" % (1000 + seq)) + lengths[seq] + 1
    return seqs


@pytest.mark.parametrize("seed", range(30))
def test_reads_return_the_lines_the_budgets_allow_from_any_seq(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    lengths = [rng.choice([0, 1, 5, 80, 3000, 70_000]) for _ in range(rng.randint(1, 2500))]
    writer = LogWriter(tmp_path, "worker-0")
    writer.append(
        [(1.0 + seq / 1000, "é" * (n // 2) + "x" * (n % 2)) for seq, n in enumerate(lengths)]
    )
    encoded = [len(("é" * (n // 2) + "x" * (n % 2)).encode()) for n in lengths]
    start = rng.randint(0, len(lengths))
    tail = LogReader(tmp_path, "worker-0").tail(start)
    seen: list[int] = []
    while True:
        max_lines, max_bytes = rng.randint(1, 3000), rng.choice([1, 100, 64 * 1024, 4 << 20])
        expected = _read_reference(encoded, tail.next_seq, max_lines, max_bytes)
        lines = tail.read(max_lines, max_bytes)
        assert [line.seq for line in lines] == expected
        assert [line.time for line in lines] == [(1000 + seq) / 1000 for seq in expected]
        if not lines:
            break
        seen += expected
    assert seen == list(range(start, len(lengths)))
    assert tail.next_seq == len(lengths)


@pytest.mark.parametrize("seed", range(20))
def test_captured_bytes_are_written_as_append_writes_their_decoded_text(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    pieces = [b"x", b"\xc3\xa9", b"\t", b"\r", b"\x1b[31m", b"\xff", b"\xe2\x82", b" "]
    captured, decoded = LogWriter(tmp_path / "a", "w-0"), LogWriter(tmp_path / "b", "w-0")
    for _ in range(rng.randint(1, 40)):
        raws = [
            b"".join(rng.choices(pieces, k=rng.randint(0, 30)))
            for _ in range(rng.choice([0, 1, 7, 300, 1500]))
        ]
        when = rng.uniform(1e9, 2e9)
        captured.append_captured(when, raws)
        decoded.append([(when, decode_line(raw)) for raw in raws])
    for name in ("w-0.log", "w-0.idx"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert captured.next_seq == decoded.next_seq


def _split_reference(data: bytes, max_line: int) -> list[bytes]:
    """Lines up to each newline, each over `max_line` cut at UTF-8 boundaries; the rest held."""
    *finished, rest = data.split(b"\n")
    lines = []
    for line in [*finished, rest]:
        while len(line) > max_line:
            cut = max_line
            while cut > max_line - 3 and line[cut] & 0xC0 == 0x80:
                cut -= 1
            lines.append(line[:cut])
            line = line[cut:]
        lines.append(line)
    return lines[:-1]  # the last piece is held


@pytest.mark.parametrize("seed", range(20))
def test_splitter_matches_a_reference_whatever_the_lines(seed: int) -> None:
    rng = random.Random(seed)
    data = b"".join(
        rng.choice([b"\n", b"x" * rng.randint(0, 100), b"\xc3\xa9", b"\r"]) for _ in range(400)
    )
    splitter = LineSplitter(64)
    assert splitter.feed(data) == _split_reference(data, 64)


def test_a_malformed_record_is_an_error_that_names_it(tmp_path: Path) -> None:
    (tmp_path / "worker-0.log").write_bytes(b"1000\tfine\r\n2000\tok\nnot a record\n")
    with pytest.raises(ValueError, match="worker-0's log holds a malformed record: b'not a"):
        LogReader(tmp_path, "worker-0").read(0, 10)
