"""distrun's version: package.json's, through pyproject.toml (one version for the Python
package, the extension, the API document and the Helm chart)."""

from importlib.metadata import PackageNotFoundError, version


def distrun_version() -> str:
    try:
        return version("distrun")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"
