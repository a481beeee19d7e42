"""The ConfigMap that carries a job's code and shipped files into every replica: no image build.

Keys are opaque (`file-0`, ...) because ConfigMap keys cannot hold '/'; the volume's `items`
map each key to its path under `CODE_DIR`. Text goes into `data`, anything that is not UTF-8
into `binaryData`. The API server refuses a ConfigMap over 1 MiB, so we refuse first, clearly.
"""

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distrun.core.entrypoint import code_file
from distrun.core.errors import LimitExceeded, SpecError
from distrun.core.spec import JobSpec, check_relative_path
from distrun.engines.kube.manifests.common import (
    ANNOTATION_OWNER,
    CODE_DIR,
    CODE_VOLUME,
    Target,
    job_labels,
)

CONFIGMAP_MAX_BYTES = 1024 * 1024  # Kubernetes' limit on a ConfigMap's data + binaryData
SUPPORT_DIR = ".distrun"  # our own files beside the code: launcher, replica table, hostfile
LAUNCHER_PATH = f"{CODE_DIR}/{SUPPORT_DIR}/launch.py"
LAUNCHER_SOURCE = (Path(__file__).parent / "launcher.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class CodeBundle:
    configmap: dict[str, Any]
    volume: dict[str, Any]
    mount: dict[str, Any]
    entrypoint: str  # "main.py" or "main.ipy", relative to CODE_DIR


def code_bundle(spec: JobSpec, target: Target, support: dict[str, str] | None = None) -> CodeBundle:
    """The ConfigMap named after the job, holding the code, the shipped files and `support`
    (our own text files, by name, placed under `.distrun/`)."""
    entrypoint, code = code_file(spec.code)
    data: dict[str, str] = {"code": code}
    binary: dict[str, str] = {}
    items = [{"key": "code", "path": entrypoint}]
    for index, (path, content) in enumerate(sorted(spec.files.items())):
        check_relative_path(path)
        if path == entrypoint or path.split("/")[0] == SUPPORT_DIR:
            raise SpecError(
                f"a shipped file cannot be named {path}; {entrypoint} and {SUPPORT_DIR}/ are "
                "distrun's own",
                field="files",
            )
        key = f"file-{index}"
        raw = _decode(path, content)
        try:
            data[key] = raw.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = content
        items.append({"key": key, "path": path})
    for name, text in sorted((support or {}).items()):
        key = f"distrun-{name.replace('/', '-')}"
        data[key] = text
        items.append({"key": key, "path": f"{SUPPORT_DIR}/{name}"})
    _check_size(data, binary)
    configmap: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": target.job_id,
            "namespace": target.namespace,
            "labels": job_labels(target.job_id, target.owner),
            "annotations": {ANNOTATION_OWNER: target.owner},
        },
        "data": data,
        "immutable": False,  # the log ledger lives in its annotations (see engines.kube_logs)
    }
    if binary:
        configmap["binaryData"] = binary
    volume = {"name": CODE_VOLUME, "configMap": {"name": target.job_id, "items": items}}
    mount = {"name": CODE_VOLUME, "mountPath": CODE_DIR, "readOnly": True}
    return CodeBundle(configmap, volume, mount, entrypoint)


def configmap_bytes(data: dict[str, str], binary: dict[str, str]) -> int:
    """The size the API server counts: text as UTF-8 bytes, binary data decoded."""
    return sum(len(value.encode()) for value in data.values()) + sum(
        len(base64.b64decode(value)) for value in binary.values()
    )


def _check_size(data: dict[str, str], binary: dict[str, str]) -> None:
    size = configmap_bytes(data, binary)
    if size > CONFIGMAP_MAX_BYTES:
        raise LimitExceeded(
            f"the code and shipped files come to {size:,} bytes, over the {CONFIGMAP_MAX_BYTES:,} "
            f"bytes (1 MiB) a Kubernetes ConfigMap can hold, by {size - CONFIGMAP_MAX_BYTES:,}; "
            "ship large files through a volume or object storage and read them from the code"
        )


def _decode(path: str, content: str) -> bytes:
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise SpecError(f"file {path!r} is not valid base64", field="files") from None
