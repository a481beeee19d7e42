"""Every distrun kernel loads the distrun magics (%%distrun and ciao-style cells).

Mounted at /etc/ipython/ipython_kernel_config.py in kernel pods (a directory IPython reads
system-wide configuration from); the local test kernel finds it under its venv's etc/ipython.
"""

c = get_config()  # type: ignore[name-defined]  # noqa: F821  (injected by traitlets)
c.InteractiveShellApp.extensions = ["distrun.kernel_magic"]
