"""Build `distrun-quickstart.ipynb` from the example scripts, the single source of its code.

    python examples/build_notebook.py

A test checks that the committed notebook equals a fresh build, so edit the scripts (or the text
below) and rebuild; never edit the notebook by hand.
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
NOTEBOOK = HERE / "distrun-quickstart.ipynb"

# Each job cell: (cell id, header, script). The cell is the header followed by the script.
PYTORCH_CELL = ("pytorch-ddp", "%framework=pytorch\n%master=1\n%worker=2\n", "pytorch_ddp.py")
TENSORFLOW_CELL = (
    "tensorflow-multiworker",
    "%%distrun --framework tensorflow --workers 2\n",
    "tensorflow_multiworker.py",
)
GENERIC_CELL = ("generic-hello", "%%distrun --framework generic --workers 3\n", "hello_ranks.py")
JOB_CELLS = (PYTORCH_CELL, TENSORFLOW_CELL, GENERIC_CELL)

INTRO = """\
# distrun quickstart: a notebook cell as a distributed training job

A cell that starts with a **distrun header** runs as a distributed job: one process per replica
(a master and workers, a chief, parameter servers...), started with exactly the environment the
Kubeflow Training Operator gives its pods (`MASTER_ADDR`, `RANK`, `WORLD_SIZE` for PyTorch,
`TF_CONFIG` for TensorFlow, ...). Every replica's output streams into the cell live, prefixed with
its name (`worker-1 | ...`).

By default jobs run on the **local engine**: real processes on the machine running Jupyter, no
cluster needed. The same cell runs unchanged as a `PyTorchJob` or `TFJob` on Kubernetes by adding
`%engine=<name>` (or `--engine <name>`) to its header.

**How to run a job cell:** select it and press *Run distributed* in the notebook toolbar
(`Shift Alt Enter`). In a notebook without the JupyterLab extension, run the next cell once; the
job cells then run with the ordinary *Run* (`Shift Enter`).
"""

LOAD_MAGIC = "%load_ext distrun.kernel_magic"

PYTORCH_INTRO = """\
## PyTorch DDP: one master, two workers

The header uses the syntax of Kubeflow's *ciao* extension: one `%key=value` per line. The code is
what you would put in a `PyTorchJob`: `init_process_group("gloo")` reads the rendezvous from the
environment. Each rank trains on its own shard; DDP averages the gradients, so all three replicas
print the same `weights_sha` at the end.
"""

TENSORFLOW_INTRO = """\
## TensorFlow: MultiWorkerMirroredStrategy on two workers

The `%%distrun` form of the header takes command-line flags (`--workers 2`, `--cpu 2`,
`--memory 4Gi`, `--env KEY=VALUE`...). Each worker reads its task and the cluster from
`TF_CONFIG`; with no chief, worker 0 acts as the chief. TensorFlow takes a while to start.
"""

GENERIC_INTRO = """\
## Any Python: the `generic` framework

No operator conventions, just `RANK`, `WORLD_SIZE` and a rendezvous address (`MASTER_ADDR`,
`MASTER_PORT`) for every replica, enough for any library that brings its own rendezvous.
"""

NEXT_STEPS = """\
## Next

- The **distrun** sidebar lists your jobs: state, replicas, duration; cancel or delete them there.
- From a terminal: `distrun ls`, `distrun logs JOB -f`, `distrun run train.py --framework pytorch \
--workers 2`.
- More header settings: `%cpu=2`, `%memory=4Gi`, `%gpu=1`, `%image=...`, `%env=KEY=VALUE`,
  `%files=data.csv`, `%restartPolicy=OnFailure`, `%backoffLimit=3`, `%deadline=600`.
"""


def job_cell_source(header: str, script: str) -> str:
    return header + (HERE / script).read_text().rstrip("\n")


def build_notebook() -> nbformat.NotebookNode:
    markdown = {
        "pytorch-ddp": PYTORCH_INTRO,
        "tensorflow-multiworker": TENSORFLOW_INTRO,
        "generic-hello": GENERIC_INTRO,
    }
    cells = [
        new_markdown_cell(INTRO.rstrip("\n"), id="intro"),
        new_code_cell(LOAD_MAGIC, id="load-magic"),
    ]
    for cell_id, header, script in JOB_CELLS:
        cells.append(new_markdown_cell(markdown[cell_id].rstrip("\n"), id=f"{cell_id}-intro"))
        cells.append(new_code_cell(job_cell_source(header, script), id=cell_id))
    cells.append(new_markdown_cell(NEXT_STEPS.rstrip("\n"), id="next-steps"))
    metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    notebook = new_notebook(cells=cells, metadata=metadata)
    nbformat.validate(notebook)
    return notebook


def render_notebook() -> str:
    """The notebook file's exact text."""
    return nbformat.writes(build_notebook()) + "\n"


def main() -> None:
    NOTEBOOK.write_text(render_notebook())
    print(f"wrote {NOTEBOOK}")


if __name__ == "__main__":
    main()
