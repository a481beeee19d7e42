"""The labextension writes a job's spec back as a cell ("Edit and run again",
labextension/src/common/specheader.ts) with the header keys of the server's parser: every scalar
setting the parser reads must be written back, under the same key and in the same order, or a
rerun silently loses it (as %restart, %maxRestarts and %elastic once were)."""

import re
from pathlib import Path

from distrun.core import header

SPECHEADER_TS = Path(__file__).parents[2] / "labextension" / "src" / "common" / "specheader.ts"
ENTRY_RE = re.compile(r"\[\s*'(?P<field>[a-z_]+)',\s*'(?P<key>[A-Za-z]*)',")


def written_back() -> list[tuple[str, str]]:
    """(field, header key) in the order specheader.ts writes them; roles have no key."""
    text = SPECHEADER_TS.read_text()
    table = text[text.index("const SCALARS") : text.index("];", text.index("const SCALARS"))]
    return [(m["field"], m["key"]) for m in ENTRY_RE.finditer(table)]


def test_every_scalar_setting_is_written_back_under_its_key_in_order():
    parsed = [
        (field, "" if field == "roles" else header._SETTING_BY_FIELD[field].key)
        for field in header._RENDER_ORDER
        if field in header._SETTING_BY_FIELD or field == "roles"
    ]
    assert written_back() == parsed


def test_the_ts_table_is_read():
    fields = [field for field, _ in written_back()]
    assert fields[:2] == ["framework", "name"] and "resume_from" in fields
