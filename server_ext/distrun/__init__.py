"""distrun: run a notebook cell as a distributed training job."""


def __getattr__(name: str) -> object:
    # Looked up on use only (no typing either): the supervisor imports this package and must
    # start fast.
    if name == "params":  # a sweep trial's parameters: distrun.params(lr=0.01)
        from distrun.trial import params

        return params
    if name != "__version__":
        raise AttributeError(f"module 'distrun' has no attribute {name!r}")
    from distrun.core.version import distrun_version

    return distrun_version()


def _jupyter_server_extension_points() -> list[dict[str, object]]:
    from distrun.server.app import DistrunApp

    return [{"module": "distrun", "app": DistrunApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "@distrun/labextension"}]
