"""The engines' table of API requests (KubeEngine.access, which the chart's roles are checked
against with SubjectAccessReviews in tests/helm/test_chart_cluster.py) kept in sync with the
code: every call the kube engines make through their API client, found in the source, must be
a request some engine declares. A call added without its table entry fails here, not in a
user's cluster with a 403."""

import ast
import importlib
from pathlib import Path

from distrun.engines.kube import client as kube_client
from distrun.engines.kube.engine import JOB_VERBS
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.trainer import TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine

KUBE = Path(kube_client.__file__).parent

# KubeApi method -> the RBAC verb it needs on the resource given as its first argument
VERB_OF = {
    "create": "create",
    "get": "get",
    "get_cluster": "get",
    "list": "list",
    "list_metadata": "list",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
    "watch": "watch",
}
# methods whose resource is fixed by the method itself
FIXED = {
    "list_events": ("list", kube_client.EVENTS, ""),
    "read_log": ("get", kube_client.PODS, "log"),
    "stream_log": ("get", kube_client.PODS, "log"),
}
DISCOVERY = {"served_plurals"}  # a non-resource URL every authenticated user may read


def is_api(node: ast.expr) -> bool:
    """`api`, `self.api`, `ctx.api`: the engines' KubeApi, however it is reached."""
    return (isinstance(node, ast.Name) and node.id == "api") or (
        isinstance(node, ast.Attribute) and node.attr == "api"
    )


def api_calls() -> list[tuple[str, str, int, str, ast.expr | None]]:
    """(module, method, line, verb, resource argument) of every KubeApi call in engines/kube."""
    found = []
    for path in sorted(KUBE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method = node.func.attr
            if not is_api(node.func.value) or method in DISCOVERY:
                continue
            assert method in VERB_OF or method in FIXED, f"{path.name}:{node.lineno} {method}"
            first = node.args[0] if node.args else None
            found.append((path.stem, method, node.lineno, VERB_OF.get(method, ""), first))
    return found


def declared() -> set[tuple[str, str, str, str]]:
    return {
        (a.verb, a.resource.group, a.resource.plural, a.subresource)
        for engine in (KubeflowEngine, TrainerEngine, VolcanoEngine)
        for a in engine.access()
    }


def test_the_source_scan_finds_the_engines_calls() -> None:
    methods = {method for _, method, _, _, _ in api_calls()}
    assert {"create", "get", "list", "replace", "patch", "delete", "watch"} <= methods
    assert {"read_log", "stream_log", "list_events", "list_metadata"} <= methods


def test_every_api_call_the_kube_engines_make_is_in_their_access_table() -> None:
    table = declared()
    missing = []
    for module_name, method, line, verb, first in api_calls():
        where = f"{module_name}.py:{line} api.{method}"
        if method in FIXED:
            fixed_verb, res, sub = FIXED[method]
            if (fixed_verb, res.group, res.plural, sub) not in table:
                missing.append(where)
            continue
        if isinstance(first, ast.Name) and first.id.isupper():
            module = importlib.import_module(f"distrun.engines.kube.{module_name}")
            res = getattr(module, first.id)
            assert isinstance(res, kube_client.Resource), where
            if (verb, res.group, res.plural, "") not in table:
                missing.append(f"{where} {verb} {res.group}/{res.plural}")
        elif verb not in JOB_VERBS:  # the job's own kind (or an informer's): the job verbs
            missing.append(f"{where} {verb} on the job's kind")
    assert missing == [], "calls without an entry in KubeEngine.access: " + ", ".join(missing)
