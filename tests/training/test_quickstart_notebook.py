"""The quickstart notebook is generated from the example scripts and its job cells parse."""

import importlib.util
from types import ModuleType

import nbformat
import pytest

from distrun.core.header import spec_from_cell
from distrun.engines.protocol import Engine

from .harness import EXAMPLES, assert_succeeded, describe, run_to_end


def load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_notebook", EXAMPLES / "build_notebook.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


builder = load_builder()
NOTEBOOK_PATH = EXAMPLES / "distrun-quickstart.ipynb"


def cell(cell_id: str) -> str:
    notebook = nbformat.read(NOTEBOOK_PATH, as_version=4)
    (source,) = [c.source for c in notebook.cells if c.get("id") == cell_id]
    return str(source)


def test_committed_notebook_equals_a_fresh_build_from_the_scripts() -> None:
    assert NOTEBOOK_PATH.read_text() == builder.render_notebook(), (
        "the notebook is out of date: run `python examples/build_notebook.py` and commit it"
    )


def test_notebook_is_valid_nbformat_4_with_every_job_cell() -> None:
    notebook = nbformat.read(NOTEBOOK_PATH, as_version=4)
    nbformat.validate(notebook)
    assert notebook.nbformat == 4
    code_ids = [c.id for c in notebook.cells if c.cell_type == "code"]
    assert code_ids == ["load-magic", "pytorch-ddp", "tensorflow-multiworker", "generic-hello"]


@pytest.mark.parametrize(("cell_id", "header", "script"), builder.JOB_CELLS)
def test_job_cell_is_its_header_followed_by_its_example_script_verbatim(
    cell_id: str, header: str, script: str
) -> None:
    source = cell(cell_id)
    assert source.startswith(header)
    assert source[len(header) :] == (EXAMPLES / script).read_text().rstrip("\n")


EXPECTED_JOBS = {
    "pytorch-ddp": ("pytorch", {"master": 1, "worker": 2}),
    "tensorflow-multiworker": ("tensorflow", {"worker": 2}),
    "generic-hello": ("generic", {"worker": 3}),
}


@pytest.mark.parametrize(("cell_id", "header", "script"), builder.JOB_CELLS)
def test_job_cell_header_parses_into_the_job_it_asks_for_with_the_script_as_code(
    cell_id: str, header: str, script: str
) -> None:
    job_spec, file_refs = spec_from_cell(cell(cell_id))
    framework, replicas = EXPECTED_JOBS[cell_id]
    assert job_spec.framework == framework
    assert {role: r.replicas for role, r in job_spec.roles.items()} == replicas
    assert file_refs == []
    # Header lines become blank lines, so the code is the script with line numbers kept.
    assert job_spec.code.splitlines() == [""] * header.count("\n") + (
        (EXAMPLES / script).read_text().rstrip("\n").splitlines()
    )


@pytest.mark.integration
async def test_generic_cell_runs_on_the_local_engine_and_each_replica_reports_its_rank(
    local_engine: Engine,
) -> None:
    job_spec, _ = spec_from_cell(cell("generic-hello"))

    job, printed = await run_to_end(local_engine, job_spec, timeout=120)

    assert_succeeded(job, printed)
    assert sorted(printed) == ["worker-0", "worker-1", "worker-2"], describe(printed)
    for rank in range(3):
        (line,) = printed[f"worker-{rank}"]
        assert line.startswith(f"worker-{rank} is rank {rank} of 3 on "), line


# Every example's training, one job after another: over the suite's 300 s once, on a machine
# building the control plane beside two other test workers (a cell may take NotebookClient's 600).
@pytest.mark.timeout(900)
def test_the_notebook_runs_top_to_bottom_in_a_real_kernel(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a newcomer does first: every job cell runs through the kernel magic on the local
    engine and streams every replica's lines into its output."""
    from nbclient import NotebookClient

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path))  # the local engine's state dir
    notebook = nbformat.read(NOTEBOOK_PATH, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    outputs = {
        c.id: "".join(o.get("text", "") for o in c.get("outputs", []))
        for c in notebook.cells
        if c.cell_type == "code"
    }
    for cell_id, (_, roles) in EXPECTED_JOBS.items():
        text = outputs[cell_id]
        for role, count in roles.items():
            for index in range(count):
                assert f"{role}-{index} | " in text, (cell_id, text[-2000:])
        assert "succeeded" in text, (cell_id, text[-2000:])
    shas = {
        line.split("weights_sha=")[1]
        for line in outputs["pytorch-ddp"].splitlines()
        if "weights_sha=" in line
    }
    assert len(shas) == 1  # the three ranks agree on the trained weights
