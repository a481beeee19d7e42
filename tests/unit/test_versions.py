"""One version: package.json's, which the Python package, the API document, the Helm chart
and the images it deploys all carry."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

import distrun
from distrun.engines.local import capabilities

ROOT = Path(__file__).resolve().parents[2]
VERSION = json.loads((ROOT / "package.json").read_text())["version"]


def test_the_python_package_carries_package_jsons_version() -> None:
    assert distrun.__version__ == VERSION


def test_the_cli_prints_it() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "distrun", "--version"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert printed.returncode == 0, printed.stderr
    version, local_engine = printed.stdout.strip().split("\n")
    assert version == f"distrun {VERSION}"
    # and which path each capability of the local engine takes here
    paths = capabilities.detect().paths()
    assert local_engine == "local engine: " + ", ".join(f"{k} {v}" for k, v in paths.items())


def test_the_api_document_the_chart_and_its_images_carry_it() -> None:
    api = yaml.safe_load((ROOT / "server_ext/distrun/server/openapi.yaml").read_text())
    chart = yaml.safe_load((ROOT / "helm/distrun/Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "helm/distrun/values.yaml").read_text())
    hub = yaml.safe_load((ROOT / "helm/jupyterhub-values.yaml").read_text())
    assert api["info"]["version"] == VERSION
    assert chart["appVersion"] == VERSION
    assert values["kernels"]["image"].rsplit(":", 1)[1] == VERSION
    assert hub["singleuser"]["image"]["tag"] == VERSION
