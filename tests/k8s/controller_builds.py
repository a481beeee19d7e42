"""Build (once) and cache the real job controllers and the manifests they need, as binaries.py
does for the control plane: a throwaway Go module per component under
`${DISTRUN_CACHE:-~/.cache/distrun}/k8s/<component>-<version>/`, a file lock per component,
and a finished `bin/` (or `manifests/`) directory that appears by an atomic rename.

Each component has its own module directory and lock, so `ensure_controllers` builds the
missing ones two at a time. Run `python -m tests.k8s.controller_builds` to warm the cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .binaries import (
    KUEUE_VERSION,
    YAML_LOADER,
    BuildError,
    Report,
    ensure_component,
    ensure_go_command,
    ensure_kueue,
    ensure_training_operator,
    go_build,
    go_mod_download,
    report_to_stderr,
    run_go,
    write_go_mod,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

VOLCANO_MODULE, VOLCANO_VERSION = "volcano.sh/volcano", "v1.15.1"
VOLCANO_COMMANDS = ("scheduler", "controller-manager", "webhook-manager")
# The module zip lacks Volcano's nested `volcano.sh/apis` module and the proxy does not serve
# v1.15.x of it: a copy of it sits beside the project (see its SOURCES.md).
VOLCANO_APIS = REPO_ROOT.parent / "shared" / "third_party" / "volcano-apis-v1.15.1"

TRAINER_MODULE, TRAINER_VERSION = "github.com/kubeflow/trainer/v2", "v2.3.0"
TRAINER_PACKAGE = f"{TRAINER_MODULE}/cmd/trainer-controller-manager"
JOBSET_MODULE, JOBSET_VERSION = "sigs.k8s.io/jobset", "v0.12.0"  # what Trainer v2.3.0 requires
KUEUE_MODULE = "sigs.k8s.io/kueue"

KATIB_MODULE, KATIB_VERSION = "github.com/kubeflow/katib", "v0.19.0"
KATIB_PACKAGE = f"{KATIB_MODULE}/cmd/katib-controller/v1beta1"
KATIB_CRDS = "manifests/v1beta1/components/crd/"
KATIB_WEBHOOKS = "manifests/v1beta1/components/webhook/webhooks.yaml"
KATIB_CONFIG = "manifests/v1beta1/installs/katib-standalone/katib-config.yaml"
# A small program of our own, built beside katib-controller in the same module, for what
# Katib's webhook leaves unchecked. `katib-experiment-check < experiment.json` decodes the
# Experiment into Katib's Go type strictly, as the API server's strict field validation would
# if Katib's CRD had a schema (its schema preserves unknown fields, and the webhook's decoder
# drops them): a misspelt or misplaced field is an error, not ignored. With `-metrics-log
# FILE`, it then reads FILE as Katib's StdOut collector reads the primary container's output,
# with Katib's own parser and the Experiment's filters (its webhook validates no filter of a
# StdOut collector; an invalid one would crash the collector), and prints the metric values
# found, one JSON object a line.
KATIB_EXPERIMENT_CHECK = """package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	common "github.com/kubeflow/katib/pkg/apis/controller/common/v1beta1"
	experiments "github.com/kubeflow/katib/pkg/apis/controller/experiments/v1beta1"
	collector "github.com/kubeflow/katib/pkg/metricscollector/v1beta1/file-metricscollector"
	sigsjson "sigs.k8s.io/json"
)

func fail(code int, message interface{}) {
	fmt.Fprintln(os.Stderr, message)
	os.Exit(code)
}

func main() {
	metricsLog := flag.String("metrics-log", "", "a file of output to read metrics from")
	flag.Parse()
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(2, err)
	}
	var experiment experiments.Experiment
	strict, err := sigsjson.UnmarshalStrict(data, &experiment, sigsjson.DisallowUnknownFields)
	if err != nil {
		fail(1, err)
	}
	if len(strict) > 0 {
		fail(1, strict)
	}
	if *metricsLog == "" {
		return
	}
	spec := experiment.Spec
	var filters []string
	if source := spec.MetricsCollectorSpec.Source; source != nil && source.Filter != nil {
		// As the pod webhook passes them to the collector: joined by ";", split again.
		filters = strings.Split(strings.Join(source.Filter.MetricsFormat, ";"), ";")
	}
	for _, filter := range filters {
		if _, err := regexp.Compile(filter); err != nil {
			fail(1, fmt.Sprintf("filter %q: %v", filter, err))
		}
	}
	metrics := append([]string{spec.Objective.ObjectiveMetricName}, spec.Objective.AdditionalMetricNames...)
	observed, err := collector.CollectObservationLog(*metricsLog, metrics, filters, common.TextFormat)
	if err != nil {
		fail(2, err)
	}
	for _, log := range observed.MetricLogs {
		line, _ := json.Marshal(map[string]string{"name": log.Metric.Name, "value": log.Metric.Value})
		fmt.Println(string(line))
	}
}
"""

# Katib's Optuna suggestion service (its `grid` algorithm), Python, run as its image runs it:
# these trees of the module, its requirements installed beside them.
KATIB_OPTUNA = "cmd/suggestion/optuna/v1beta1"
KATIB_PYTHON_TREES = (
    "pkg/apis/manager/v1beta1/python",
    "pkg/apis/manager/health/python",
    "pkg/suggestion/v1beta1/internal",
    "pkg/suggestion/v1beta1/optuna",
    KATIB_OPTUNA,
)

INDEX = "index.json"  # a manifests directory's list of files, written last


@dataclass(frozen=True)
class ManifestSource:
    name: str  # cache directory: <name>-manifests-<version>
    module: str
    version: str
    patterns: tuple[str, ...]  # globs inside the module

    @property
    def output(self) -> str:
        """The cache's directory for these patterns: a changed list is copied afresh."""
        digest = hashlib.sha256("\n".join(self.patterns).encode()).hexdigest()[:12]
        return f"manifests-{digest}"


MANIFEST_SOURCES = {
    "volcano": ManifestSource(
        "volcano",
        VOLCANO_MODULE,
        VOLCANO_VERSION,
        (
            "config/crd/volcano/bases/*.yaml",
            "config/crd/jobflow/bases/*.yaml",
            "installer/helm/chart/volcano/config/volcano-scheduler.conf",
            "installer/helm/chart/volcano/config/volcano-admission.conf",
            # Its admission webhooks exist only as this Helm template.
            "installer/helm/chart/volcano/templates/webhooks.yaml",
        ),
    ),
    "trainer": ManifestSource(
        "trainer",
        TRAINER_MODULE,
        TRAINER_VERSION,
        (
            "manifests/base/crds/*.yaml",
            "manifests/base/runtimes/*.yaml",
            "manifests/base/webhook/manifests.yaml",
        ),
    ),
    "jobset": ManifestSource(
        "jobset",
        JOBSET_MODULE,
        JOBSET_VERSION,
        ("config/components/crd/bases/*.yaml", "config/components/webhook/manifests.yaml"),
    ),
    "kueue": ManifestSource(
        "kueue",
        KUEUE_MODULE,
        KUEUE_VERSION,
        ("config/components/crd/bases/*.yaml", "config/components/webhook/manifests.yaml"),
    ),
}


KATIB_MANIFESTS = ManifestSource(
    "katib", KATIB_MODULE, KATIB_VERSION, (f"{KATIB_CRDS}*.yaml", KATIB_WEBHOOKS, KATIB_CONFIG)
)


@dataclass(frozen=True)
class Manifests:
    """Files copied from a module, by their path inside it; YAML also parsed, as JSON."""

    directory: Path

    def files(self) -> list[str]:
        listed: list[str] = json.loads((self.directory / INDEX).read_text())
        return listed

    def path(self, name: str) -> Path:
        return self.directory / name

    def documents(self, name: str) -> list[dict[str, Any]]:
        """The YAML documents of `name`, parsed once at build time (pure-Python YAML is slow)."""
        parsed: list[dict[str, Any]] = json.loads((self.directory / f"{name}.json").read_text())
        return parsed

    def crds(self, prefix: str) -> list[dict[str, Any]]:
        """Every CustomResourceDefinition in the files under `prefix`."""
        return [
            document
            for name in self.files()
            if name.startswith(prefix) and name.endswith(".yaml")
            for document in self.documents(name)
            if document.get("kind") == "CustomResourceDefinition"
        ]


@dataclass(frozen=True)
class ControllerBinaries:
    training_operator: Path
    volcano_scheduler: Path
    volcano_controller_manager: Path
    volcano_webhook_manager: Path
    trainer: Path
    jobset: Path
    kueue: Path
    volcano_manifests: Manifests
    trainer_manifests: Manifests
    jobset_manifests: Manifests
    kueue_manifests: Manifests


def ensure_controllers(report: Report = report_to_stderr, workers: int = 2) -> ControllerBinaries:
    """Every controller and its manifests, building what the cache lacks `workers` at a time."""
    steps: dict[str, Callable[[], Path]] = {
        "training_operator": lambda: ensure_training_operator(report=report),
        "volcano": lambda: ensure_volcano(report=report),
        "trainer": lambda: ensure_trainer(report=report),
        "jobset": lambda: ensure_jobset(report=report),
        "kueue": lambda: ensure_kueue(report=report),
        **{
            f"{name}_manifests": functools.partial(ensure_manifests, source, report=report)
            for name, source in MANIFEST_SOURCES.items()
        },
    }
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(step) for name, step in steps.items()}
        done = {name: future.result() for name, future in futures.items()}
    volcano = done["volcano"]
    return ControllerBinaries(
        training_operator=done["training_operator"] / "training-operator",
        volcano_scheduler=volcano / "vc-scheduler",
        volcano_controller_manager=volcano / "vc-controller-manager",
        volcano_webhook_manager=volcano / "vc-webhook-manager",
        trainer=done["trainer"] / "trainer-controller-manager",
        jobset=done["jobset"] / "jobset-controller",
        kueue=done["kueue"] / "kueue",
        **{f"{name}_manifests": Manifests(done[f"{name}_manifests"]) for name in MANIFEST_SOURCES},
    )


@dataclass(frozen=True)
class KatibBinaries:
    controller: Path  # katib-controller: the Experiment/Trial/Suggestion controllers, webhooks
    experiment_check: Path  # KATIB_EXPERIMENT_CHECK
    manifests: Manifests  # its CRDs, webhook configurations and standalone katib-config


def ensure_katib(report: Report = report_to_stderr) -> KatibBinaries:
    """Katib's controller (cmd/katib-controller/v1beta1) and our Experiment check, built in one
    module (its checksums come from the proxy alone: binaries.NOSUMDB_MODULES), and its
    manifests. Not part of `ensure_controllers`: only the Katib tests need it."""
    products = ("katib-controller", "katib-experiment-check")

    def build(src: Path, out: Path) -> None:
        write_go_mod(src, require={}, replace={})
        run_go(["go", "get", f"{KATIB_PACKAGE}@{KATIB_VERSION}"], src)
        (src / "main.go").write_text(KATIB_EXPERIMENT_CHECK)
        go_build(src, str(out / products[0]), [KATIB_PACKAGE], [])
        go_build(src, str(out / products[1]), ["."], [])

    done = ensure_component("katib", KATIB_VERSION, build, products, report=report)
    return KatibBinaries(
        controller=done / products[0],
        experiment_check=done / products[1],
        manifests=Manifests(ensure_manifests(KATIB_MANIFESTS, report=report)),
    )


def ensure_katib_suggestion(report: Report = report_to_stderr) -> Path:
    """Katib's Optuna suggestion service: `katib/` holds its Python trees of the module as its
    image lays them out, `site/` its requirements.txt installed by pip for this interpreter
    (Python 3.11, as its image)."""
    products = (f"katib/{KATIB_OPTUNA}/main.py", "site/optuna/__init__.py")

    def build(src: Path, out: Path) -> None:
        write_go_mod(src, require={}, replace={})
        module_dir = Path(go_mod_download(KATIB_MODULE, KATIB_VERSION, src)["Dir"])
        for tree in KATIB_PYTHON_TREES:
            shutil.copytree(module_dir / tree, out / "katib" / tree, copy_function=shutil.copyfile)
        for path in (out / "katib").rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)  # the module cache's are read-only
        requirements = out / "katib" / KATIB_OPTUNA / "requirements.txt"
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        command += ["--target", str(out / "site"), "-r", str(requirements)]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BuildError(f"`{' '.join(command)}` failed:\n{result.stderr[-4000:]}")

    return ensure_component(
        "katib-suggestion-optuna", KATIB_VERSION, build, products, report=report, output="lib"
    )


def ensure_volcano(report: Report = report_to_stderr) -> Path:
    """Volcano's scheduler, controller-manager and admission webhook server (`vc-*`)."""
    products = tuple(f"vc-{command}" for command in VOLCANO_COMMANDS)

    def build(src: Path, out: Path) -> None:
        if not (VOLCANO_APIS / "go.mod").is_file():
            raise BuildError(
                f"building Volcano {VOLCANO_VERSION} needs its `volcano.sh/apis` module at "
                f"{VOLCANO_APIS} (the module zip lacks it and the proxy does not serve it); "
                "see ../shared/third_party/SOURCES.md"
            )
        write_go_mod(src, require={}, replace={})
        module_dir = Path(go_mod_download(VOLCANO_MODULE, VOLCANO_VERSION, src)["Dir"])
        replace = volcano_replacements((module_dir / "go.mod").read_text(), VOLCANO_APIS)
        write_raw_go_mod(src, {VOLCANO_MODULE: VOLCANO_VERSION}, replace)
        for command, product in zip(VOLCANO_COMMANDS, products, strict=True):
            go_build(src, str(out / product), [f"{VOLCANO_MODULE}/cmd/{command}"], [])

    return ensure_component("volcano", VOLCANO_VERSION, build, products, report=report)


def ensure_trainer(report: Report = report_to_stderr) -> Path:
    """Kubeflow Trainer's controller manager (its webhooks are served by the same binary)."""
    return ensure_go_command(
        "trainer", TRAINER_VERSION, TRAINER_PACKAGE, "trainer-controller-manager", report
    )


def ensure_jobset(report: Report = report_to_stderr) -> Path:
    """JobSet's controller manager: the module's root package (webhooks in the same binary)."""
    return ensure_go_command("jobset", JOBSET_VERSION, JOBSET_MODULE, "jobset-controller", report)


def ensure_manifests(source: ManifestSource, report: Report = report_to_stderr) -> Path:
    def copy(src: Path, out: Path) -> None:
        write_go_mod(src, require={}, replace={})
        module_dir = Path(go_mod_download(source.module, source.version, src)["Dir"])
        copied = []
        for pattern in source.patterns:
            matches = sorted(module_dir.glob(pattern))
            if not matches:
                raise BuildError(f"{source.module}@{source.version} has no {pattern}")
            for path in matches:
                name = str(path.relative_to(module_dir))
                copy_manifest(path, out / name)
                copied.append(name)
        (out / INDEX).write_text(json.dumps(copied))

    return ensure_component(
        f"{source.name}-manifests",
        source.version,
        copy,
        (INDEX,),
        report=report,
        output=source.output,
    )


def copy_manifest(path: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)
    target.chmod(0o644)  # the module cache's files are read-only
    if target.suffix == ".yaml" and target.parent.name != "templates":  # not Helm templates
        documents = [d for d in yaml.load_all(target.read_text(), Loader=YAML_LOADER) if d]
        Path(f"{target}.json").write_text(json.dumps(documents))


def volcano_replacements(volcano_go_mod: str, apis_dir: Path) -> list[str]:
    """Volcano's own replace lines, its nested `volcano.sh/apis` pointed at `apis_dir`."""
    block = re.search(r"^replace \((.*?)^\)", volcano_go_mod, re.MULTILINE | re.DOTALL)
    if block is None:
        raise BuildError("Volcano's go.mod has no replace block")
    lines = []
    for line in block.group(1).splitlines():
        line = line.split("//")[0].strip()
        if not line:
            continue
        if line.startswith("volcano.sh/apis "):
            line = f"volcano.sh/apis => {apis_dir}"
        lines.append(line)
    return lines


def write_raw_go_mod(src: Path, require: dict[str, str], replace: list[str]) -> None:
    lines = ["module distrun.test/k8sbuild", "", "go 1.26.0", ""]
    lines += [f"require {module} {version}" for module, version in require.items()]
    lines += ["", "replace (", *(f"\t{line}" for line in replace), ")"]
    (src / "go.mod").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    for field, value in {**vars(ensure_controllers()), **vars(ensure_katib())}.items():
        print(f"{field}: {value}")
