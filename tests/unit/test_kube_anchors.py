"""The pure parts of engines/kube/anchors.py: which line an anchor names, where a file starts,
when a follower leaves one, and how a job's anchors are kept. tests/k8s/test_log_rotation.py
rotates real log files under the kubelet's log reader."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distrun.engines.kube.anchors import (
    ANCHORS_KEPT,
    INSTANCES_KEPT,
    Anchor,
    AnchorPlacer,
    AnchorPolicy,
    FileScan,
    LineKeys,
    add_to_book,
    merge,
    read_book,
    sortable,
    write_book,
)


def log_lines(count: int, stamps_per_line: int = 1) -> list[bytes]:
    """Lines as the API gives them with timestamps; `stamps_per_line` lines share a time, as
    lines written in one go may."""
    return [
        f"2026-11-25T10:00:{(i // stamps_per_line) % 60:02d}.{i // stamps_per_line:06d}Z "
        f"line {i}".encode()
        for i in range(count)
    ]


def anchors_of(lines: list[bytes], indexes: list[int], offset: int = 0) -> list[Anchor]:
    """Anchors a follower that read `lines` (the first having index `offset`) leaves."""
    keys = LineKeys()
    line_keys = [keys.next(raw) for raw in lines]
    return [Anchor(offset + i, line_keys[i]) for i in indexes]


@given(
    count=st.integers(1, 200),
    shared=st.integers(1, 5),
    data=st.data(),
)
def test_a_file_cut_anywhere_starts_where_an_anchor_after_its_cut_says(
    count: int, shared: int, data: st.DataObject
) -> None:
    lines = log_lines(count, shared)
    anchored = sorted(data.draw(st.sets(st.integers(0, count - 1), min_size=1)))
    cut = data.draw(st.integers(0, anchored[-1]))  # the rotation: the file starts there
    scan = FileScan(anchors_of(lines, anchored))
    for raw in lines[cut:]:
        if scan.see(raw):
            break
    assert scan.start in (cut, None), "never a wrong number"

    def stamp(i: int) -> bytes:
        return lines[i].split()[0]

    # An anchor in a run of lines with the same time that the cut splits cannot be used (its
    # place in the run differs); any other anchor in the file numbers it.
    if any(cut == 0 or stamp(cut - 1) != stamp(i) for i in anchored if i >= cut):
        assert scan.start == cut


def test_a_file_without_anchors_of_its_instance_starts_at_zero_without_reading() -> None:
    assert FileScan([]).start == 0


def test_a_file_after_the_newest_anchor_has_no_start_and_its_first_line_is_known() -> None:
    lines = log_lines(50)
    scan = FileScan(anchors_of(lines[:20], [0, 10]))
    for raw in lines[30:]:
        scan.see(raw)
    assert scan.start is None
    assert scan.lines == 20
    assert scan.first_key == LineKeys().next(lines[30])


def test_lines_with_the_same_time_and_text_are_told_apart_by_their_place_in_the_run() -> None:
    same = [b"2026-11-25T10:00:00.5Z epoch done"] * 3
    keys = LineKeys()
    assert [keys.next(raw)[1] for raw in same] == [0, 1, 2]
    scan = FileScan([Anchor(41, LineKeys().next(same[0])), Anchor(99, ("x", 0, 0))])
    assert scan.see(same[0]) and scan.start == 41


def test_a_follower_anchors_its_first_line_then_every_so_many_bytes_or_seconds() -> None:
    policy = AnchorPolicy(every_bytes=100, every_seconds=5.0, rotation_bytes=0)
    placer = AnchorPlacer(policy, start=7)
    lines = log_lines(40)  # 35 bytes each, with its newline
    placed = [placer.read(raw, now=0.0) for raw in lines[:10]]
    assert [a.index for a in placed if a] == [7, 10, 13, 16]
    assert placer.read(lines[10], now=4.9) is None  # 70 bytes since the last, within 5 s...
    anchor = placer.read(lines[11], now=5.1)  # ...but 5 s after it, one is due
    assert anchor is not None and anchor.index == 18


def test_claims_on_lines_before_a_followers_own_newer_anchor_go_and_only_the_newest_stay() -> None:
    own = [Anchor(i, (f"2026-11-25T10:00:{i % 60:02d}Z", 0, i)) for i in range(0, 40, 2)]
    claim = Anchor(5_000, ("2026-11-25T10:00:03.5Z", 0, 1), claimed=True)
    merged = merge([claim], own)
    assert claim not in merged
    assert len(merged) == ANCHORS_KEPT and merged[-1].index == 38
    later_claim = Anchor(9_000, ("2026-11-25T10:01:30Z", 0, 2), claimed=True)
    assert later_claim in merge(own, [later_claim])


def test_times_with_trimmed_fractions_sort_as_times() -> None:
    stamps = ["2026-11-25T10:00:00Z", "2026-11-25T10:00:00.000001Z", "2026-11-25T10:00:00.1Z"]
    assert sorted(stamps, key=sortable) == stamps
    assert sortable("2026-11-25T10:00:00.5Z") > sortable("2026-11-25T10:00:00.123456789Z")


def test_the_book_keeps_two_instances_a_replica_and_survives_json_and_garbage() -> None:
    book: dict[str, dict[str, list[Anchor]]] = {}
    for restart in range(4):
        add_to_book(book, "worker-0", f"uid:{restart}", [Anchor(0, ("t", 0, restart))])
    assert list(book["worker-0"]) == [f"uid:{r}" for r in range(4 - INSTANCES_KEPT, 4)]
    assert read_book(write_book(book)) == book
    assert read_book("not json") == {}
    assert read_book('{"worker-0": {"uid:0": [[1, 2, 3]], "x": "y"}}') == {
        "worker-0": {"uid:0": []}
    }


def test_anchors_by_the_clock_wait_until_the_file_may_have_been_rotated() -> None:
    """A stream's file rotates only once it holds rotation_bytes: before the stream has read
    half of it (counting a runtime's prefix high), a minute of quiet lines leaves no anchor."""
    policy = AnchorPolicy(every_bytes=1 << 20, every_seconds=5.0, rotation_bytes=128 * 1024)
    placer = AnchorPlacer(policy, start=0)
    lines = log_lines(1000)
    first = placer.read(lines[0], now=0.0)
    assert first is not None and first.index == 0
    placed = [placer.read(raw, now=float(i)) for i, raw in enumerate(lines[1:500], 1)]
    assert not any(placed) and not placer.may_have_rotated  # 500 lines: ~48 KiB in the file
    placed = [placer.read(raw, now=float(i)) for i, raw in enumerate(lines[500:], 500)]
    assert placer.may_have_rotated
    times = [a.index for a in placed if a]
    assert times and all(b - a == 5 for a, b in itertools.pairwise(times))


def test_a_rotation_size_below_zero_is_refused_in_words() -> None:
    with pytest.raises(ValueError, match="containerLogMaxSize"):
        AnchorPolicy(rotation_bytes=-1)
