"""Reading the working-directory files a cell names with `%files=`, confined to a root directory.

The server reads them relative to the notebook's directory inside its `root_dir` and ships them
base64-encoded in `JobSpec.files`. Symbolic links are resolved before the check, so no path, link
or `..` reaches a file outside the root. Blocking I/O: call it from a thread on the server.
"""

import base64
import os
import stat

from jupyter_core.paths import is_hidden

from distrun.core.errors import LimitExceeded, SpecError
from distrun.core.spec import check_relative_path


def read_cell_files(
    root_dir: str, cwd: str, refs: list[str], max_bytes: int, allow_hidden: bool = False
) -> dict[str, str]:
    """`refs` (paths relative to `cwd`, itself relative to `root_dir`) -> {path: base64}.
    Without `allow_hidden` (Jupyter's `ContentsManager.allow_hidden`), a hidden file, or one in
    a hidden directory, is refused as the contents manager refuses it: by the path named and by
    the path a link leads to."""
    root = os.path.realpath(root_dir)
    base = _resolve_inside(root, cwd, f"cwd {cwd!r}", "cwd")
    if not os.path.isdir(base):
        raise SpecError(f"cwd {cwd!r} is not a directory under the server's root", field="cwd")
    files: dict[str, str] = {}
    total = 0
    for ref in refs:
        name = _shipped_name(ref)
        path = _resolve_inside(base, ref, f"file {ref!r}", "files", root=root)
        if not allow_hidden:
            _check_not_hidden(root, os.path.join(base, ref), path, ref)
        total += _regular_file_size(path, ref)
        if total > max_bytes:
            raise LimitExceeded(
                f"the files named by %files reach {total:,} bytes at {ref!r}, over the limit of "
                f"{max_bytes:,}; ship large data through a volume or object storage"
            )
        with open(path, "rb") as file:
            data = file.read(max_bytes + 1)
        files[name] = base64.b64encode(data).decode("ascii")
    return files


def _shipped_name(ref: str) -> str:
    """The path the file gets in the job's working directory: the ref, normalised."""
    try:
        return check_relative_path(os.path.normpath(ref) if ref else ref)
    except SpecError:
        raise SpecError(
            f"file {ref!r} must be a relative path inside the notebook's directory "
            "(no '..', no leading '/')",
            field="files",
        ) from None


def _resolve_inside(
    base: str, relative: str, what: str, field: str, root: str | None = None
) -> str:
    root = root or base
    path = os.path.realpath(os.path.join(base, relative))
    if os.path.commonpath([root, path]) != root:
        raise SpecError(
            f"{what} is outside the server's root directory; name a path inside it", field=field
        )
    return path


def _check_not_hidden(root: str, named: str, resolved: str, ref: str) -> None:
    if is_hidden(os.path.normpath(named), root) or is_hidden(resolved, root):
        raise SpecError(
            f"file {ref!r} is hidden (a name starting with '.', or in such a directory, or a "
            "link to one); this server does not serve hidden files "
            "(ContentsManager.allow_hidden is off): name a file that is not hidden",
            field="files",
        )


def _regular_file_size(path: str, ref: str) -> int:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise SpecError(
            f"file {ref!r} named by %files does not exist in the notebook's directory",
            field="files",
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(f"{ref!r} is not a regular file; %files names files", field="files")
    return info.st_size
