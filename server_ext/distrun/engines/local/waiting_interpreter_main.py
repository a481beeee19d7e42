"""The program of a replica interpreter started ahead of its job (waiting_interpreters.py): it
waits for the job on a pipe, then becomes `python main.py` as nearly as Python allows and runs
the file.

It runs in the replica's Python, not the supervisor's, which may be any CPython from 3.6 on:
the standard library only, no syntax or evaluated annotation newer than 3.6, and nothing the
interpreter does not hold at start-up already (`os`, `sys`), so the program finds the modules a
cold start leaves. Started as a script (`python <this file> <control fd>`), so the interpreter
starts exactly as for the job's own script (`python <this file> <control fd> <report fd>`).
Once up, it reports on the report fd what its start read from disk and how each stood then
(`start_up_inputs`, `stat_key`: NUL-separated path and key pairs, ended by the pipe's end), so
that the supervisor hands it a job only while a cold start would read the same. The job then
arrives on the control fd as NUL-separated fields (the working directory, the argument count,
the arguments, the environment as NAME=value), ended by the pipe's end. An end with no job ends
the process at once.

What it does to become the program, each as CPython does for `python main.py`: a fresh
`__main__` module with the names this file's own `__main__` started with (its `__file__`,
`__loader__` and `__cached__` the script's), `sys.argv`, `sys.orig_argv` (3.10+), `sys.path[0]`
(the script's real directory), the working directory, and `os.environ` replaced by the job's
(keeping what the interpreter itself added as it started: C locale coercion). The file is
compiled as Python compiles a script. An uncaught exception is printed by `sys.excepthook`
without this file's frame, then raised on so that the exit status is what Python gives (1, or
death by SIGINT for KeyboardInterrupt), with the hook silenced for that second report;
SystemExit goes straight through.

Started with a third fd (`python <this file> <control fd> <report fd> <preload fd>`: the next
attempt's interpreter of a job that restarts, restart_interpreters.py), it first reads from
that fd the job's working directory, its script and the modules its previous attempt imported
(NUL-separated: directory, script, then name and file pairs), enters the script's place (the
working directory, `sys.argv`, `sys.path[0]` and a fresh `__main__`, as a cold start has them
when the script's first line runs) and imports each module there, checking that it comes from
the same file; the environment changes the imports made are kept when the job's environment
replaces this process's. A failed import or another file ends the preload: its report is then
the one pair ("", what went wrong), and no job is handed to it.
"""

import os
import sys

# What the interpreter put in `__main__` before this file ran: a script's start.
_AT_START = {name: value for name, value in globals().items() if name.startswith("__")}
# Names the processes started from this interpreter, even those forked without exec (whose
# /proc/PID/environ is the environment the interpreter started with, not the job's): the
# engine finds a job's leftovers by it (processes.kill_job_processes).
MARK = "DISTRUN_WAITING_INTERPRETER"
# Read by every start whatever the interpreter: the dynamic loader's preloads and cache, the
# time zone.
_SYSTEM_FILES = ("/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/localtime")


def stat_key(path: str) -> str:
    """How `path` stands: "-" when absent, else its device, inode, size, mtime and ctime (any
    change to a file, or to a directory's entries, moves its ctime, which no program sets back).
    """
    try:
        found = os.stat(path)
    except OSError:
        return "-"
    fields = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
    return ":".join(str(field) for field in fields)


def _existing(path: str) -> str:
    """`path`, or its nearest ancestor that exists (a zip archive a module was imported from)."""
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _mapped_files() -> "list[str]":
    """The files this process has mapped: the executable, libpython, the C library, the locale
    archive, the extension modules loaded."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return []
    files = []
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith(b"/") and not fields[5].endswith(b")"):
            files.append(os.fsdecode(fields[5]))
    return files


def _interpreter_files() -> "list[str]":
    """Where Python looks as it finds its prefix: the executable, pyvenv.cfg beside it or one
    level up, and the ._pth files that replace sys.path."""
    executable = sys.executable
    found = [executable]
    for directory in {os.path.dirname(executable), os.path.dirname(os.path.realpath(executable))}:
        found.append(os.path.join(directory, "pyvenv.cfg"))
        found.append(os.path.join(os.path.dirname(directory), "pyvenv.cfg"))
        name = os.path.basename(executable)
        found.append(os.path.join(directory, name + "._pth"))
        found.append(os.path.join(directory, "python{}{}._pth".format(*sys.version_info[:2])))
    return found


def _site_files() -> "list[str]":
    """The site directories (the user's too, present or not), the .pth files in them and the
    directories those name."""
    site = sys.modules.get("site")
    if site is None:  # python -S
        return []
    directories = list(getattr(site, "getsitepackages", list)())
    user_site = getattr(site, "USER_SITE", None)
    if isinstance(user_site, str):
        directories.append(user_site)
    found = list(directories)
    for directory in directories:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            if name.endswith(".pth"):
                found.append(os.path.join(directory, name))
                found += _named_directories(directory, name)
    return found


def _named_directories(directory: str, pth: str) -> "list[str]":
    """The directories a .pth file names, present or not (site adds those that exist)."""
    try:
        with open(os.path.join(directory, pth), "rb") as lines:
            text = lines.read()
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        if line and not line.startswith((b"#", b"import ", b"import\t")):
            found.append(os.path.join(directory, os.fsdecode(line.rstrip())))
    return found


def _module_files() -> "list[str]":
    """The file of every module loaded as the interpreter started (site, what .pth files
    imported, sitecustomize, usercustomize, and what a preload imported) and the directories
    of packages. Read from each module's own namespace: some (torch.ops) make up attributes
    asked of them."""
    found = []
    main = sys.modules.get("__main__")
    for module in list(sys.modules.values()):
        # This file, or the job's script once a preload entered it (multiprocessing names it
        # __mp_main__ too).
        if module is main:
            continue
        try:
            namespace = vars(module)
        except TypeError:
            continue
        path = namespace.get("__file__")
        if isinstance(path, str):
            found.append(_existing(os.path.abspath(path)))
        entries = namespace.get("__path__")
        if entries is not None and (
            isinstance(entries, list) or type(entries).__name__ == "_NamespacePath"
        ):
            found += [entry for entry in entries if isinstance(entry, str)]
    return found


def start_up_inputs() -> "list[str]":
    """What this interpreter's start read, or looked for, and a later start might find changed:
    every directory on sys.path (a new sitecustomize, a .pth's new directory), the site
    directories and their .pth files, the modules loaded, the interpreter's own files and those
    of the system. The script's directory (sys.path[0]) is the job's, not read at start-up."""
    search_path = sys.path if getattr(sys.flags, "safe_path", False) else sys.path[1:]
    paths = list(_SYSTEM_FILES) + _interpreter_files() + _mapped_files() + list(search_path)
    paths += _site_files() + _module_files()
    unique = []  # type: list[str]
    seen = set()  # type: set[str]
    for path in paths:
        if path and path not in seen:
            seen.add(path)
            unique.append(path)
    return unique


def _report(fd: int) -> None:
    """Writes what start-up read and how it stood (`stat_key`) to `fd`, then closes it."""
    fields = []
    for path in start_up_inputs():
        fields += [path, stat_key(path)]
    view = memoryview(b"".join(os.fsencode(field) + b"\0" for field in fields))
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # the supervisor no longer listens: it will not hand this one a job
    os.close(fd)


def _environ_at_exec() -> "dict[str, str]":
    """The environment this process was started with, as the kernel keeps it."""
    try:
        with open("/proc/self/environ", "rb") as environ:
            entries = environ.read().split(b"\0")
    except OSError:
        return dict(os.environ)  # nothing added by the interpreter can be told apart
    pairs = (entry.partition(b"=") for entry in entries if entry)
    return {os.fsdecode(name): os.fsdecode(value) for name, _, value in pairs}


def _read_job(fd: int) -> "list[str] | None":
    data = b""
    chunk = os.read(fd, 65536)
    while chunk:
        data += chunk
        chunk = os.read(fd, 65536)
    os.close(fd)
    return [os.fsdecode(field) for field in data.split(b"\0")[:-1]] if data else None


def _preload(fd: int) -> "str | None":
    """Enters the job's script's place and imports the modules named on `fd` (see the
    module's doc); what went wrong, or None."""
    fields = _read_job(fd) or []
    if len(fields) < 2 or len(fields) % 2:
        return "no preload came"
    _enter(fields[0], fields[1])
    for name, file in zip(fields[2::2], fields[3::2]):  # noqa: B905  (3.6: no strict)
        try:
            __import__(name)
        except Exception as error:  # noqa: BLE001  (the next attempt starts cold instead)
            return f"importing {name} failed: {error!r}"
        found = getattr(sys.modules.get(name), "__file__", None)
        if found != file:
            return f"{name} is {found} here, {file} in the job"
    return None


def _enter(cwd: str, script_argument: str) -> str:
    """Takes the place of `python <script_argument>` started in `cwd`: the working directory,
    sys.argv, sys.path[0] and a fresh `__main__` (kept when entered again for the same script);
    returns the script's path as its tracebacks name it."""
    os.chdir(cwd)
    # Python 3.9 made a script's __file__ absolute; it was the path as given before.
    script = os.path.abspath(script_argument) if sys.version_info >= (3, 9) else script_argument
    sys.argv = [script_argument]
    if not getattr(sys.flags, "safe_path", False):  # PYTHONSAFEPATH: no script directory
        sys.path[0] = os.path.dirname(os.path.realpath(script))
    entered = sys.modules.get("__main__")
    if getattr(entered, "__file__", None) == script:
        return script
    main = type(sys)("__main__")
    loader = type(_AT_START["__loader__"])("__main__", script)
    vars(main).update(_AT_START, __doc__=None, __file__=script, __loader__=loader)
    if "__annotations__" in _AT_START:
        main.__annotations__ = {}  # not this file's
    sys.modules["__main__"] = main
    return script


def _become(
    fields: "list[str]", added: "dict[str, str]", removed: "list[str]"
) -> "tuple[str, dict[str, object]]":
    """Becomes the job's program, as far as it can before running it (the job's environment,
    then what this process's start and preload `added` and `removed`); returns the script's
    path (as its tracebacks name it) and its `__main__`'s namespace."""
    cwd, count = fields[0], int(fields[1])
    argv, entries = fields[2 : 2 + count], fields[2 + count :]
    os.environ.clear()
    os.environ.update(entry.partition("=")[::2] for entry in entries)
    os.environ.update(added)
    for name in removed:
        os.environ.pop(name, None)
    script = _enter(cwd, argv[1])
    sys.argv = argv[1:]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv = argv
    return script, vars(sys.modules["__main__"])


def _report_uncaught(error: BaseException) -> None:
    """Prints an uncaught exception as Python would for the script, without this file's frame,
    and silences the hook for the report Python makes once the exception leaves this file."""
    trace = error.__traceback__
    while trace is not None and trace.tb_frame.f_globals is globals():
        trace = trace.tb_next
    # The hook prints the exception's own traceback where it has one, not the one passed.
    sys.excepthook(type(error), error.with_traceback(trace), trace)
    sys.excepthook = lambda *_: None


def _report_failure(fd: int, reason: str) -> None:
    os.write(fd, os.fsencode("\0" + reason + "\0")[:60000])
    os.close(fd)


if __name__ == "__main__":
    _fds = [int(argument) for argument in sys.argv[1:]]  # the preload replaces sys.argv
    _at_exec = _environ_at_exec()
    _failed = _preload(_fds[2]) if len(_fds) > 2 else None
    _added = {name: value for name, value in os.environ.items() if _at_exec.get(name) != value}
    _removed = [name for name in _at_exec if name not in os.environ]
    if _failed is not None:
        _report_failure(_fds[1], _failed)
    else:
        _report(_fds[1])
    _job = _read_job(_fds[0])
    if _job is None or _failed is not None:
        os._exit(0)  # no job came: the supervisor ended it
    _script, _main = _become(_job, _added, _removed)
    try:
        with open(_script, "rb") as _file:
            _source = _file.read()
        exec(compile(_source, _script, "exec", dont_inherit=True), _main)  # noqa: S102  (the job)
    except SystemExit:
        raise
    except BaseException as error:
        _report_uncaught(error)
        raise
    finally:
        # As CPython does once the script has run, before the interpreter's exit.
        _main.pop("__file__", None)
        _main.pop("__cached__", None)
