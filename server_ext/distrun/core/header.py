"""The cell header: the lines at the top of a notebook cell that say how to run it as a job.

Two syntaxes, which may be mixed (a ``%%distrun`` first line followed by ciao lines):

1. ciao's lines, unchanged, one setting per line: ``%framework=tensorflow``, ``%worker=2``,
   ``%ps=1;%cpu=1;%memory=2Gi`` (ciao's per-role resources, ``;``-separated on the role's line),
   ``%cleanPolicy=all``; plus distrun's own keys in the same syntax (``%name=``, ``%env=K=V``,
   ``%files=a.py,b.csv``, ``%worker.cpu=2``, ...).
2. A ``%%distrun --framework pytorch --workers 2 ...`` cell magic as the first line.

The exact rules:

- The header is the leading block of lines that are header lines, blank lines (only spaces and
  tabs) or ``#`` comments. It ends at the first other line; that line and everything after it is
  the body and is kept byte for byte.
- A setting line is: optional spaces or tabs, ``%``, a key (a letter, then letters, digits, ``_``,
  ``-`` or ``.``), optional spaces or tabs, then ``=`` and the value. Keys are matched ignoring
  case, ``_`` and ``-`` (``%clean_policy`` is ``%cleanPolicy``). In the header, an unknown key
  is an error rather than body, so a typo never silently becomes code.
- Any other ``%`` or ``!`` line ends the header and stays in the body: ``%env X=1`` is IPython's
  ``%env`` magic because a space, not ``=``, follows the key; so are ``%matplotlib inline``,
  ``%%time`` and ``!pip list``. (ciao silently dropped every ``%`` line; we drop none of them.)
- ``%%distrun`` is recognised only as the first non-blank line, like any IPython cell magic.
- Header lines become empty lines in the code, so line numbers in tracebacks match the cell.

A header may declare a parameter sweep (core/sweep.py: N trials, each this job with other
parameters): ``%sweep.lr=loguniform(1e-4,1e-1)``, ``%sweep.batch=32,64,128`` (a list: a grid's
values, or a random search's choices), ``%sweep.opt=choice(adam,sgd)``, then ``%search=random``,
``%trials=6``, ``%parallel=2``, ``%objective=loss:min`` (or ``accuracy:max:best``),
``%earlyStop=median:3`` and ``%seed=7``; as flags ``--sweep lr=loguniform(1e-4,1e-1)``
(repeated per parameter), ``--search``, ``--trials``, ``--parallel``, ``--objective``,
``--early-stop``, ``--seed``. The sweep is `ParsedCell.sweep`; it stays out of the JobSpec.
"""

import argparse
import ast
import difflib
import re
import shlex
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

from distrun.core.errors import LimitExceeded, SpecError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.gpus import GPU_FALLBACKS, GPU_MEMORY_RE, GPU_MEMORY_WRITE, GPU_WRITE, parse_gpu
from distrun.core.jobids import JOB_ID_RE
from distrun.core.quantities import QuantityError, check_cpu, check_memory
from distrun.core.spec import (
    CLEAN_POD_POLICIES,
    ENGINE_NAME_RE,
    ENV_NAME_RE,
    IMAGE_RE,
    JOB_NAME_RE,
    NAMESPACE_RE,
    RESTART_POLICIES,
    RESTART_SCOPES,
    JobSpec,
    Limits,
    check_relative_path,
    default_roles,
    quoted,
)
from distrun.core.sweep import (
    DEFAULT_PARALLEL,
    PARAM_NAME_RE,
    SEARCHES,
    Example,
    Param,
    SweepSpec,
    default_search,
    format_early_stop,
    format_objective,
    format_space,
    parse_early_stop,
    parse_objective,
    parse_space,
)
from distrun.core.sweep import check as check_sweep

# A guard against pathological input, far above any payload limit an operator would set; the
# configured payload limit is enforced by `spec_from_cell`.
MAX_CELL_CHARS = 64 * 1024 * 1024
MAX_COUNT_DIGITS = 6

ROLE_NAMES: tuple[str, ...] = tuple(
    dict.fromkeys(role.name for fw in FRAMEWORKS.values() for role in fw.roles)
)
RESOURCE_NAMES = ("cpu", "memory", "gpu", "gpuMemory")  # as a header writes them
# A resource's JobSpec field where the header spells it otherwise.
_RESOURCE_FIELD = {"gpuMemory": "gpu_memory"}

_SETTING_LINE = re.compile(r"[ \t]*%([A-Za-z][A-Za-z0-9_.-]*)[ \t]*=(.*)")
_MAGIC_LINE = re.compile(r"[ \t]*%%distrun(?:[ \t](.*))?")
_SEGMENT = re.compile(r"[ \t]*%([A-Za-z][A-Za-z0-9_-]*)[ \t]*=(.*)")
_WHOLE_NUMBER = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]{1,6}\.[0-9]{1,6}")
_DURATION = re.compile(r"([0-9]{1,9})([smhd]?)")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_LINE_BREAKS = ("\n", "\r")


@dataclass
class ParsedCell:
    # A dict in JobSpec.from_dict's input shape, without "code"; not yet validated as a whole.
    spec_fields: dict[str, Any]
    code: str  # the body, header lines replaced by empty lines
    has_header: bool
    file_refs: list[str]  # working-directory files named by the header, for the caller to ship
    # Where each field came from: "name", "roles.worker", "roles.worker.cpu" -> 1-based line.
    field_lines: dict[str, int] = field(default_factory=dict)
    sweep: SweepSpec | None = None  # checked; its trials run this spec with other parameters


class _BadValue(Exception):
    """A value that does not convert; the message says what is wrong with it."""


# ---------------------------------------------------------------------------------------------
# Value converters: the raw text of one value -> the value JobSpec.from_dict takes.


def _count(raw: str) -> int:
    if _WHOLE_NUMBER.fullmatch(raw):
        if len(raw) > MAX_COUNT_DIGITS:
            raise _BadValue("is far too large")
        return int(raw)
    if raw.startswith("-") and _WHOLE_NUMBER.fullmatch(raw[1:]):
        raise _BadValue("cannot be negative")
    raise _BadValue("is not a whole number")


def _elastic(raw: str) -> str:
    low, colon, high = raw.partition(":")
    if not (colon and _WHOLE_NUMBER.fullmatch(low) and _WHOLE_NUMBER.fullmatch(high)):
        raise _BadValue("is not MIN:MAX (the least and the most workers, whole numbers)")
    return f"{_count(low)}:{_count(high)}"


def _gpu(raw: str) -> int | float | str:
    if _WHOLE_NUMBER.fullmatch(raw) or raw.startswith("-"):
        return _count(raw)
    try:
        return parse_gpu(raw, 10**MAX_COUNT_DIGITS)
    except SpecError:
        if _DECIMAL.fullmatch(raw) and float(raw) > 1:
            raise _BadValue(
                "is more than one GPU but not a whole number; ask for whole GPUs, or for a "
                "share of one below 1"
            ) from None
        raise _BadValue(f"is not {GPU_WRITE}") from None


def _seed(raw: str) -> int:
    if not _WHOLE_NUMBER.fullmatch(raw):
        raise _BadValue("is not a whole number")
    if len(raw) > 19:  # the sweep's rules hold it below 2**63
        raise _BadValue("is far too large")
    return int(raw)


def _duration(raw: str) -> int:
    match = _DURATION.fullmatch(raw)
    if not match:
        raise _BadValue("is not a duration (seconds, or a number with s, m, h or d)")
    return int(match.group(1)) * _DURATION_UNITS[match.group(2)]


def _framework(raw: str) -> str:
    name = raw.lower()
    if name in FRAMEWORKS:
        return name
    close = difflib.get_close_matches(name, FRAMEWORKS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise _BadValue(f"is not a framework{hint}; the frameworks are {', '.join(FRAMEWORKS)}")


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def convert(raw: str) -> str:
        if not pattern.fullmatch(raw):
            raise _BadValue(f"is not {what}")
        return raw

    return convert


def _quantity(check: Callable[[str], str]) -> Callable[[str], str]:
    def convert(raw: str) -> str:
        try:
            return check(raw)
        except QuantityError as error:
            raise _BadValue(str(error)) from None

    return convert


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    by_lower = {choice.lower(): choice for choice in choices}

    def convert(raw: str) -> str:
        if raw.lower() not in by_lower:
            raise _BadValue(f"is not one of {', '.join(choices)}")
        return by_lower[raw.lower()]

    return convert


@dataclass(frozen=True)
class _Setting:
    key: str  # as written in ciao's syntax: "restartPolicy"
    field: str  # the JobSpec field
    example: str  # a valid value, for messages
    convert: Callable[[str], Any]


_SCALARS: dict[str, _Setting] = {
    s.key: s
    for s in (
        _Setting("framework", "framework", "pytorch", _framework),
        _Setting(
            "name",
            "name",
            "my-job",
            _matching(JOB_NAME_RE, "a job name (lower-case letters, digits and '-', at most 32)"),
        ),
        _Setting("engine", "engine", "local", _matching(ENGINE_NAME_RE, "an engine name")),
        _Setting("namespace", "namespace", "team-a", _matching(NAMESPACE_RE, "a namespace")),
        _Setting("image", "image", "python:3.11", _matching(IMAGE_RE, "an image reference")),
        _Setting("restartPolicy", "restart_policy", "OnFailure", _choice(RESTART_POLICIES)),
        _Setting("backoffLimit", "backoff_limit", "3", _count),
        _Setting("restart", "restart", "job", _choice(RESTART_SCOPES)),
        _Setting("maxRestarts", "max_restarts", "3", _count),
        _Setting("elastic", "elastic", "2:4", _elastic),
        _Setting(
            "checkpointVolume",
            "checkpoint_volume",
            "ckpt",
            _matching(NAMESPACE_RE, "a PersistentVolumeClaim name"),
        ),
        _Setting("resumeFrom", "resume_from", "train-ab12c", _matching(JOB_ID_RE, "a job id")),
        _Setting("deadline", "active_deadline_seconds", "600", _duration),
        _Setting("startupTimeout", "startup_timeout_seconds", "300", _duration),
        _Setting("cleanPolicy", "clean_pod_policy", "all", _choice(CLEAN_POD_POLICIES)),
        _Setting("ttl", "ttl_seconds_after_finished", "3600", _duration),
        _Setting("queue", "queue", "default", _matching(NAMESPACE_RE, "a queue name")),
        _Setting(
            "priorityClass", "priority_class", "high", _matching(NAMESPACE_RE, "a PriorityClass")
        ),
        _Setting("gpuFallback", "gpu_fallback", "cpu", _choice(GPU_FALLBACKS)),
    )
}
_RESOURCES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "cpu": ("2", _quantity(check_cpu)),
    "memory": ("4Gi", _quantity(check_memory)),
    "gpu": ("1", _gpu),
    "gpuMemory": ("10Gi", _matching(GPU_MEMORY_RE, GPU_MEMORY_WRITE)),
}
_ALIASES = {
    "cleanpodpolicy": "cleanPolicy",
    "activedeadlineseconds": "deadline",
    "ttlsecondsafterfinished": "ttl",
    "cpus": "cpu",
    "gpus": "gpu",
}


def _norm(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")


# The sweep's settings besides its parameters (%sweep.<name>=), each with its flag.
SWEEP_SETTINGS = ("search", "trials", "parallel", "objective", "earlyStop", "seed")
_SWEEP_BY_NORM = {_norm(key): key for key in SWEEP_SETTINGS}

_BY_NORM: dict[str, str] = {
    **{_norm(k): k for k in (*_SCALARS, *_RESOURCES, *ROLE_NAMES, "env", "files")},
    **_ALIASES,
}


@dataclass(frozen=True)
class _Key:
    kind: Literal["scalar", "count", "resource", "env", "files"]
    name: str  # the canonical key: "restartPolicy", "worker", "cpu", "env", "files"
    role: str | None = None  # for a per-role resource

    @property
    def display(self) -> str:
        return f"{self.role}.{self.name}" if self.role else self.name


def _resolve(raw_key: str) -> _Key | None:
    role_part, dot, resource_part = raw_key.partition(".")
    if dot:
        role = _BY_NORM.get(_norm(role_part))
        resource = _BY_NORM.get(_norm(resource_part))
        if role in ROLE_NAMES and resource in _RESOURCES:
            return _Key("resource", resource, role)
        return None
    name = _BY_NORM.get(_norm(raw_key))
    if name is None:
        return None
    if name in _SCALARS:
        return _Key("scalar", name)
    if name in ROLE_NAMES:
        return _Key("count", name)
    if name in _RESOURCES:
        return _Key("resource", name)
    return _Key("env" if name == "env" else "files", name)


_KNOWN_KEYS: tuple[str, ...] = (
    *_SCALARS,
    *ROLE_NAMES,
    *_RESOURCES,
    *(f"{role}.{res}" for role in ROLE_NAMES for res in _RESOURCES),
    "env",
    "files",
    *SWEEP_SETTINGS,
)


def _unknown_key(raw_key: str, line: int) -> SpecError:
    by_lower = {k.lower(): k for k in _KNOWN_KEYS}
    close = difflib.get_close_matches(raw_key.lower(), by_lower, n=1)
    if close:
        return SpecError(
            f"unknown setting {raw_key!r}; did you mean {by_lower[close[0]]!r}?", line=line
        )
    plain = [k for k in _KNOWN_KEYS if "." not in k]
    return SpecError(
        f"unknown setting {raw_key!r}; the settings are {', '.join(plain)}, "
        "<role>.cpu/.memory/.gpu/.gpuMemory and sweep.<parameter> (a line like %env X=1, "
        "without '=' after the name, is an IPython magic and ends the header)",
        line=line,
    )


# ---------------------------------------------------------------------------------------------
# The header being read: every setting with the line it came from.


@dataclass(frozen=True)
class _Source:
    """Where a value was written, to name it in messages the way the user wrote it."""

    line: int
    prefix: str  # "%worker", "--workers", "--role-resources worker:cpu"
    from_flag: bool  # a %%distrun option: its value is taken literally, as shlex gave it

    def example(self, value: str) -> str:
        if self.from_flag and not self.prefix.startswith("--role-resources"):
            return f"{self.prefix} {value}"
        return f"{self.prefix}={value}"


@dataclass
class _Header:
    first_line: int | None = None
    first_is_magic: bool = False
    seen: dict[str, int] = field(default_factory=dict)  # setting identity -> line
    scalars: dict[str, Any] = field(default_factory=dict)  # JobSpec field -> value
    counts: dict[str, int] = field(default_factory=dict)
    # Role (None: every role) -> resource -> value.
    resources: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    field_lines: dict[str, int] = field(default_factory=dict)
    role_lines: dict[str, int] = field(default_factory=dict)  # role named anywhere -> first line
    resource_lines: dict[str | None, dict[str, int]] = field(default_factory=dict)
    # "sweep.lr", "trials", ... -> the text and where it was written, read at the end.
    sweep: dict[str, tuple[str, _Source]] = field(default_factory=dict)

    def set_sweep(self, key: str, raw: str, src: _Source) -> None:
        self.claim(key, key, src.line)
        self.sweep[key] = (raw, src)

    def claim(self, identity: str, what: str, line: int) -> None:
        if identity in self.seen:
            raise SpecError(
                f"{what} is already set on line {self.seen[identity]}; keep only one of them",
                line=line,
            )
        self.seen[identity] = line

    def set(self, key: _Key, raw: str, src: _Source) -> None:
        if key.kind == "env":
            self._set_env(raw, src)
        elif key.kind == "files":
            self._set_files(raw, src)
        else:
            self.claim(key.display, key.display, src.line)
            if key.kind == "scalar":
                setting = _SCALARS[key.name]
                self.scalars[setting.field] = _convert(key.display, raw, setting, src)
                self.field_lines[setting.field] = src.line
            elif key.kind == "count":
                count = _Setting(key.name, f"roles.{key.name}", "2", _count)
                self.counts[key.name] = _convert(f"{key.name} count", raw, count, src)
                self.role_lines.setdefault(key.name, src.line)
                self.field_lines[f"roles.{key.name}"] = src.line
            else:
                example, convert = _RESOURCES[key.name]
                spec_field = _RESOURCE_FIELD.get(key.name, key.name)
                where = f"roles.{key.role}.{spec_field}" if key.role else "roles"
                setting = _Setting(key.display, where, example, convert)
                value = _convert(key.display, raw, setting, src)
                self.resources.setdefault(key.role, {})[spec_field] = value
                self.resource_lines.setdefault(key.role, {})[spec_field] = src.line
                if key.role:
                    self.role_lines.setdefault(key.role, src.line)

    def _set_env(self, raw: str, src: _Source) -> None:
        name, eq, value = raw.partition("=")
        if not src.from_flag:  # "%env = K = v": spaces around either "=" are layout
            name, value = name.strip(" \t"), value.strip(" \t")
        if not eq or not ENV_NAME_RE.fullmatch(name):
            raise SpecError(
                f"env {raw!r} is not NAME=value with a variable name; "
                f"write {src.example('KEY=value')}",
                line=src.line,
                field="env",
            )
        if "\x00" in value:
            raise SpecError(f"env {name} contains a NUL byte", line=src.line, field="env")
        self.claim(f"env {name}", f"env {name}", src.line)
        self.env[name] = value
        self.field_lines.setdefault("env", src.line)

    def _set_files(self, raw: str, src: _Source) -> None:
        for item in raw.split(","):
            path = item.strip(" \t")
            if not path:
                raise SpecError(
                    f"files {raw!r} has an empty name; write {src.example('train.py,data/b.csv')}",
                    line=src.line,
                    field="files",
                )
            try:
                check_relative_path(path)
            except SpecError as err:
                raise SpecError(str(err), line=src.line, field="files") from None
            self.claim(f"file {path}", f"file {path!r}", src.line)
            self.files.append(path)
        self.field_lines.setdefault("files", src.line)


def _convert(label: str, raw: str, setting: _Setting, src: _Source) -> Any:
    try:
        return setting.convert(raw)
    except _BadValue as bad:
        raise SpecError(
            f"{label} {quoted(raw)} {bad}; write {src.example(setting.example)}",
            line=src.line,
            field=setting.field,
        ) from None


# ---------------------------------------------------------------------------------------------
# ciao's lines


def _read_setting_line(header: _Header, raw_key: str, value: str, line: int) -> None:
    sweep_key = _sweep_key(raw_key, line)
    if sweep_key is not None:
        src = _Source(line, f"%{sweep_key}", from_flag=False)
        header.set_sweep(sweep_key, value.strip(" \t"), src)
        return
    key = _resolve(raw_key)
    if key is None:
        raise _unknown_key(raw_key, line)
    if key.kind != "count":
        header.set(key, value.strip(" \t"), _Source(line, f"%{key.display}", from_flag=False))
        return
    # ciao's role line: "%worker=2;%cpu=1;%memory=2Gi" gives the role its own resources.
    count, *segments = value.split(";")
    header.set(key, count.strip(" \t"), _Source(line, f"%{key.name}", from_flag=False))
    for segment in segments:
        if not segment.strip(" \t"):
            continue
        match = _SEGMENT.fullmatch(segment)
        resource = _BY_NORM.get(_norm(match.group(1))) if match else None
        if match is None or resource not in _RESOURCES:
            raise SpecError(
                f"{segment.strip()!r} cannot follow %{key.name}= on its line; only ;%cpu=, "
                f";%memory=, ;%gpu= and ;%gpuMemory= can (e.g. %{key.name}=2;%cpu=2;%memory=4Gi)",
                line=line,
            )
        assert match is not None and resource is not None
        header.set(
            _Key("resource", resource, key.name),
            match.group(2).strip(" \t"),
            _Source(line, f"%{key.name}.{resource}", from_flag=False),
        )


def _sweep_key(raw_key: str, line: int) -> str | None:
    """The key of a sweep parameter ("sweep.lr") or setting ("trials"), else None."""
    prefix, dot, name = raw_key.partition(".")
    if _norm(prefix) != "sweep":
        return None if dot else _SWEEP_BY_NORM.get(_norm(raw_key))
    if not dot:
        raise SpecError("name the swept parameter, like %sweep.lr=0.1,0.01", line=line)
    return f"sweep.{_param_name(name, line)}"


def _param_name(name: str, line: int) -> str:
    if not PARAM_NAME_RE.fullmatch(name):
        raise SpecError(
            f"sweep parameter {name!r} is not a name of letters, digits and _ (starting with a "
            "letter or _, at most 64), like lr or batch_size",
            line=line,
        )
    return name


# ---------------------------------------------------------------------------------------------
# The %%distrun line


class _FlagError(Exception):
    pass


class _FlagParser(argparse.ArgumentParser):
    """argparse that raises instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise _FlagError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise _FlagError(message or "invalid arguments")


class _Record(argparse.Action):
    """Keeps every flag in order with the spelling used, so duplicates and messages are exact."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        namespace.settings.append((self.dest, option_string, values))


def _flag_names(key: str) -> list[str]:
    if key in ROLE_NAMES:
        return [f"--{key}"] if key == "ps" else [f"--{key}", f"--{key}s"]
    spelled = re.sub(r"([A-Z])", r"-\1", key).lower()
    names = {"cleanPolicy": ["--clean-pod-policy", "--clean-policy"]}.get(key, [f"--{spelled}"])
    return names + ([f"--{key}s"] if key in ("cpu", "gpu") else [])


_FLAG_KEYS = (
    *_SCALARS,
    *ROLE_NAMES,
    *_RESOURCES,
    "env",
    "files",
    "roleResources",
    "sweep",
    *SWEEP_SETTINGS,
)
_FLAGS: tuple[str, ...] = tuple(name for key in _FLAG_KEYS for name in _flag_names(key))


def _build_flag_parser() -> _FlagParser:
    parser = _FlagParser(prog="distrun", add_help=False, allow_abbrev=False)
    for key in _FLAG_KEYS:
        parser.add_argument(*_flag_names(key), dest=key, action=_Record, default=argparse.SUPPRESS)
    return parser


_FLAG_PARSER = _build_flag_parser()


def _read_magic_line(header: _Header, args: str, line: int) -> None:
    try:
        tokens = shlex.split(args)
    except ValueError as err:
        raise SpecError(f"%%distrun: {err}; close the quote", line=line) from None
    namespace = argparse.Namespace(settings=[])
    try:
        _, extra = _FLAG_PARSER.parse_known_args(tokens, namespace)
    except (_FlagError, argparse.ArgumentError) as err:
        raise SpecError(
            f"%%distrun: {err}; write each option with its value, like --workers 2", line=line
        ) from None
    if extra:
        raise _unexpected_token(extra[0], line)
    for key, flag, value in namespace.settings:
        if key == "roleResources":
            _read_role_resources(header, value, line)
        elif key == "sweep":
            _read_sweep_flag(header, value, _Source(line, flag, from_flag=True))
        elif key in SWEEP_SETTINGS:
            header.set_sweep(key, value, _Source(line, flag, from_flag=True))
        else:
            resolved = _resolve(key)
            assert resolved is not None, key
            header.set(resolved, value, _Source(line, flag, from_flag=True))


def _unexpected_token(token: str, line: int) -> SpecError:
    if token.startswith("-"):
        flag = token.split("=", 1)[0]
        close = difflib.get_close_matches(flag, _FLAGS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the options are {', '.join(_FLAGS)}"
        return SpecError(f"%%distrun has no option {flag!r}; {hint}", line=line)
    return SpecError(
        f"%%distrun: unexpected argument {token!r}; every setting is an option with a value, "
        "like --workers 2 (quote values that contain spaces)",
        line=line,
    )


def _read_sweep_flag(header: _Header, value: str, src: _Source) -> None:
    name, eq, raw = value.partition("=")
    if not eq:
        raise SpecError(
            f"--sweep {value!r} is not name=values; write --sweep lr=0.1,0.01 or "
            "--sweep lr=loguniform(1e-4,1e-1)",
            line=src.line,
        )
    name = _param_name(name.strip(" \t"), src.line)
    header.set_sweep(f"sweep.{name}", raw.strip(" \t"), src)


def _read_role_resources(header: _Header, value: str, line: int) -> None:
    example = "--role-resources worker:cpu=2,memory=4Gi,gpu=1"
    role_part, colon, assignments = value.partition(":")
    role = _BY_NORM.get(_norm(role_part.strip(" \t")))
    if not colon or role not in ROLE_NAMES:
        raise SpecError(
            f"--role-resources {value!r} does not start with a role name and ':'; write {example}",
            line=line,
        )
    assert role is not None
    for assignment in assignments.split(","):
        name, eq, raw = assignment.partition("=")
        resource = _BY_NORM.get(_norm(name.strip(" \t")))
        if not eq or resource not in _RESOURCES:
            raise SpecError(
                f"--role-resources {value!r}: {assignment.strip()!r} is not cpu=, memory=, "
                f"gpu= or gpuMemory=; write {example}",
                line=line,
            )
        assert resource is not None
        src = _Source(line, f"--role-resources {role}:{resource}", from_flag=True)
        header.set(_Key("resource", resource, role), raw.strip(" \t"), src)


# ---------------------------------------------------------------------------------------------
# The cell


def parse_cell(cell: str) -> ParsedCell:
    """Split a cell into its header's settings and its body. Raises SpecError naming the line."""
    return _parse(cell, default_framework=None)


def _parse(cell: str, default_framework: str | None) -> ParsedCell:
    if not isinstance(cell, str):
        raise SpecError("the cell must be text", field="code")
    if len(cell) > MAX_CELL_CHARS:
        raise LimitExceeded(f"the cell has {len(cell):,} characters, over {MAX_CELL_CHARS:,}")
    _check_encodable(cell)
    lines = cell.split("\n")
    code = list(lines)
    header = _Header()
    only_blank_so_far = True
    for index, full_line in enumerate(lines):
        number = index + 1
        text = full_line.removesuffix("\r")
        stripped = text.strip(" \t")
        if not stripped or stripped.startswith("#"):
            only_blank_so_far = only_blank_so_far and not stripped
            continue
        if magic := _MAGIC_LINE.fullmatch(text):
            if not only_blank_so_far:
                raise SpecError(
                    "%%distrun must be the first line of the cell; move it to the top", line=number
                )
            _read_magic_line(header, magic.group(1) or "", number)
        elif setting := _SETTING_LINE.fullmatch(text):
            _read_setting_line(header, setting.group(1), setting.group(2), number)
        else:
            break
        if header.first_line is None:
            header.first_line, header.first_is_magic = number, magic is not None
        only_blank_so_far = False
        code[index] = ""
    if header.first_line is None:
        return ParsedCell(spec_fields={}, code=cell, has_header=False, file_refs=[])
    return ParsedCell(
        spec_fields=_spec_fields(header, default_framework),
        code="\n".join(code),
        has_header=True,
        file_refs=list(header.files),
        field_lines=dict(header.field_lines),
        sweep=_sweep(header),
    )


def _check_encodable(cell: str) -> None:
    try:
        cell.encode("utf-8")
    except UnicodeEncodeError as err:
        raise SpecError(
            "the cell contains a character that is not valid Unicode (a lone surrogate); delete it",
            line=cell.count("\n", 0, err.start) + 1,
            field="code",
        ) from None


def _spec_fields(header: _Header, default_framework: str | None) -> dict[str, Any]:
    framework = header.scalars.get("framework", default_framework)
    if framework is not None and framework not in FRAMEWORKS:
        raise SpecError(
            f"unknown framework {framework!r}; write one of {', '.join(FRAMEWORKS)}",
            field="framework",
        )
    if framework is None:
        assert header.first_line is not None
        add = "--framework pytorch" if header.first_is_magic else "%framework=pytorch"
        raise SpecError(
            f"the header does not say which framework to use; add {add} (one of "
            f"{', '.join(FRAMEWORKS)})",
            line=header.first_line,
            field="framework",
        )
    fields: dict[str, Any] = {"framework": framework, **header.scalars}
    roles = _roles(header, framework)
    if roles:
        fields["roles"] = roles
    if header.env:
        fields["env"] = dict(header.env)
    return fields


def _sweep(header: _Header) -> SweepSpec | None:
    if not header.sweep:
        return None
    example = _sweep_example(header)
    try:
        spec = _read_sweep(header, example)
        check_sweep(spec, example)
    except SpecError as err:
        if err.line is not None:
            raise
        # A rule about the whole sweep ("sweep": it has no parameter) names its first line.
        lines = {key: src.line for key, (_, src) in header.sweep.items()}
        line = lines.get(err.field or "", min(lines.values()))
        raise SpecError(str(err), line=line, field=err.field) from None
    return spec


def _read_sweep(header: _Header, example: Example) -> SweepSpec:
    def setting(key: str, sample: str, convert: Callable[[str], Any]) -> Any:
        if key not in header.sweep:
            return None
        raw, src = header.sweep[key]
        return _convert(key, raw, _Setting(key, key, sample, convert), src)

    params = tuple(
        Param(key[len("sweep.") :], parse_space(key[len("sweep.") :], raw, example))
        for key, (raw, _) in header.sweep.items()
        if key.startswith("sweep.")
    )
    objective, stop = setting("objective", "loss:min", str), setting("earlyStop", "median:3", str)
    parallel = setting("parallel", str(DEFAULT_PARALLEL), _count)
    return SweepSpec(
        params,
        search=setting("search", "random", _choice(SEARCHES)) or default_search(params),
        trials=setting("trials", "10", _count),
        parallel=DEFAULT_PARALLEL if parallel is None else parallel,
        objective=None if objective is None else parse_objective(objective, example),
        early_stop=None if stop is None else parse_early_stop(stop, example),
        seed=setting("seed", "7", _seed),
    )


def _sweep_example(header: _Header) -> Example:
    """How the user would write a sweep setting: with a flag where they used flags."""
    flags = {key: src.from_flag for key, (_, src) in header.sweep.items()}
    first = next(iter(flags.values()))

    def example(key: str, value: str) -> str:
        if not flags.get(key, first):
            return f"%{key}={value}"
        if key.startswith("sweep."):
            return f"--sweep {key[len('sweep.') :]}={value}"
        return f"{_flag_names(key)[0]} {value}"

    return example


def _roles(header: _Header, framework: str) -> dict[str, Any]:
    fw = FRAMEWORKS[framework]
    for role, line in header.role_lines.items():
        if role not in fw.role_names:
            raise SpecError(
                f"{framework} has no role {role!r}; its roles are {', '.join(fw.role_names)}",
                line=line,
                field=f"roles.{role}",
            )
    if header.counts:
        counts = {role: header.counts[role] for role in fw.role_names if role in header.counts}
    elif header.resources:
        # Resources for every role, no counts: the framework's default roles get them.
        counts = {name: spec.replicas for name, spec in default_roles(framework).items()}
    else:
        return {}
    for role, line in header.role_lines.items():
        if role not in counts:
            raise SpecError(
                f"{role} resources are set but the job has no {role} replicas; add %{role}=N "
                f"(or --{role} N)",
                line=line,
                field=f"roles.{role}",
            )
    roles: dict[str, Any] = {}
    every_role = header.resources.get(None, {})
    for role, count in counts.items():
        resources = {**every_role, **header.resources.get(role, {})}
        roles[role] = {"replicas": count, **({"resources": resources} if resources else {})}
        lines = {**header.resource_lines.get(None, {}), **header.resource_lines.get(role, {})}
        for name in resources:
            header.field_lines[f"roles.{role}.{name}"] = lines[name]
    return roles


# ---------------------------------------------------------------------------------------------
# Cell -> JobSpec


def spec_from_cell(
    cell: str, overrides: dict[str, Any] | None = None, limits: Limits | None = None
) -> tuple[JobSpec, list[str]]:
    """The validated spec a cell asks for, and the working-directory files it names.

    `overrides` (a form's or the CLI's choices, in JobSpec.from_dict's shape) win over the
    header; "roles" and "env" merge per role and per variable. Errors in a value that came from
    a header line carry that line's number.
    """
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, dict):
        raise SpecError("overrides must be an object in the job spec's shape")
    limits = limits or Limits()
    if isinstance(cell, str) and len(cell) > limits.max_payload_bytes:
        raise LimitExceeded(
            f"the cell is {len(cell):,} characters, over the payload limit of "
            f"{limits.max_payload_bytes:,} bytes; ship large data through a volume"
        )
    fallback = overrides.get("framework")
    if fallback is not None and not isinstance(fallback, str):
        raise SpecError(
            f"framework must be a string; write one of {', '.join(FRAMEWORKS)}", field="framework"
        )
    parsed = _parse(cell, fallback)
    fields = _merge({**parsed.spec_fields, "code": parsed.code}, overrides)
    if "framework" not in fields:
        raise SpecError(
            "the cell does not say how to run it; start it with %framework=pytorch "
            "(or %%distrun --framework pytorch) and, say, %worker=2",
            line=1,
            field="framework",
        )
    lines = _header_lines(parsed.field_lines, overrides)
    try:
        spec = JobSpec.from_dict(fields, limits)
    except SpecError as err:
        line = _line_of(err.field, lines)
        if err.line is None and line is not None:
            raise SpecError(str(err), line=line, field=err.field) from err
        raise
    return spec, parsed.file_refs


def header_line(cell: str, overrides: dict[str, Any] | None, spec_field: str | None) -> int | None:
    """The header line of `cell` that set `spec_field` ("roles.worker.resources.gpu"), for an
    error an engine found after the cell parsed; None when no header line set it."""
    try:
        parsed = _parse(cell, (overrides or {}).get("framework"))
    except SpecError:
        return None
    return _line_of(spec_field, _header_lines(parsed.field_lines, overrides or {}))


def _merge(fields: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(fields)
    for key, value in overrides.items():
        old = merged.get(key)
        if key == "env" and isinstance(old, dict) and isinstance(value, dict):
            merged[key] = {**old, **value}
        elif key == "roles" and isinstance(old, dict) and isinstance(value, dict):
            merged[key] = _merge_roles(old, value)
        else:
            merged[key] = value
    return merged


def _merge_roles(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    roles = dict(old)
    for name, role in new.items():
        before = roles.get(name)
        if isinstance(before, dict) and isinstance(role, dict):
            resources = before.get("resources")
            merged = {**before, **role}
            if isinstance(resources, dict) and isinstance(role.get("resources"), dict):
                merged["resources"] = {**resources, **role["resources"]}
            roles[name] = merged
        else:
            roles[name] = role
    return roles


def _header_lines(field_lines: dict[str, int], overrides: Mapping[str, Any]) -> dict[str, int]:
    """The header lines still responsible for a field after `overrides` took their share."""
    lines = dict(field_lines)
    for key in overrides:
        if key != "roles":
            lines.pop(key, None)
    roles = overrides.get("roles")
    for name, role in roles.items() if isinstance(roles, dict) else ():
        if not isinstance(role, dict):
            lines.pop(f"roles.{name}", None)
            continue
        if "replicas" in role:
            lines.pop(f"roles.{name}", None)
        resources = role.get("resources")
        for resource in resources if isinstance(resources, dict) else ():
            lines.pop(f"roles.{name}.{resource}", None)
    return lines


def _line_of(spec_field: str | None, lines: dict[str, int]) -> int | None:
    if spec_field is None:
        return None
    # JobSpec names role fields "roles.worker.replicas", "roles.worker.cpu" and
    # "roles.worker.resources.gpu"; the header records "roles.worker" and "roles.worker.gpu".
    name = spec_field.replace(".resources.", ".").removesuffix(".replicas")
    return lines.get(name)


# ---------------------------------------------------------------------------------------------
# Fields -> header text


_RENDER_ORDER = (
    "framework",
    "name",
    "engine",
    "namespace",
    "image",
    "roles",
    "restart_policy",
    "backoff_limit",
    "restart",
    "max_restarts",
    "elastic",
    "checkpoint_volume",
    "resume_from",
    "active_deadline_seconds",
    "startup_timeout_seconds",
    "clean_pod_policy",
    "ttl_seconds_after_finished",
    "queue",
    "priority_class",
    "gpu_fallback",
    "env",
)
_SETTING_BY_FIELD = {s.field: s for s in _SCALARS.values()}


def render_header(
    spec_fields: Mapping[str, Any], file_refs: Sequence[str] = (), sweep: SweepSpec | None = None
) -> str:
    """The header, in ciao's syntax, that `parse_cell` reads back as `spec_fields`/`file_refs`
    (and as `sweep`, given one).

    Every value is checked the way the parser checks it, so the text always parses back; a
    value a header cannot express (a line break in an env value) raises SpecError. An env value
    with spaces at either end goes on a ``%%distrun --env`` first line, quoted. "code" is
    ignored; the keys of "files" are named like `file_refs`. Ends with a newline.
    """
    unknown = sorted(set(spec_fields) - {*_RENDER_ORDER, "code", "files"})
    if unknown:
        raise SpecError(f"cannot render unknown field(s) {', '.join(unknown)}", field=unknown[0])
    lines: list[str] = []
    quoted_env: list[str] = []
    for name in _RENDER_ORDER:
        value = spec_fields.get(name)
        if value is None:
            continue
        if name == "roles":
            lines += _render_roles(value)
        elif name == "env":
            lines += _render_env(value, quoted_env)
        else:
            setting = _SETTING_BY_FIELD[name]
            text = str(value).lower() if name == "clean_pod_policy" else str(value)
            _check_renders(setting, value, text)
            lines.append(f"%{setting.key}={text}")
    shipped = spec_fields.get("files") or {}
    if not isinstance(shipped, Mapping):
        raise SpecError("files must be an object of relative path: base64 content", field="files")
    files = [*file_refs, *shipped]
    if files:
        lines.append(f"%files={_render_files(files)}")
    if sweep is not None:
        lines += _render_sweep(sweep)
    if quoted_env:
        lines.insert(0, "%%distrun " + " ".join(quoted_env))
    return "".join(line + "\n" for line in lines)


def _check_renders(setting: _Setting, value: Any, text: str) -> None:
    try:
        ok = setting.convert(text) == value and text == text.strip(" \t")
    except _BadValue:
        ok = False
    if not ok:
        raise SpecError(
            f"{setting.field} {value!r} cannot be written in a header; "
            f"write a value like {setting.example}",
            field=setting.field,
        )


def _render_roles(roles: Any) -> list[str]:
    if not isinstance(roles, Mapping) or not set(roles) <= set(ROLE_NAMES):
        raise SpecError("roles must map role names to {replicas, resources}", field="roles")
    lines = []
    for name in sorted(roles, key=ROLE_NAMES.index):
        role = roles[name]
        resources = role.get("resources") or {} if isinstance(role, Mapping) else None
        if (
            not isinstance(role, Mapping)
            or not set(role) <= {"replicas", "resources"}
            or not isinstance(resources, Mapping)
            or not set(resources) <= {_RESOURCE_FIELD.get(r, r) for r in RESOURCE_NAMES}
        ):
            raise SpecError(f"cannot render role {name!r}", field=f"roles.{name}")
        segments = []
        for resource in RESOURCE_NAMES:
            spec_field = _RESOURCE_FIELD.get(resource, resource)
            value = resources.get(spec_field)
            if value is None:
                continue
            example, convert = _RESOURCES[resource]
            setting = _Setting(f"{name}.{resource}", f"roles.{name}.{spec_field}", example, convert)
            _check_renders(setting, value, str(value))
            segments.append(f"%{resource}={value}")
        if "replicas" in role:
            count = _Setting(name, f"roles.{name}", "2", _count)
            _check_renders(count, role["replicas"], str(role["replicas"]))
            lines.append(";".join([f"%{name}={role['replicas']}", *segments]))
        else:
            lines += [f"%{name}.{segment[1:]}" for segment in segments]
    return lines


def _render_env(env: Any, quoted: list[str]) -> list[str]:
    if not isinstance(env, Mapping):
        raise SpecError("env must be an object of NAME: value strings", field="env")
    lines = []
    for name, value in env.items():
        ok = isinstance(name, str) and ENV_NAME_RE.fullmatch(name) and isinstance(value, str)
        if not ok or any(c in value for c in (*_LINE_BREAKS, "\x00")):
            raise SpecError(f"env {name!r} cannot be written in a header", field="env")
        if value != value.strip(" \t"):
            quoted.append(f"--env {shlex.quote(f'{name}={value}')}")
        else:
            lines.append(f"%env={name}={value}")
    return lines


def _render_sweep(sweep: SweepSpec) -> list[str]:
    check_sweep(sweep)
    settings = {
        "search": sweep.search,
        "trials": sweep.trials,
        "parallel": None if sweep.parallel == DEFAULT_PARALLEL else sweep.parallel,
        "objective": None if sweep.objective is None else format_objective(sweep.objective),
        "earlyStop": None if sweep.early_stop is None else format_early_stop(sweep.early_stop),
        "seed": sweep.seed,
    }
    return [f"%sweep.{p.name}={format_space(p.space)}" for p in sweep.params] + [
        f"%{key}={value}" for key, value in settings.items() if value is not None
    ]


def _render_files(paths: Sequence[str]) -> str:
    if len(set(paths)) != len(paths):
        raise SpecError("a file is named twice", field="files")
    for path in paths:
        check_relative_path(path)
        if "," in path or path != path.strip(" \t") or any(c in path for c in _LINE_BREAKS):
            raise SpecError(f"file path {path!r} cannot be named in a header", field="files")
    return ",".join(paths)


# ---------------------------------------------------------------------------------------------
# Does the body need IPython?

_IPYTHON_LINE = re.compile(
    r"""[ \t]*(?:
        [%!]                                                    # %magic, %%cell, !shell
      | [A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*[ \t]*=[ \t]*[%!]  # x = !ls, a, b = %sx
      | \?+[A-Za-z_]                                            # ?obj
      | [A-Za-z_][\w.]*\?+[ \t]*$                               # obj?
    )""",
    re.VERBOSE,
)


def needs_ipython(code: str) -> bool:
    """True when the body is not plain Python but IPython would run it: line or cell magics,
    shell escapes (``!cmd``, ``x = !cmd``), help syntax (``obj?``) or top-level ``await``.

    Plain Python that parses is never sent to IPython, so a ``%`` line inside a string does not
    count; code that is simply broken is left to Python, which reports the right line.
    """
    if _parses(code, 0):
        return False
    if any(_IPYTHON_LINE.match(line) for line in code.split("\n")):
        return True
    return _parses(code, ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def _parses(code: str, flags: int) -> bool:
    # A full compile, not just ast.parse: "await" outside a function is only caught there.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarnings belong to the run, not to this check
        try:
            compile(code, "<cell>", "exec", flags=flags, dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            return False
    return True
