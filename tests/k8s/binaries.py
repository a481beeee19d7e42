"""Build (once) and cache the control-plane binaries and CRDs the Kubernetes test tier runs.

Everything comes from Go modules through the Go module proxy, built in a throwaway module under
`${DISTRUN_CACHE:-~/.cache/distrun}/k8s/<component>-<version>/`, never inside the repository.
A finished build is a `bin/` (or `crds/`) directory that appears by an atomic rename, so a build
killed halfway is redone, and a file lock per component lets several test runs share the cache.

Run `python tests/k8s/binaries.py` to warm the cache ahead of a test run.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.8"  # the etcd that Kubernetes v1.36 is built and tested against
KWOK_VERSION = "v0.8.0"  # lists Kubernetes 1.36 in its supported_releases.txt

TRAINING_OPERATOR_VERSION = "v1.9.4"
TRAINING_OPERATOR_PACKAGE = "github.com/kubeflow/training-operator/cmd/training-operator.v1"

KUEUE_VERSION = "v0.17.1"
KUEUE_PACKAGE = "sigs.k8s.io/kueue/cmd/kueue"
METRICS_SERVER_VERSION = "v0.8.0"
METRICS_SERVER_PACKAGE = "sigs.k8s.io/metrics-server/cmd/metrics-server"

KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass(frozen=True)
class CrdSource:
    name: str  # cache directory name
    module: str
    version: str
    directory: str  # inside the module
    files: tuple[str, ...]


CRD_SOURCES = (
    CrdSource(
        "training-operator",
        "github.com/kubeflow/training-operator",
        "v1.9.4",
        "manifests/base/crds",
        (
            "kubeflow.org_pytorchjobs.yaml",
            "kubeflow.org_tfjobs.yaml",
            "kubeflow.org_mpijobs.yaml",
            "kubeflow.org_xgboostjobs.yaml",
            "kubeflow.org_paddlejobs.yaml",
            "kubeflow.org_jaxjobs.yaml",
        ),
    ),
    CrdSource(
        "trainer",
        "github.com/kubeflow/trainer/v2",
        "v2.3.0",
        "manifests/base/crds",
        (
            "trainer.kubeflow.org_trainjobs.yaml",
            "trainer.kubeflow.org_trainingruntimes.yaml",
            "trainer.kubeflow.org_clustertrainingruntimes.yaml",
        ),
    ),
    CrdSource(
        "kueue",
        "sigs.k8s.io/kueue",
        KUEUE_VERSION,
        "config/components/crd/bases",
        (
            "kueue.x-k8s.io_clusterqueues.yaml",
            "kueue.x-k8s.io_localqueues.yaml",
            "kueue.x-k8s.io_resourceflavors.yaml",
            "kueue.x-k8s.io_workloads.yaml",
            "kueue.x-k8s.io_workloadpriorityclasses.yaml",
            "kueue.x-k8s.io_admissionchecks.yaml",
            "kueue.x-k8s.io_cohorts.yaml",
            "kueue.x-k8s.io_topologies.yaml",
            "kueue.x-k8s.io_multikueueclusters.yaml",
            "kueue.x-k8s.io_multikueueconfigs.yaml",
            "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
        ),
    ),
    CrdSource(
        "volcano",
        "volcano.sh/volcano",
        "v1.15.1",
        "config/crd/volcano/bases",
        (
            "batch.volcano.sh_jobs.yaml",
            "scheduling.volcano.sh_podgroups.yaml",
            "scheduling.volcano.sh_queues.yaml",
        ),
    ),
    # kwok's own CRD for per-pod log files (see cluster.PodLog).
    CrdSource(
        "kwok",
        "sigs.k8s.io/kwok",
        KWOK_VERSION,
        "kustomize/crd/bases",
        ("kwok.x-k8s.io_logs.yaml",),
    ),
)

# etcd's own main package lives in a module (go.etcd.io/etcd/v3) that is awkward to build
# outside its repository; its command line is `etcdmain.Main`, so a two-line main does the same.
ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


Report = Callable[[str], None]  # where progress messages go


def report_to_stderr(message: str) -> None:
    print(f"[distrun k8s] {message}", file=sys.stderr, flush=True)


class BuildError(RuntimeError):
    """A component could not be built; the message names the command and its output."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    training_operator: Path
    kueue: Path
    crds: tuple[Path, ...]  # CustomResourceDefinitions as JSON, operators' and kwok's


def cache_root() -> Path:
    base = os.environ.get("DISTRUN_CACHE") or str(Path.home() / ".cache" / "distrun")
    return Path(base).expanduser() / "k8s"


def ensure_all(report: Report = report_to_stderr) -> Binaries:
    """Every binary and CRD file, building whatever the cache lacks (quickest first)."""
    crd_dirs = [ensure_crds(source, report=report) for source in CRD_SOURCES]
    etcd = ensure_etcd(report=report)
    kubernetes = ensure_kubernetes(report=report)
    return Binaries(
        etcd=etcd / "etcd",
        kube_apiserver=kubernetes / "kube-apiserver",
        kube_controller_manager=kubernetes / "kube-controller-manager",
        kube_scheduler=kubernetes / "kube-scheduler",
        kwok=ensure_kwok(report=report) / "kwok",
        training_operator=ensure_training_operator(report=report) / "training-operator",
        kueue=ensure_kueue(report=report) / "kueue",
        crds=tuple(
            (d / name).with_suffix(".json")
            for d, s in zip(crd_dirs, CRD_SOURCES, strict=True)
            for name in s.files
        ),
    )


def ensure_kubernetes(report: Report = report_to_stderr) -> Path:
    def build(src: Path, out: Path) -> None:
        module_dir = go_mod_download("k8s.io/kubernetes", KUBERNETES_VERSION, src)["Dir"]
        kubernetes_go_mod = (Path(module_dir) / "go.mod").read_text()
        write_go_mod(
            src,
            require={"k8s.io/kubernetes": KUBERNETES_VERSION},
            replace=staging_replacements(kubernetes_go_mod, KUBERNETES_VERSION),
        )
        packages = [f"k8s.io/kubernetes/cmd/{command}" for command in KUBERNETES_COMMANDS]
        go_build(src, f"{out}/", packages, version_ldflags(KUBERNETES_VERSION))

    return ensure_component(
        "kubernetes", KUBERNETES_VERSION, build, KUBERNETES_COMMANDS, report=report
    )


def ensure_etcd(report: Report = report_to_stderr) -> Path:
    def build(src: Path, out: Path) -> None:
        write_go_mod(src, require={"go.etcd.io/etcd/server/v3": ETCD_VERSION}, replace={})
        (src / "main.go").write_text(ETCD_MAIN)
        go_build(src, str(out / "etcd"), ["."], [])

    return ensure_component("etcd", ETCD_VERSION, build, ("etcd",), report=report)


def ensure_kwok(report: Report = report_to_stderr) -> Path:
    def build(src: Path, out: Path) -> None:
        write_go_mod(src, require={"sigs.k8s.io/kwok": KWOK_VERSION}, replace={})
        go_build(src, f"{out}/", ["sigs.k8s.io/kwok/cmd/kwok"], [])

    return ensure_component("kwok", KWOK_VERSION, build, ("kwok",), report=report)


def ensure_training_operator(report: Report = report_to_stderr) -> Path:
    """The Kubeflow Training Operator's controller manager (`training-operator.v1`)."""
    return ensure_go_command(
        "training-operator",
        TRAINING_OPERATOR_VERSION,
        TRAINING_OPERATOR_PACKAGE,
        "training-operator",
        report,
    )


def ensure_kueue(report: Report = report_to_stderr) -> Path:
    """Kueue's controller manager (`cmd/kueue`; its webhooks are served by the same binary)."""
    return ensure_go_command("kueue", KUEUE_VERSION, KUEUE_PACKAGE, "kueue", report)


def ensure_metrics_server(report: Report = report_to_stderr) -> Path:
    """metrics-server, which serves `metrics.k8s.io` from the kubelets' (here kwok's) metrics."""
    return ensure_go_command(
        "metrics-server", METRICS_SERVER_VERSION, METRICS_SERVER_PACKAGE, "metrics-server", report
    )


def ensure_go_command(name: str, version: str, package: str, product: str, report: Report) -> Path:
    """A module's command, built from `go get` of its package at `version`."""

    def build(src: Path, out: Path) -> None:
        write_go_mod(src, require={}, replace={})
        # `go get` of the command's package, not the module root: the root alone leaves go.sum
        # without the command's dependencies.
        run_go(["go", "get", f"{package}@{version}"], src)
        go_build(src, str(out / product), [package], [])

    return ensure_component(name, version, build, (product,), report=report)


def ensure_crds(source: CrdSource, report: Report = report_to_stderr) -> Path:
    def copy(src: Path, out: Path) -> None:
        write_go_mod(src, require={}, replace={})
        module_dir = Path(go_mod_download(source.module, source.version, src)["Dir"])
        for name in source.files:
            shutil.copyfile(module_dir / source.directory / name, out / name)
            # Parsed once here: pure-Python YAML takes seconds for these schemas, JSON does not.
            manifest = yaml.load((out / name).read_text(), Loader=YAML_LOADER)
            (out / name).with_suffix(".json").write_text(json.dumps(manifest))

    products = source.files + tuple(str(Path(name).with_suffix(".json")) for name in source.files)
    return ensure_component(
        f"{source.name}-crds", source.version, copy, products, report=report, output="crds"
    )


YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML has it
BuildStep = Callable[[Path, Path], None]  # (throwaway module dir, empty output dir)


def ensure_component(
    name: str,
    version: str,
    build: BuildStep,
    products: tuple[str, ...],
    *,
    report: Report,
    output: str = "bin",
) -> Path:
    """`<cache>/<name>-<version>/<output>/` holding `products`, made by `build` if missing."""
    home = cache_root() / f"{name}-{version}"
    done = home / output

    def finished() -> bool:
        return all((done / product).is_file() for product in products)

    if finished():
        return done
    home.mkdir(parents=True, exist_ok=True)
    with file_lock(home / ".lock"):
        if finished():  # another test run built it while we waited for the lock
            return done
        shutil.rmtree(done, ignore_errors=True)  # left by an older layout of this cache
        report(f"building {name} {version} in {home} (once; minutes on a cold cache) ...")
        started = time.monotonic()
        src, partial = home / "src", home / f"{output}.partial"
        for directory in (src, partial):
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
        build(src, partial)
        partial.rename(done)
        report(f"built {name} {version} in {time.monotonic() - started:.0f}s")
    return done


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def staging_replacements(kubernetes_go_mod: str, kubernetes_version: str) -> dict[str, str]:
    """`k8s.io/<staging module>` -> its published version, for every staging module required.

    k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with directories
    of its own repository, which a module download does not carry; each is published on its own
    as v0.<minor>.<patch> of the same release.
    """
    published = "v0." + kubernetes_version.removeprefix("v1.")
    staged = re.findall(
        r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", kubernetes_go_mod, re.MULTILINE
    )
    required = set(
        re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+v0\.0\.0\b", kubernetes_go_mod, re.MULTILINE)
    )
    return {module: published for module in staged if module in required}


def version_ldflags(kubernetes_version: str) -> list[str]:
    major, minor = kubernetes_version.removeprefix("v").split(".")[:2]
    flags = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={kubernetes_version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return flags


def write_go_mod(src: Path, require: dict[str, str], replace: dict[str, str]) -> None:
    lines = ["module distrun.test/k8sbuild", "", "go 1.26.0", ""]
    lines += [f"require {module} {version}" for module, version in require.items()]
    if replace:
        lines += ["", "replace ("]
        lines += [f"\t{module} => {module} {version}" for module, version in replace.items()]
        lines += [")"]
    (src / "go.mod").write_text("\n".join(lines) + "\n")


# Modules whose checksums the public checksum database does not answer for here: go.sum still
# records them, from the proxy's download.
NOSUMDB_MODULES = ("github.com/kubeflow/katib",)


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GOFLAGS="-mod=mod",
        CGO_ENABLED="0",  # static binaries, no C toolchain needed
        GOTOOLCHAIN="local",  # never try to download another Go
        GOWORK="off",
        GONOSUMDB=",".join(filter(None, (os.environ.get("GONOSUMDB"), *NOSUMDB_MODULES))),
    )
    return env


def go_mod_download(module: str, version: str, cwd: Path) -> dict[str, str]:
    out = run_go(["go", "mod", "download", "-json", f"{module}@{version}"], cwd)
    info: dict[str, str] = json.loads(out)
    if info.get("Error"):
        raise BuildError(f"go mod download {module}@{version}: {info['Error']}")
    return info


# No debugging information at all: `-s -w` strips it from the binary, and `-dwarf=false` keeps
# the compiler from generating it for every package in the first place (a cold build of kwok:
# 98 s of CPU against 112 s with it, 2026-12-07).
GO_BUILD_FLAGS = ("-trimpath", "-gcflags=all=-dwarf=false")


def go_build(src: Path, output: str, packages: list[str], ldflags: list[str]) -> None:
    """`output` is a file, or a directory when it ends with "/" (one binary per package)."""
    command = ["go", "build", *GO_BUILD_FLAGS, "-ldflags", " ".join(["-s", "-w", *ldflags])]
    run_go([*command, "-o", output, *packages], src)


def run_go(command: list[str], cwd: Path) -> str:
    if shutil.which("go") is None:
        raise BuildError(
            "the Kubernetes test tier builds its binaries with Go; `go` is not on PATH"
        )
    result = subprocess.run(
        command, check=False, cwd=cwd, env=go_env(), capture_output=True, text=True
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-4000:]
        raise BuildError(
            f"`{' '.join(command)}` failed in {cwd} (exit {result.returncode}):\n{output}"
        )
    return result.stdout


if __name__ == "__main__":
    binaries = ensure_all()
    for field, value in vars(binaries).items():
        print(f"{field}: {value}")
