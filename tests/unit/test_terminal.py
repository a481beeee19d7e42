"""visible_line: a line of replica output as a terminal shows it, with nothing left to act on
the reader's terminal but colours."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distrun.core.terminal import last_redraws, plain_text, visible_line

SGR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain line", "plain line"),
        ("tab\tstays", "tab\tstays"),
        ("Epoch 1:  10%|#   |\rEpoch 1:  20%|##  |", "Epoch 1:  20%|##  |"),
        ("abcdef\rxy", "xycdef"),  # a shorter redraw leaves the rest, as in a terminal
        ("written then\r", "written then"),  # a trailing \r moves the cursor, erases nothing
        ("ab\bX", "aX"),
        ("\b\bstart", "start"),
        ("hello world\rbye\x1b[K", "bye"),  # erase to the end of the line
        ("\x1b[31mERROR\x1b[0m done", "\x1b[31mERROR\x1b[0m done"),
        ("\x1b[1m\x1b[32mok\x1b[m", "\x1b[1m\x1b[32mok\x1b[0m"),
        ("\x1b[31mred\rR", "\x1b[31mRed\x1b[0m"),
        ("\x1b[31mA\x1b[0mB\rC", "CB"),
    ],
)
def test_a_line_shows_what_a_terminal_would(raw: str, shown: str) -> None:
    assert visible_line(raw) == shown


@pytest.mark.parametrize(
    "hostile",
    [
        "\x1b]52;c;ZXZpbA==\x07",  # OSC 52: write the reader's clipboard
        "\x1b]0;owned\x07",  # set the window title
        "\x1b]8;;https://evil.example\x1b\\",  # a hyperlink
        "\x1b[2J\x1b[H",  # clear the screen, cursor home
        "\x1b[5A\x1b[10C",  # cursor up, right
        "\x1bP+q544e\x1b\\",  # DCS: ask the terminal for its capabilities
        "\x1b[?1049h",  # switch to the alternate screen
        "\x07\x00",  # bell, NUL
        "\x9b2J",  # an 8-bit CSI
        "\x9d0;owned\x9c",  # an 8-bit OSC
    ],
)
def test_other_control_sequences_are_dropped(hostile: str) -> None:
    assert visible_line(f"a{hostile}b") == "ab"


def test_a_lone_escape_at_the_end_is_dropped() -> None:
    assert visible_line("done\x1b") == "done"


def test_an_8_bit_sgr_is_kept_as_the_7_bit_one() -> None:
    assert visible_line("\x9b31mred") == "\x1b[31mred\x1b[0m"


def test_the_last_redraws_of_a_long_bar_show_what_the_whole_does() -> None:
    bar = "".join(f"\rstep {i:5d}|{'#' * (i % 40):<40}|" for i in range(10_000))
    tail = last_redraws(bar, 200)
    assert len(tail) < 300 and tail.startswith("\r")
    assert visible_line(tail) == visible_line(bar)
    assert last_redraws("short", 200) == "short"


def test_plain_text_is_what_is_seen_without_colours() -> None:
    assert plain_text("\x1b[1;31mloss\x1b[0m=0.5\r\x1b[32mLoss") == "Loss=0.5"


@given(st.text(alphabet=st.characters(exclude_characters="\n")))
def test_the_result_is_stable_and_holds_no_control_but_sgr(raw: str) -> None:
    shown = visible_line(raw)
    assert visible_line(shown) == shown
    rest = SGR.sub("", shown)
    assert not any(ord(c) < 0x20 and c != "\t" or 0x7F <= ord(c) <= 0x9F for c in rest)


@given(st.text(alphabet=st.characters(exclude_categories=("Cc",))))
def test_text_without_controls_is_unchanged(raw: str) -> None:
    assert visible_line(raw) == raw
    assert plain_text(raw) == raw
