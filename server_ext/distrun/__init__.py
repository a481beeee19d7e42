"""distrun: run a notebook cell as a distributed training job."""

__version__ = "0.1.0"


def _jupyter_server_extension_points() -> list[dict[str, object]]:
    from .app import DistrunApp

    return [{"module": "distrun", "app": DistrunApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "@distrun/labextension"}]
