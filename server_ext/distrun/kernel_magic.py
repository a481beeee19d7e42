"""`%load_ext distrun.kernel_magic`: the public name of the IPython extension, which lives in
distrun.client.kernel_magic."""

from distrun.client.kernel_magic import (
    distrun_cell_magic,
    load_ipython_extension,
    run_cell,
    unload_ipython_extension,
)

__all__ = ["distrun_cell_magic", "load_ipython_extension", "run_cell", "unload_ipython_extension"]
