"""How a terminal shows one line of replica output, without letting the output drive anything.

Training code redraws a line with carriage returns (tqdm, Keras, Lightning) and colours it with
SGR escape codes. `visible_line` gives what a terminal would show of such a line: each `\\r`
returns to the line's start and later characters overwrite earlier ones, `\\b` steps back one
character, "erase to the end of the line" (`ESC [ K`) cuts the line at the cursor, and SGR codes
(colours, bold, ...) stay with the characters they style. Every other control sequence (cursor
movement, screen clearing, titles, OSC 52 clipboard writes, hyperlinks, ...) and every other C0
or C1 control character is dropped: shown, it could act on the reader's terminal.

Why not a terminal emulator library (pyte): it models a whole screen of fixed width, wrapping
and scrolling a long line away, costs a Python dispatch and an object per character, and would
need its cell attributes encoded back into SGR codes. One line needs the four rules above, in one
pass over the text.
"""

import re

_ESCAPE = re.compile(
    r"""
    (?P<csi>(?:\x1b\[|\x9b)(?P<params>[0-?]*)[\x20-/]*(?P<final>[@-~]))  # CSI ... final
    | (?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?        # OSC ... BEL or ST
    | \x1b[PX^_][^\x1b]*(?:\x1b\\)?                               # DCS, SOS, PM, APC strings
    | \x1b[\x20-/]*[0-~]?                                         # any other escape
    | [\x00-\x08\x0b-\x1f\x7f\x80-\x9f]                           # other controls (not \t, \n)
    """,
    re.VERBOSE,
)
# An escape sequence cut off by the end of the text (an unfinished line is read mid-write).
_UNFINISHED_ESCAPE = re.compile(
    r"(?:\x1b(?:\[[0-?]*[\x20-/]*|\][^\x07\x1b]*)?|\x9b[0-?]*[\x20-/]*)\Z"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SGR_PARAMS = re.compile(r"[0-9;:]*\Z")
_RESET = "\x1b[0m"


def visible_line(text: str) -> str:
    """`text` as a terminal shows it: carriage returns, backspaces and erase-to-end applied,
    SGR codes kept, every other control sequence and character dropped (one cut off at the end
    as well: it is still being written). Idempotent."""
    if _CONTROL.search(text) is None:  # most lines: nothing to do
        return text
    text = _UNFINISHED_ESCAPE.sub("", text)
    cells: list[tuple[str, str]] = []  # (the SGR codes in force, the character)
    style = ""
    column = 0
    position = 0
    for match in _ESCAPE.finditer(text):
        column = _write(cells, text[position : match.start()], style, column)
        position = match.end()
        token = match.group(0)
        if token == "\r":
            column = 0
        elif token == "\b":
            column = max(0, column - 1)
        elif match.group("csi") is not None:
            final, params = match.group("final"), match.group("params")
            if final == "m" and _SGR_PARAMS.match(params):
                style = "" if params in ("", "0") else f"{style}\x1b[{params}m"
            elif final == "K" and params in ("", "0"):
                del cells[column:]
    _write(cells, text[position:], style, column)
    return _render(cells)


def last_redraws(text: str, keep: int) -> str:
    """The end of a line redrawn many times, from a carriage return at least `keep` characters
    before its end (or all of it): what a terminal shows of the whole, for any bar narrower
    than `keep`, at a cost that does not grow with the redraws."""
    if len(text) <= keep:
        return text
    start = text.rfind("\r", 0, len(text) - keep)
    return text if start < 0 else text[start:]


def plain_text(text: str) -> str:
    """What a reader sees of `text`, without its colours: for searching and for metrics."""
    return _ESCAPE.sub("", visible_line(text))


def _write(cells: list[tuple[str, str]], chars: str, style: str, column: int) -> int:
    """Writes `chars` from `column` on, overwriting; returns the column after them."""
    end = column + len(chars)
    cells[column:end] = [(style, char) for char in chars]
    return end


def _render(cells: list[tuple[str, str]]) -> str:
    parts: list[str] = []
    current = ""
    for style, char in cells:
        if style != current:
            parts.append(_RESET + style if current else style)
            current = style
        parts.append(char)
    if current:
        parts.append(_RESET)
    return "".join(parts)
