"""Classic attacks by hand, through the REST API, on the real local engine.

Shell metacharacters in every string a job carries arrive verbatim and are never run by a shell
(each payload would create its own marker file); traversal in shipped file names and `%files=`
refs is a 400 naming the file; names and labels that could inject into a manifest or are not
Kubernetes names are a 400 naming the field.
"""

import base64
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import Api

SHELL_TEMPLATES = [
    "$(touch {marker})",
    "`touch {marker}`",
    "; touch {marker}",
    "| touch {marker}",
    "&& touch {marker}",
    "' ; touch {marker} ; '",
    '" ; touch {marker} ; "',
    "\ntouch {marker}\n",
]
INJECTIONS = [
    "job\n",
    "job\nkind: Secret",
    "job\r\nx: y",
    'job"',
    "job'",
    "{{ .Values.secret }}",
    "job: x",
    "job #x",
    "$(touch x)",
    "`id`",
    "job;id",
]
REPORT = """\
import json, os
files = sorted(
    os.path.relpath(os.path.join(root, name))
    for root, _, names in os.walk(".") for name in names if name not in ("main.py", "main.ipy")
)
env = {{key: value for key, value in os.environ.items() if key.startswith("PAYLOAD_")}}
# A comment with {comment}
text = {text!r}
print("REPORT " + json.dumps({{"env": env, "files": files, "text": text}}))
"""


class Markers:
    """One marker file per payload, so a failure says which payload in which field ran."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.made: dict[str, Path] = {}

    def payloads(self, field: str) -> list[str]:
        result = []
        for number, template in enumerate(SHELL_TEMPLATES):
            marker = self.directory / f"pwned-{field}-{number}-{uuid.uuid4().hex[:8]}"
            self.made[f"{field} {template!r}"] = marker
            result.append(template.format(marker=marker))
        return result

    def fired(self) -> list[str]:
        return [where for where, marker in self.made.items() if marker.exists()]


def encoded(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def report_of(api: Api, job: dict[str, Any]) -> dict[str, Any]:
    finished = await api.finished(job["id"])
    log = await api.logs(job["id"])
    assert finished["state"] == "succeeded", log
    lines = [line for line in log.splitlines() if line.startswith("REPORT ")]
    assert len(lines) == len(job["replicas"]) and len(set(lines)) == 1, log  # one per replica
    result: dict[str, Any] = json.loads(lines[0].removeprefix("REPORT "))
    return result


def test_every_payload_creates_its_marker_when_a_shell_does_interpolate_it(tmp_path: Path):
    """The markers are a real detector: each payload fires in some naive shell command line
    (bare, in single quotes, in double quotes), the mistakes these tests would catch."""
    markers = Markers(tmp_path)
    for payload in markers.payloads("shell"):
        for line in (f"echo {payload}", f"echo '{payload}'", f'echo "{payload}"'):
            subprocess.run(["/bin/sh", "-c", line], capture_output=True, check=False)
    assert sorted(markers.fired()) == sorted(markers.made)


async def test_shell_metacharacters_in_env_files_and_code_arrive_verbatim_and_never_run(
    api: Api, tmp_path: Path
):
    markers = Markers(tmp_path)
    env = {f"PAYLOAD_{i}": value for i, value in enumerate(markers.payloads("env"))}
    names = [f"{payload}.txt" for payload in markers.payloads("file-name")]
    contents = markers.payloads("file-content")
    code_text, code_comment = markers.payloads("code-string"), markers.payloads("code-comment")
    spec = {
        "framework": "generic",
        "roles": {"worker": {"replicas": 2}},
        "env": env,
        "files": {name: encoded(content) for name, content in zip(names, contents, strict=True)},
        "code": REPORT.format(comment=" ".join(code_comment).replace("\n", " "), text=code_text),
    }
    job = await api.submit(spec)
    report = await report_of(api, job)
    assert report["env"] == env
    assert report["files"] == sorted(names)
    assert report["text"] == code_text
    assert markers.fired() == []


async def test_shell_metacharacters_in_a_cells_header_and_files_never_run(
    api: Api, tmp_path: Path, jp_root_dir: Path
):
    markers = Markers(tmp_path)
    values = [value for value in markers.payloads("header-env") if "\n" not in value]
    names = [f"{payload}.py" for payload in markers.payloads("header-file") if "\n" not in payload]
    for name in names:
        (jp_root_dir / "nb" / name).parent.mkdir(parents=True, exist_ok=True)
        (jp_root_dir / "nb" / name).write_text("# shipped\n")
    header = [f"%env=PAYLOAD_{i}={value}" for i, value in enumerate(values)]
    header += ["%framework=generic", f"%files={','.join(names)}"]
    code = REPORT.format(comment="", text="")
    reply = await api.call("POST", "jobs", {"cell": "\n".join(header) + "\n" + code, "cwd": "nb"})
    assert reply.code == 201, reply.body
    report = await report_of(api, reply.json)
    assert report["env"] == {f"PAYLOAD_{i}": value for i, value in enumerate(values)}
    assert report["files"] == sorted(names)
    assert markers.fired() == []


@pytest.mark.parametrize(
    "field",
    ["name", "image", "namespace", "queue", "priority_class", "engine", "env", "cpu", "memory"],
)
async def test_injection_into_names_labels_and_quantities_is_a_400_naming_the_field(
    api: Api, field: str
):
    for value in INJECTIONS:
        spec: dict[str, Any] = {"framework": "generic", "code": "print(1)"}
        expected = field
        if field == "env":
            spec["env"] = {value: "x"}
        elif field in ("cpu", "memory"):
            resources = {field: value}
            spec["roles"] = {"worker": {"replicas": 1, "resources": resources}}
            expected = f"roles.worker.{field}"
        else:
            spec[field] = value
        reply = await api.call("POST", "jobs", {"spec": spec})
        assert reply.code == 400, (field, value, reply.body)
        assert reply.json["field"] == expected, (field, value, reply.json)
    assert (await api.call("GET", "jobs")).json == {"jobs": []}


@pytest.mark.parametrize(
    "name", ["UPPER", "-lead", "trail-", "a" * 33, "a.b", "a_b", "ünï", "1abc", "", "a b"]
)
async def test_a_name_that_is_not_a_kubernetes_name_is_a_400_in_a_spec_and_in_a_cell(
    api: Api, name: str
):
    reply = await api.call(
        "POST", "jobs", {"spec": {"framework": "generic", "code": "", "name": name}}
    )
    assert reply.code == 400 and reply.json["field"] == "name", reply.body
    cell = f"%framework=generic\n%name={name}\nprint(1)\n"
    reply = await api.call("POST", "jobs", {"cell": cell})
    assert reply.code == 400 and reply.json["field"] == "name", reply.body
    assert reply.json["line"] == 2


@pytest.mark.parametrize(
    "path",
    [
        "../../../../escaped",
        "/tmp/escaped",
        "a/../../escaped",
        "..",
        "./a",
        "a//b",
        "..\\x",
        "a\x00b",
        "",
    ],
)
async def test_a_shipped_file_name_leaving_the_working_directory_is_a_400_naming_it(
    api: Api, path: str, tmp_path: Path
):
    spec = {"framework": "generic", "code": "", "files": {path: encoded("x")}}
    reply = await api.call("POST", "jobs", {"spec": spec})
    assert reply.code == 400, reply.body
    assert reply.json["field"] == "files"
    assert repr(path) in reply.json["message"]
    assert not list(tmp_path.rglob("escaped"))


@pytest.fixture
def notebook_dir(jp_root_dir: Path, tmp_path: Path) -> Path:
    """root_dir/nb, and outside the root a secret, reachable by symlinks from inside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n")
    nb = jp_root_dir / "nb"
    nb.mkdir(exist_ok=True)
    (nb / "link.txt").symlink_to(outside / "secret.txt")
    (nb / "linkdir").symlink_to(outside)
    return nb


@pytest.mark.parametrize(
    "ref",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "../../outside/secret.txt",
        "link.txt",
        "linkdir/secret.txt",
        "data/../../../outside/secret.txt",
    ],
)
async def test_a_files_ref_leaving_the_root_is_a_400_naming_it(
    api: Api, notebook_dir: Path, ref: str
):
    cell = f"%framework=generic\n%files={ref}\nprint(1)\n"
    reply = await api.call("POST", "jobs", {"cell": cell, "cwd": "nb"})
    assert reply.code == 400, reply.body
    assert reply.json["field"] == "files"
    assert (
        repr(ref) in reply.json["message"] or repr(os.path.normpath(ref)) in reply.json["message"]
    )
    assert b"SECRET" not in reply.body and b"root:" not in reply.body


@pytest.mark.parametrize("cwd", ["..", "../..", "/etc", "nb/../../outside", "nb/linkdir"])
async def test_a_cwd_leaving_the_root_is_a_400(api: Api, notebook_dir: Path, cwd: str):
    cell = "%framework=generic\n%files=secret.txt\nprint(1)\n"
    reply = await api.call("POST", "jobs", {"cell": cell, "cwd": cwd})
    assert reply.code == 400, reply.body
    assert reply.json["field"] == "cwd"
    assert b"SECRET" not in reply.body


async def test_a_hidden_file_named_by_files_is_a_400_and_never_read(api: Api, notebook_dir: Path):
    (notebook_dir / ".env").write_text("AWS_SECRET=SECRET\n")
    cell = "%framework=generic\n%files=.env\nprint(1)\n"
    reply = await api.call("POST", "jobs", {"cell": cell, "cwd": "nb"})
    assert reply.code == 400, reply.body
    assert reply.json["field"] == "files" and "hidden" in reply.json["message"]
    assert b"SECRET" not in reply.body
