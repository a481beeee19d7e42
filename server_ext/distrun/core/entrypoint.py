"""How every engine turns a cell's code into the file a replica runs."""


def code_file(code: str) -> tuple[str, str]:
    """The file name and content to write: `main.py`, or `main.ipy` (run with IPython) when the
    code uses IPython syntax. IPython drops leading blank lines before it runs a file, which
    would shift traceback line numbers against the cell, so a blank first line (a consumed
    header) becomes a comment."""
    from distrun.core.header import needs_ipython

    if not needs_ipython(code):
        return "main.py", code
    if code.startswith(("\n", "\r\n")):
        code = "#" + code
    return "main.ipy", code


def argv(python: str, filename: str) -> list[str]:
    """The replica's command line; never a shell."""
    if filename.endswith(".ipy"):
        return [python, "-m", "IPython", "--no-banner", filename]
    return [python, filename]
