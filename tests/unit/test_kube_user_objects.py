"""Whatever a user writes into her own objects, distrun reads it without failing: the job
ConfigMap's log ledger and anchors, the job's spec annotation, and the pods' labels and
annotations that name a replica. Malformed state is left out (and counted again) or shown as
a job that says why, never an exception that would make a request a 500."""

import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from distrun.core.errors import Conflict
from distrun.core.spec import JobSpec
from distrun.engines.kube.anchors import (
    ANCHORS_ANNOTATION,
    MAX_INDEX,
    Anchor,
    FileScan,
    read_book,
    write_book,
)
from distrun.engines.kube.engine import stored_spec
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.logs import (
    LEDGER_ANNOTATION,
    MAX_LEDGER_LINES,
    base_seq,
    read_ledger,
    recorded_lines,
)
from distrun.engines.kube.manifests.common import ANNOTATION_SPEC
from distrun.engines.kube.trainer import TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine

MANY = settings(deadline=None, max_examples=150)
JSON_SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.integers(min_value=2**60, max_value=2**70)
)  # fmt: skip
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=25,
)
# The shapes distrun writes, with every part open to change: near misses reach deepest.
LEDGER_ENTRY = st.lists(st.text(max_size=6) | JSON_SCALARS, min_size=0, max_size=3)
LEDGERS = st.dictionaries(st.sampled_from(["worker-0", "master-0", "x"]), st.lists(LEDGER_ENTRY))
ANCHOR = st.lists(JSON_SCALARS, min_size=5, max_size=5)
BOOKS = st.dictionaries(
    st.sampled_from(["worker-0", "x"]),
    st.dictionaries(st.sampled_from(["u:0", "u:1"]), st.lists(ANCHOR | JSON, max_size=4)) | JSON,
)
ANNOTATION_TEXT = (
    st.text(max_size=40)
    | JSON.map(json.dumps)
    | LEDGERS.map(json.dumps)
    | BOOKS.map(json.dumps)
    | st.just("[" * 100_000)  # within the 256 KiB annotations may hold
    | st.just('{"worker-0": [["u:0", ' + "9" * 5000 + "]]}")
)


def configmap(annotations: Any) -> dict[str, Any]:
    return {"metadata": {"name": "job", "annotations": annotations}}


@MANY
@given(ANNOTATION_TEXT)
@example('{"worker-0": [["u:0", "12"]]}')  # a count that is not a number
@example('{"worker-0": [["u:0", 1, 2]], "master-0": {"u:0": 3}}')  # wrong shapes
@example('{"worker-0": [["u:0", -5], ["u:1", true], ["u:2", 1.5]]}')
def test_any_ledger_annotation_reads_as_well_formed_counts(text: str) -> None:
    ledger = read_ledger(configmap({LEDGER_ANNOTATION: text}))
    for replica, entries in ledger.items():
        for key, lines in entries:
            assert isinstance(key, str)
            assert type(lines) is int and 0 <= lines <= MAX_LEDGER_LINES
        for key, _ in entries:
            assert base_seq(ledger, replica, key) >= 0
            assert recorded_lines(ledger, replica, key) is not None
    assert base_seq(ledger, "worker-0", "other") >= 0
    json.dumps(ledger)  # what the next write stores again


def test_a_malformed_ledger_keeps_its_good_entries_and_drops_the_rest() -> None:
    text = json.dumps({"worker-0": [["a:0", 10], ["b:0", "12"], ["c:0"], ["d:0", 7]], "w": 3})
    ledger = read_ledger(configmap({LEDGER_ANNOTATION: text}))
    assert ledger == {"worker-0": [["a:0", 10], ["d:0", 7]]}
    assert base_seq(ledger, "worker-0", "d:0") == 10
    assert recorded_lines(ledger, "worker-0", "b:0") is None  # counted again from its log
    for annotations in (None, {}, {LEDGER_ANNOTATION: "not json"}, {LEDGER_ANNOTATION: "[1]"}):
        assert read_ledger(configmap(annotations)) == {}


@MANY
@given(ANNOTATION_TEXT | BOOKS.map(json.dumps))
@example('{"worker-0": {"u:0": [[-3, "t", 0, 0, 0], [true, "t", 0, 0, 0], [1, "t", 0, 0, 2]]}}')
def test_any_anchors_annotation_reads_as_anchors_distrun_could_have_written(text: str) -> None:
    book = read_book(text)
    for instances in book.values():
        for anchors in instances.values():
            for anchor in anchors:
                index, (stamp, run, crc) = anchor.index, anchor.key
                assert type(index) is int and 0 <= index <= MAX_INDEX
                assert type(run) is int and run >= 0 and type(crc) is int and 0 <= crc < 2**32
                assert isinstance(stamp, str) and isinstance(anchor.claimed, bool)
            scan = FileScan(anchors)  # a file whose lines are anything: never before 0
            for raw in (b"2026-01-01T00:00:00Z a", b"", b"x y"):
                scan.see(raw)
            assert scan.start is None or scan.start >= 0
    assert read_book(write_book(book)) == book
    read_book(json.dumps({ANCHORS_ANNOTATION: text}))


def test_an_anchor_below_the_lines_already_read_is_not_this_files() -> None:
    lines = [b"2026-01-01T00:00:00Z a", b"2026-01-01T00:00:01Z b"]
    scan = FileScan([Anchor(0, ("2026-01-01T00:00:01Z", 0, 0))])
    from distrun.engines.kube.anchors import LineKeys

    keys = LineKeys()
    first, second = keys.next(lines[0]), keys.next(lines[1])
    scan = FileScan([Anchor(0, second)])
    assert not scan.see(lines[0]) and not scan.see(lines[1]) and scan.start is None
    assert FileScan([Anchor(5, first)]).see(lines[0])


def spec() -> JobSpec:
    roles = {"master": {"replicas": 1}, "worker": {"replicas": 2}}
    return JobSpec.from_dict({"framework": "pytorch", "code": "x", "roles": roles})


LABEL_VALUES = st.text(max_size=12) | st.sampled_from(["0", "1", "²", "١", "9" * 5000, "-1"])
POD_METADATA = st.fixed_dictionaries(
    {"name": st.just("p")},
    optional={"labels": st.dictionaries(st.text(max_size=40), LABEL_VALUES) | st.none(),
              "annotations": st.dictionaries(st.text(max_size=40), LABEL_VALUES) | st.none()},
)  # fmt: skip
KEYS = [
    "training.kubeflow.org/replica-type", "training.kubeflow.org/replica-index",
    "batch.kubernetes.io/job-completion-index", "volcano.sh/task-spec",
    "volcano.sh/task-index",
]  # fmt: skip


@MANY
@given(POD_METADATA, st.dictionaries(st.sampled_from(KEYS), LABEL_VALUES))
@example({"name": "p", "annotations": {}}, {"batch.kubernetes.io/job-completion-index": "²"})
def test_any_pod_labels_name_a_replica_of_the_job_or_none(
    metadata: dict[str, Any], known: dict[str, str]
) -> None:
    job = spec()
    for where in ("labels", "annotations"):
        pod = {"metadata": {**metadata, where: {**(metadata.get(where) or {}), **known}}}
        for engine in (KubeflowEngine, TrainerEngine, VolcanoEngine):
            name = engine.replica_of(engine.__new__(engine), pod, job)
            assert name is None or name in job.replica_names()


@MANY
@given(
    ANNOTATION_TEXT
    | st.dictionaries(st.sampled_from(["code", "roles", "env", "files", "name"]), JSON).map(
        lambda d: json.dumps({"framework": "pytorch", **d})
    )
)
def test_any_spec_annotation_is_a_valid_spec_or_a_conflict_that_says_why(text: str) -> None:
    obj = {"metadata": {"name": "job", "annotations": {ANNOTATION_SPEC: text}}}
    try:
        assert isinstance(stored_spec(obj), JobSpec)
    except Conflict as error:
        assert "carries no valid distrun spec" in str(error) and len(str(error)) < 400
