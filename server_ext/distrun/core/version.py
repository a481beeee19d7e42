"""distrun's version: package.json's, through pyproject.toml (one version for the Python
package, the extension, the API document and the Helm chart)."""

import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def distrun_version() -> str:
    # Imported from a checkout (its source on the path, or installed editable), package.json
    # itself: installed metadata may be another checkout's, or older than the last version bump.
    package = Path(__file__).resolve().parents[1]
    package_json = package.parents[1] / "package.json"
    if package.parent.name == "server_ext" and package_json.is_file():
        return str(json.loads(package_json.read_text())["version"])
    try:
        return version("distrun")
    except PackageNotFoundError:  # an unpacked copy of the package, never installed
        return "0+unknown"
