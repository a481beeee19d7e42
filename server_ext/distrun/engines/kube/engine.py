"""What the three Kubernetes engines share: submit, list, get, cancel, delete, read and follow
logs, all answered from the API server (nothing is kept in this process between calls).

A job is one custom object named by the job id, plus a ConfigMap of the same name owned by it.
The engines differ only in the object they build (`build`), how pods map to replicas
(`pod_selector`, `replica_of`), and how the object's status reads (`phase`).

Tenancy: objects carry an owner label (to select) and the exact user name as an annotation
(to authorize); another user's job is NotFound, exactly like a job that does not exist.
"""

import asyncio
import contextlib
import copy
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from distrun.core import jobids
from distrun.core.errors import (
    Conflict,
    DistrunError,
    EngineError,
    Forbidden,
    LimitExceeded,
    NotFound,
    SpecError,
)
from distrun.core.job import Job, JobState, ReplicaStatus
from distrun.core.logs import Cursor, LogEvent, LogLine
from distrun.core.restarts import restart_plan
from distrun.core.spec import JobSpec, Limits
from distrun.core.usage import UsageReport, UsageUpdate, failure_text
from distrun.engines.cursors import selected_replicas, start_seqs
from distrun.engines.kube.anchors import AnchorPolicy
from distrun.engines.kube.client import (
    CONFIGMAPS,
    EVENTS,
    PODS,
    Access,
    KubeApi,
    Obj,
    Resource,
    accesses,
    namespace_for,
    new_api_client,
)
from distrun.engines.kube.feeds import JobFeed, follow_feed
from distrun.engines.kube.gpu_modes import SHARED_GPU, GpuMode, gpu_shortage, pod_gpus
from distrun.engines.kube.informers import Informers, across_jobs
from distrun.engines.kube.kueue import WORKLOADS, check_queue_system, workload_reason
from distrun.engines.kube.logs import (
    LedgerStore,
    LogContext,
    current_instance,
    parse_line,
    parse_time,
    read_replica,
    read_unfinished,
    split_log,
)
from distrun.engines.kube.manifests.common import (
    ANNOTATION_OWNER,
    ANNOTATION_SPEC,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    ClusterOptions,
    Target,
    owner_selector,
)
from distrun.engines.kube.manifests.configmap import CodeBundle
from distrun.engines.kube.pod_usage import POD_METRICS, PodUsage
from distrun.engines.kube.restart_ledger import (
    RESTARTS_ANNOTATION,
    RestartBook,
    attempt_words,
    blame,
    lasting_part,
    observe,
)
from distrun.engines.kube.restart_ledger import apply as apply_restarts
from distrun.engines.kube.restart_ledger import read_book as read_restarts
from distrun.engines.kube.timeline import Attempts, kube_timeline
from distrun.engines.protocol import EngineInfo

log = logging.getLogger(__name__)
CANCELLED_REASON = "cancelled by the user"
REMOVED_REASON = "stopped when the job ended (the controller removed its pod)"
# A stored spec is checked by the rules of a new one, not by this server's size limits (which
# may have changed since it was submitted).
_STORED_SPEC_LIMITS = Limits(
    max_replicas=1_000_000, max_gpus_per_replica=1_000_000, max_payload_bytes=1 << 60
)
LAST_LINES = 20
# What every Kubernetes engine asks of the API server in a user's namespace besides its job
# kinds (the chart's roles grant exactly this: tests/helm/test_chart_cluster.py).
SHARED_ACCESS = (
    # the code ConfigMap: created with the job, its metadata listed to count a user's jobs,
    # read and replaced for the log ledger and anchors
    *accesses(CONFIGMAPS, "create", "get", "list", "update"),
    *accesses(PODS, "list", "watch", "delete"),  # delete: stopping an ended job's replicas
    *accesses(PODS, "get", subresource="log"),
    *accesses(EVENTS, "list"),  # why a job waits
    *accesses(WORKLOADS, "list"),  # why Kueue holds it
    *accesses(POD_METRICS, "list"),  # replicas' usage, where metrics-server serves it
)
JOB_VERBS = ("create", "get", "list", "watch", "delete")


@dataclass(frozen=True)
class Phase:
    """What a job object's status says; `state` None means "ask the pods"."""

    state: JobState | None
    reason: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    restarts: int = 0  # of the whole job (each replica restarted with it), not of a container
    # What a restart restarts where the controller decides it whatever the framework (Volcano:
    # "job"); None: as the spec resolves it (core/restarts.py).
    restart_scope: str | None = None
    attempt_started_at: float | None = None  # the current attempt's start, where it says
    restarted_at: float | None = None  # the latest restart of the whole job, where it says


class KubeEngine:
    """The shared engine; subclasses set the class attributes and the four hooks."""

    name = "kubernetes"
    description = ""
    resources: tuple[Resource, ...] = ()  # every kind this engine creates: (plural, kind)
    kinds: tuple[str, ...] = ()
    operator = "the operator that runs these jobs"  # what to install when the kinds are missing
    kueue_manages = True  # whether Kueue can queue this engine's kind
    # How cancel and delete remove the job object: Foreground keeps it, cancelled, until the
    # controller's objects and pods are gone; an engine whose controller re-creates its
    # children while the job waits for them (Trainer v2) deletes in the Background.
    deletion_propagation = "Foreground"

    @classmethod
    def access(cls) -> tuple[Access, ...]:
        """Every request this engine makes in a user's namespace."""
        kinds = tuple(a for resource in cls.resources for a in accesses(resource, *JOB_VERBS))
        return kinds + SHARED_ACCESS + cls.extra_access

    extra_access: tuple[Access, ...] = ()  # what one kind needs besides the shared requests

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        api_client: Any = None,
        namespace: str = "default",
        images: dict[str, str] | None = None,
        python: str = "python",
        image_pull_secrets: tuple[str, ...] | list[str] = (),
        service_account: str | None = None,
        node_selector: dict[str, str] | None = None,
        tolerations: tuple[dict[str, Any], ...] | list[dict[str, Any]] = (),
        default_queue: str | None = None,
        default_priority_class: str | None = None,
        allowed_queues: tuple[str, ...] | list[str] | None = None,
        allowed_priority_classes: tuple[str, ...] | list[str] | None = None,
        cluster_domain: str | None = None,
        run_as_non_root: bool = False,
        automount_service_account_token: bool = False,
        queue_system: str | None = None,
        gpu_mode: str = "whole",
        gpu_shared_resource: str = SHARED_GPU,
        gpu_mig_profiles: tuple[str, ...] | list[str] = (),
        limits: Limits | None = None,
        log_anchor_bytes: int = AnchorPolicy.every_bytes,
        log_anchor_seconds: float = AnchorPolicy.every_seconds,
        log_anchor_flush_seconds: float = AnchorPolicy.flush_seconds,
        log_claim_after: float = AnchorPolicy.claim_after,
        log_rotation_bytes: int = AnchorPolicy.rotation_bytes,
        log_http2: bool = True,
    ) -> None:
        """`namespace` is one namespace for everyone or a template such as
        "distrun-{username}"; `api_client` (a kubernetes_asyncio ApiClient) replaces
        `kubeconfig` / `context`, else in-cluster credentials or the default kubeconfig."""
        self.namespace_template = namespace
        self.options = ClusterOptions(
            images=dict(images or {}),
            python=python,
            image_pull_secrets=tuple(image_pull_secrets),
            service_account=service_account,
            node_selector=dict(node_selector or {}),
            tolerations=tuple(tolerations),
            default_queue=default_queue,
            default_priority_class=default_priority_class,
            allowed_queues=None if allowed_queues is None else tuple(allowed_queues),
            allowed_priority_classes=(
                None if allowed_priority_classes is None else tuple(allowed_priority_classes)
            ),
            cluster_domain=cluster_domain,
            run_as_non_root=run_as_non_root,
            automount_service_account_token=automount_service_account_token,
            queue_system=check_queue_system(queue_system, self.name, self.kueue_manages),
            gpu=GpuMode(gpu_mode, gpu_shared_resource, tuple(gpu_mig_profiles)),
        )
        self.limits = limits or Limits()
        self.anchor_policy = AnchorPolicy(
            log_anchor_bytes,
            log_anchor_seconds,
            log_anchor_flush_seconds,
            log_claim_after,
            log_rotation_bytes,
        )
        self._kubeconfig, self._context = kubeconfig, context
        self._log_http2 = log_http2
        self._api: KubeApi | None = (
            KubeApi(api_client, owns_client=False, http2_logs=log_http2)
            if api_client is not None
            else None
        )
        self._api_lock = asyncio.Lock()
        self._feeds: dict[tuple[str, str], JobFeed] = {}  # by namespace and job id
        self._reading: dict[tuple[str, str], asyncio.Future[Obj]] = {}  # GETs of a job in flight
        self._informers = Informers()  # what the feeds read, one per namespace and resource
        self._usage = PodUsage()  # metrics.k8s.io, read while someone looks (pod_usage.py)

    # --- the hooks each kind implements ---

    def resource_for(self, spec: JobSpec) -> Resource:
        """The kind of object `spec` becomes."""
        return self.resources[0]

    def resource_of(self, obj: Obj) -> Resource:
        return (
            self.resources[self.kinds.index(obj["kind"])]
            if obj.get("kind") in self.kinds
            else self.resources[0]
        )

    async def candidates(self, api: KubeApi, namespace: str, job_id: str) -> tuple[Resource, ...]:
        """Where a job of this id may be; engines of several kinds narrow it down."""
        return self.resources

    def check_fault_tolerance(self, spec: JobSpec) -> None:
        """Refuses, in words, the restart and elastic settings this engine's controller cannot
        hold (docs/fault-tolerance.md), before anything is asked of the cluster."""
        raise NotImplementedError

    def build(self, spec: JobSpec, target: Target) -> tuple[Obj, CodeBundle]:
        raise NotImplementedError

    def pod_selector(self, job_id: str) -> str:
        raise NotImplementedError

    def replica_of(self, pod: Obj, spec: JobSpec) -> str | None:
        raise NotImplementedError

    def container_name(self, spec: JobSpec) -> str:
        raise NotImplementedError

    def pod_attempt(self, pod: Obj) -> int:
        """Which of the job's attempts `pod` runs (1: the first); the controllers that restart
        single replicas in their pods keep the job at its first."""
        return 1

    def usage_peaks(self, obj: Obj) -> dict[str, int]:
        """Each replica's largest working set metrics-server gave for the job so far."""
        meta = obj["metadata"]
        return self._usage.peaks(meta.get("namespace", ""), meta["name"])

    def describe_job(
        self, obj: Obj, spec: JobSpec, pods: dict[str, Obj], restarts: RestartBook | None = None
    ) -> Job:
        """The job, with the usage peaks read so far (an OOM kill's words name the peak)."""
        peaks = self.usage_peaks(obj)
        phase = self.phase_with_pods(obj, spec, pods)
        return describe(self.name, obj, spec, pods, phase, restarts, peaks, self.pod_attempt)

    def phase(self, obj: Obj) -> Phase:
        raise NotImplementedError

    def phase_with_pods(self, obj: Obj, spec: JobSpec, pods: dict[str, Obj]) -> Phase:
        """The phase, where the pods say more of it than the job object (Trainer: JobSet's
        restarts, which only its pods and Jobs carry)."""
        return self.phase(obj)

    async def waiting_reason(self, api: KubeApi, obj: Obj, job: Job) -> str | None:
        """Why the pending `job` waits, in words, when its pods do not say: the latest Warning
        event on the job object (an operator that cannot create the pods reports it there).
        None keeps the reason `describe` gave."""
        queued = await workload_reason(api, obj)
        if queued is not None or pending_reason(job.replicas) is not None:
            return queued
        meta = obj["metadata"]
        selector = f"involvedObject.name={meta['name']},involvedObject.kind={obj.get('kind')}"
        try:
            events = await api.list_events(meta["namespace"], selector, "read the job's events")
        except DistrunError:
            return None
        warnings = [e for e in events.get("items", []) if e.get("type") == "Warning"]
        if not warnings:
            return None
        latest = max(warnings, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return f"{latest.get('reason', 'Warning')}: {latest.get('message', '')}".strip()

    # --- the Engine protocol ---

    async def info(self) -> EngineInfo:
        """Available when the API server answers and serves every kind this engine creates.
        Discovery needs no namespace, so a per-user namespace template is no obstacle."""
        try:
            api = await self.api()
            missing = await self._missing_resources(api)
        except DistrunError as error:
            return EngineInfo(self.name, self.description, available=False, reason=str(error))
        if missing:
            reason = (
                f"the cluster does not serve {', '.join(missing)}; install {self.operator} "
                "(or remove this engine from DistrunApp.engines)"
            )
            return EngineInfo(self.name, self.description, available=False, reason=reason)
        return EngineInfo(
            self.name,
            self.description,
            available=True,
            namespaces=[self.namespace_template],
            options={
                "kinds": list(self.kinds),
                "api": f"{self.resources[0].group}/{self.resources[0].version}",
                "queues": self._choices(self.options.default_queue, self.options.allowed_queues),
                "queue_system": self.options.queue_system or "",
                "priority_classes": self._choices(
                    self.options.default_priority_class, self.options.allowed_priority_classes
                ),
                "gpus": self.options.gpu.describe(),
            },
        )

    @staticmethod
    def _choices(default: str | None, allowed: tuple[str, ...] | None) -> list[str]:
        """What a user may pick: the default first, then the allowed ones."""
        return list(dict.fromkeys([*([default] if default else []), *(allowed or ())]))

    async def _missing_resources(self, api: KubeApi) -> list[str]:
        missing: list[str] = []
        for group, version in dict.fromkeys((r.group, r.version) for r in self.resources):
            try:
                served = await api.served_plurals(group, version, f"discover {group}/{version}")
            except NotFound:
                served = set()
            missing += [
                f"{r.plural}.{group}/{version}"
                for r in self.resources
                if (r.group, r.version) == (group, version) and r.plural not in served
            ]
        return missing

    async def submit(self, spec: JobSpec, owner: str) -> Job:
        self.check_fault_tolerance(spec)
        await self._check_resume_from(spec, owner)
        api = await self.api()
        namespace = self._namespace(spec, owner)
        await self._check_unfinished(api, namespace, owner)
        for _ in range(10):
            target = Target(jobids.new_job_id(spec.name), namespace, owner)
            manifest, code = self.build(spec, target)
            try:
                prepared = await self.prepare_job(api, spec, target)
                created = await self._create_job(api, spec, target, manifest, prepared)
                break
            except DistrunError as error:
                if "already exists" not in str(error):
                    raise
        else:
            raise EngineError("could not find a free job id; try again")
        await self._adopt(api, created, prepared)
        await self._create_configmap(api, created, code)
        return describe(self.name, created, spec, {}, self.phase(created))

    async def prepare_job(self, api: KubeApi, spec: JobSpec, target: Target) -> list[str]:
        """Makes what the job needs before it is created (Trainer: a whole-job restart's
        runtime) and names it; `adopt_prepared` hands it to the job, `remove_prepared` removes it."""
        return []

    async def adopt_prepared(self, api: KubeApi, job: Obj, prepared: list[str]) -> None:
        """Makes the job the owner of what `prepare_job` made, so it goes with the job."""

    async def remove_prepared(self, api: KubeApi, namespace: str, prepared: list[str]) -> None:
        """Removes what `prepare_job` made (the job could not be made, or not given it)."""

    async def _create_job(
        self, api: KubeApi, spec: JobSpec, target: Target, manifest: Obj, prepared: list[str]
    ) -> Obj:
        resource = self.resource_for(spec)
        try:
            return await api.create(resource, target.namespace, manifest, "create the job")
        except DistrunError:
            await self.remove_prepared(api, target.namespace, prepared)
            raise

    async def _adopt(self, api: KubeApi, job: Obj, prepared: list[str]) -> None:
        """`adopt_prepared`; what cannot be handed over takes the job with it: nothing is left behind."""
        meta = job["metadata"]
        try:
            await self.adopt_prepared(api, job, prepared)
        except DistrunError:
            await self.remove_prepared(api, meta["namespace"], prepared)
            with contextlib.suppress(DistrunError):
                await api.delete(
                    self.resource_of(job), meta["namespace"], meta["name"], "remove it"
                )
            raise

    async def _check_resume_from(self, spec: JobSpec, owner: str) -> None:
        """A job resumes only one of its owner's, from the checkpoint volume they share."""
        if spec.resume_from is None:
            return
        if spec.checkpoint_volume is None:
            raise SpecError(
                "resume_from needs the earlier job's checkpoint volume on a Kubernetes "
                "engine: add %checkpointVolume=<its PersistentVolumeClaim>",
                field="resume_from",
            )
        try:  # the object alone: get_job would also list its pods and read its ledger
            await self._owned_object(await self.api(), spec.resume_from, owner)
        except NotFound:
            raise SpecError(
                f"resume_from: you have no job {spec.resume_from!r} on the {self.name} engine "
                "to resume from (distrun list shows your jobs)",
                field="resume_from",
            ) from None

    async def list_jobs(self, owner: str) -> list[Job]:
        api = await self.api()
        namespace = self.namespace_for(owner)
        selector = owner_selector(owner)
        objects = await self._list_objects(api, namespace, selector)
        pods = await api.list(PODS, namespace, selector, "list the jobs' pods")
        books = await self._restart_books(api, namespace, selector)
        by_job: dict[str, list[Obj]] = {}
        for pod in pods.get("items", []):
            instance = pod["metadata"].get("labels", {}).get(LABEL_INSTANCE, "")
            by_job.setdefault(instance, []).append(pod)
        jobs = []
        for obj in objects:
            if _owner(obj) != owner:
                continue
            try:
                spec = stored_spec(obj)
            except Conflict as error:
                jobs.append(unreadable_job(self.name, obj, error))
                continue
            name = obj["metadata"]["name"]
            replicas = self.replica_pods(by_job.get(name, []), spec)
            jobs.append(self.describe_job(obj, spec, replicas, books.get(name)))
        return sorted(jobs, key=lambda job: job.created_at, reverse=True)

    async def _restart_books(
        self, api: KubeApi, namespace: str, selector: str
    ) -> dict[str, RestartBook]:
        """The restart ledgers of the jobs `selector` picks, by job: one list of their code
        ConfigMaps' metadata (the ledger is an annotation), read only, never written here."""
        maps = await api.list_metadata(CONFIGMAPS, namespace, selector, "read restart ledgers")
        books = {}
        for item in maps.get("items") or []:  # null when none
            meta = item.get("metadata") or {}
            raw = (meta.get("annotations") or {}).get(RESTARTS_ANNOTATION)
            if raw:
                books[str(meta.get("name"))] = read_restarts(raw)
        return books

    async def get_job(self, job_id: str, owner: str) -> Job:
        """The job as its feed keeps it when this process follows it (no request), else from
        the namespace's informers when they hold it (no GET of the job, no LIST of its pods),
        else from the API server. The owner is checked against the object in every case."""
        followed = await self._followed_job(job_id, owner)
        if followed is not None:
            return followed
        api = await self.api()
        informed = await self._informed(self.namespace_for(owner), job_id)
        obj = informed[0] if informed else await self._owned_object(api, job_id, owner)
        if not _owned_by(obj, owner):
            raise NotFound(f"no job {job_id!r}")
        try:
            spec = stored_spec(obj)
        except Conflict as error:
            return unreadable_job(self.name, obj, error)
        if informed is not None:
            pods = self.replica_pods(list(informed[1].values()), spec)
        else:
            pods = await self._pods(api, obj, spec)
        restarts = await self._record_restarts(api, obj, spec, pods)
        job = self.describe_job(obj, spec, pods, restarts)
        if job.state == JobState.PENDING:
            job.reason = await self.waiting_reason(api, obj, job) or job.reason
        if job.failed_replica and job.failed_replica in pods:
            job.last_lines = await self._last_lines(api, pods[job.failed_replica], spec)
        return job

    async def _followed_job(self, job_id: str, owner: str) -> Job | None:
        """The job as the feed that follows it in this process describes it (its object and
        pods from the informers, its restarts and waiting word kept up to date); None when no
        feed follows it, or its description lacks what a read adds (a failed replica's last
        lines)."""
        jobids.check_job_id(job_id)
        feed = self._feeds.get((self.namespace_for(owner), job_id))
        if feed is None or feed.gone:
            return None
        with contextlib.suppress(Exception):
            await asyncio.shield(feed.started)
        if not feed.started.done() or feed.started.cancelled() or feed.started.exception():
            return None
        if feed.gone or not _owned_by(feed.obj, owner) or feed.job.failed_replica:
            return None  # the API server's answer: NotFound, or the failed replica's lines
        return copy.copy(feed.job)

    async def _informed(self, namespace: str, job_id: str) -> tuple[Obj, dict[str, Obj]] | None:
        """The job object and its pods (by name) as the namespace's informers hold them, when
        both run (a feed in the namespace started them; their first list awaited) and hold
        the job; None: ask the API server (a job made since their last event is not there)."""
        pod_selector, _label = across_jobs(self.pod_selector(job_id), job_id)
        pods = await self._informers.synced(namespace, PODS, pod_selector)
        if pods is None:
            return None
        for resource in self.resources:
            jobs = await self._informers.synced(namespace, resource, LABEL_INSTANCE)
            obj = jobs.get(job_id) if jobs is not None else None
            if obj is not None:
                return obj, pods.objects_of(job_id)
        return None

    async def _record_restarts(
        self, api: KubeApi, obj: Obj, spec: JobSpec, pods: dict[str, Obj]
    ) -> RestartBook:
        """The job's restart ledger (restart_ledger.py), with what `pods` add to it written
        back; as it was read when it cannot be written (it is a record, not the job)."""
        ledger = self.log_context(api, obj).ledger
        with contextlib.suppress(DistrunError):
            await ledger.load()
        book = copy.deepcopy(ledger.restarts)
        before = lasting_part(book)
        peaks = self.usage_peaks(obj)
        for name, pod in pods.items():
            observe(book, name, pod, self.pod_attempt(pod), peaks.get(name))
        if lasting_part(book) != before:
            with contextlib.suppress(DistrunError):
                await ledger.record_restarts(book)
        return book

    async def cancel(self, job_id: str, owner: str) -> Job:
        api = await self.api()
        obj = await self._owned_object(api, job_id, owner)
        try:
            spec = stored_spec(obj)
        except Conflict as error:  # nothing of distrun's runs it: take it away
            await self.delete(job_id, owner)
            return unreadable_job(self.name, obj, error)
        job = describe(self.name, obj, spec, {}, self.phase(obj))
        if job.state.terminal:
            await self._stop_running_pods(api, obj, spec)
            return await self.get_job(job_id, owner)
        try:
            await self.before_removal(api, obj)
            namespace = obj["metadata"]["namespace"]
            deleted = await api.delete(
                self.resource_of(obj),
                namespace,
                job_id,
                "cancel the job",
                self.deletion_propagation,
            )
            # A job that waits for its dependents comes back marked; one deleted in the
            # Background is gone, and the answer is a Status, not the job.
            if deleted.get("kind") == obj.get("kind"):
                obj = deleted
        except NotFound:
            pass
        obj.setdefault("metadata", {}).setdefault("deletionTimestamp", "now")
        return describe(self.name, obj, spec, {}, self.phase(obj))

    async def before_removal(self, api: KubeApi, obj: Obj) -> None:
        """What a kind needs done to its running object before cancel or delete removes it
        (Trainer: suspend the TrainJob); nothing by default."""

    async def delete(self, job_id: str, owner: str) -> None:
        api = await self.api()
        obj = await self._owned_object(api, job_id, owner)
        with contextlib.suppress(NotFound):
            await self.before_removal(api, obj)
            namespace = obj["metadata"]["namespace"]
            await api.delete(
                self.resource_of(obj),
                namespace,
                job_id,
                "delete the job",
                self.deletion_propagation,
            )

    async def read_logs(
        self,
        job_id: str,
        owner: str,
        *,
        since: Cursor | None = None,
        replicas: set[str] | None = None,
        limit: int = 10_000,
    ) -> list[LogLine]:
        if limit < 1:
            raise SpecError(f"limit must be at least 1, not {limit}", field="limit")
        api = await self.api()
        obj, spec = await self._get_owned(api, job_id, owner)
        names = selected_replicas(job_id, spec.replica_names(), replicas)
        starts = start_seqs(names, since)
        pods = await self._pods(api, obj, spec)
        ctx = self.log_context(api, obj)
        await ctx.ledger.load()
        lines: list[LogLine] = []
        for name in names:
            if name in pods:
                instance = current_instance(name, pods[name], self.container_name(spec))
                lines += await read_replica(ctx, instance, starts[name], limit)
        lines.sort(key=lambda line: line.time)
        return lines[:limit]

    async def read_partials(
        self, job_id: str, owner: str, *, replicas: set[str] | None = None
    ) -> list[LogLine]:
        api = await self.api()
        obj, spec = await self._get_owned(api, job_id, owner)
        names = selected_replicas(job_id, spec.replica_names(), replicas)
        pods = await self._pods(api, obj, spec)
        ctx = self.log_context(api, obj)
        await ctx.ledger.load()
        found = []
        for name in names:
            if name in pods:
                instance = current_instance(name, pods[name], self.container_name(spec))
                found.append(await read_unfinished(ctx, instance))
        return [line for line in found if line is not None]

    async def follow(
        self,
        job_id: str,
        owner: str,
        *,
        since: Cursor | None = None,
        replicas: set[str] | None = None,
        max_batch: int = 5_000,
    ) -> AsyncIterator[LogEvent]:
        """Every follower of a job in this process shares one feed (feeds.py): one watch of
        the job, one of its pods and one log stream per replica, whatever their number."""
        if max_batch < 1:
            raise SpecError(f"max_batch must be at least 1, not {max_batch}", field="max_batch")
        feed = await self._join_feed(job_id, owner)
        try:
            names = selected_replicas(job_id, feed.spec.replica_names(), replicas)
            starts = start_seqs(names, since)
            async for event in follow_feed(feed, names, starts, max_batch):
                yield event
        finally:
            await self._leave_feed(feed)

    async def read_usage(self, job_id: str, owner: str, *, since: int = 0) -> UsageReport:
        api = await self.api()
        obj, spec = await self._get_owned(api, job_id, owner)
        return await self._usage_of(api, obj["metadata"]["namespace"], job_id, spec, since)

    async def follow_usage(
        self, job_id: str, owner: str, *, since: int = 0
    ) -> AsyncIterator[UsageUpdate]:
        """New samples every interval while the job runs; the job and its state come from its
        feed (the watch its log followers share), so following asks only for the usage."""
        feed = await self._join_feed(job_id, owner)
        try:
            while True:
                over = feed.gone or feed.job.state.terminal
                report = await self._usage_of(feed.api, feed.namespace, job_id, feed.spec, since)
                if report.samples:
                    since = report.samples[-1].seq + 1
                    yield UsageUpdate(report.samples)
                if over or not report.available:
                    return
                await asyncio.sleep(self._usage.interval)
        finally:
            await self._leave_feed(feed)

    async def _usage_of(
        self, api: KubeApi, namespace: str, job_id: str, spec: JobSpec, since: int
    ) -> UsageReport:
        selector = self.pod_selector(job_id)
        return await self._usage.report(
            api, namespace, job_id, spec, selector, self.replica_of, since
        )

    async def _join_feed(self, job_id: str, owner: str) -> JobFeed:
        """The job's feed, started if none runs; the owner is checked against the job object
        the feed keeps up to date (a follower of a followed job costs the API server nothing)."""
        jobids.check_job_id(job_id)
        key = (self.namespace_for(owner), job_id)
        feed = self._feeds.get(key)
        if feed is None or feed.gone:
            api = await self.api()
            informed = await self._informed(key[0], job_id)
            if informed is not None and _owned_by(informed[0], owner):
                obj, spec = informed[0], stored_spec(informed[0])
            else:
                obj, spec = await self._get_owned(api, job_id, owner)
            feed = self._feeds.get(key)
            if feed is None or feed.gone:
                feed = self._feeds[key] = JobFeed(self, api, obj, spec, self._informers)
        feed.viewers += 1
        try:
            await asyncio.shield(feed.started)
            if not _owned_by(feed.obj, owner):
                raise NotFound(f"no job {job_id!r}")
        except BaseException:
            await self._leave_feed(feed)
            raise
        return feed

    async def _leave_feed(self, feed: JobFeed) -> None:
        feed.viewers -= 1
        if feed.viewers > 0:
            return
        key = (feed.namespace, feed.job_id)
        if self._feeds.get(key) is feed:
            del self._feeds[key]
        await feed.stop()

    async def close(self) -> None:
        feeds, self._feeds = list(self._feeds.values()), {}
        await asyncio.gather(*(feed.stop() for feed in feeds), return_exceptions=True)
        await self._informers.close()
        if self._api is not None:
            await self._api.close()
        self._api = None

    # --- helpers ---

    async def api(self) -> KubeApi:
        async with self._api_lock:
            if self._api is None:
                api_client = await new_api_client(self._kubeconfig, self._context)
                self._api = KubeApi(api_client, http2_logs=self._log_http2)
            return self._api

    def namespace_for(self, owner: str) -> str:
        return namespace_for(self.namespace_template, owner)

    def _namespace(self, spec: JobSpec, owner: str) -> str:
        namespace = self.namespace_for(owner)
        if spec.namespace is not None and spec.namespace != namespace:
            raise Forbidden(
                f"this server runs your jobs in namespace {namespace}, not {spec.namespace}; "
                "leave namespace out",
            )
        return namespace

    async def _check_unfinished(self, api: KubeApi, namespace: str, owner: str) -> None:
        """Refuses a job beyond the user's limit of unfinished ones. Every job has a code
        ConfigMap: while the user has fewer jobs than the limit in all, one list of their
        metadata decides (no list per job kind)."""
        maps = await api.list_metadata(
            CONFIGMAPS, namespace, owner_selector(owner), "count your jobs"
        )
        if sum(_owner(m) == owner for m in maps.get("items") or []) < self.limits.max_jobs_per_user:
            return
        objects = await self._list_objects(api, namespace, owner_selector(owner))
        unfinished = [
            obj
            for obj in objects
            if _owner(obj) == owner
            and not obj["metadata"].get("deletionTimestamp")
            and not (self.phase(obj).state or JobState.PENDING).terminal
        ]
        if len(unfinished) >= self.limits.max_jobs_per_user:
            raise LimitExceeded(
                f"you have {len(unfinished)} unfinished jobs, the limit is "
                f"{self.limits.max_jobs_per_user}; cancel or wait for one first"
            )

    async def _create_configmap(self, api: KubeApi, job: Obj, code: CodeBundle) -> None:
        """The code's ConfigMap, owned by the job from its first moment, so it can never
        outlive it. Pods created before it wait for their volume; if it cannot be made, the
        job goes too."""
        meta = job["metadata"]
        configmap = dict(code.configmap)
        configmap["metadata"] = {
            **configmap["metadata"],
            "ownerReferences": [owner_reference(job)],
        }
        try:
            await api.create(CONFIGMAPS, meta["namespace"], configmap, "store the job's code")
        except DistrunError:
            with contextlib.suppress(DistrunError):
                await api.delete(
                    self.resource_of(job), meta["namespace"], meta["name"], "remove it"
                )
            raise

    async def _get_owned(self, api: KubeApi, job_id: str, owner: str) -> tuple[Obj, JobSpec]:
        """The job object and its spec; Conflict when the spec cannot be read."""
        obj = await self._owned_object(api, job_id, owner)
        return obj, stored_spec(obj)

    async def _owned_object(self, api: KubeApi, job_id: str, owner: str) -> Obj:
        jobids.check_job_id(job_id)
        key = (self.namespace_for(owner), job_id)
        reading = self._reading.get(key)
        if reading is None:  # reads of a job asked for while one is in flight share it
            reading = self._reading[key] = asyncio.ensure_future(self._read_object(api, *key))
            reading.add_done_callback(lambda done: self._read_done(key, done))
        obj = copy.deepcopy(await asyncio.shield(reading))
        if not _owned_by(obj, owner):
            raise NotFound(f"no job {job_id!r}")
        return obj

    async def _read_object(self, api: KubeApi, namespace: str, job_id: str) -> Obj:
        for resource in await self.candidates(api, namespace, job_id):
            try:
                return await api.get(resource, namespace, job_id, "read the job")
            except NotFound:
                continue
        raise NotFound(f"no job {job_id!r}")

    def _read_done(self, key: tuple[str, str], done: "asyncio.Future[Obj]") -> None:
        if self._reading.get(key) is done:
            del self._reading[key]
        if not done.cancelled():
            done.exception()  # retrieved, whether or not a reader is still there to see it

    async def _list_objects(self, api: KubeApi, namespace: str, selector: str) -> list[Obj]:
        objects: list[Obj] = []
        for resource in self.resources:
            listed = await api.list(resource, namespace, selector, "list jobs")
            objects += listed.get("items", [])
        return objects

    async def _pods(self, api: KubeApi, obj: Obj, spec: JobSpec) -> dict[str, Obj]:
        meta = obj["metadata"]
        pods = await api.list(PODS, meta["namespace"], self.pod_selector(meta["name"]), "list pods")
        return self.replica_pods(pods.get("items", []), spec)

    async def _stop_running_pods(self, api: KubeApi, obj: Obj, spec: JobSpec) -> None:
        """Deletes the pods of an ended job that still run (kept by cleanPodPolicy None, or
        left by a controller): they hold their node's resources, GPUs included, for nothing."""
        for pod in (await self._pods(api, obj, spec)).values():
            if pod.get("status", {}).get("phase") in ("Pending", "Running", None):
                with contextlib.suppress(NotFound):
                    name = pod["metadata"]["name"]
                    await api.delete(PODS, pod["metadata"]["namespace"], name, "stop a replica")

    def replica_pods(self, pods: list[Obj], spec: JobSpec) -> dict[str, Obj]:
        """The newest pod of each replica (an operator may be replacing an old one)."""
        chosen: dict[str, Obj] = {}
        for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", "")):
            replica = self.replica_of(pod, spec)
            if replica is not None:
                chosen[replica] = pod
        return chosen

    def log_context(self, api: KubeApi, obj: Obj) -> LogContext:
        meta = obj["metadata"]
        ledger = LedgerStore(api, meta["namespace"], meta["name"], self.anchor_policy)
        return LogContext(api, meta["namespace"], ledger, self.limits.max_log_line_bytes)

    async def _last_lines(self, api: KubeApi, pod: Obj, spec: JobSpec) -> list[str]:
        try:
            data = await api.read_log(
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                self.container_name(spec),
                tail_lines=LAST_LINES,
            )
        except DistrunError:
            return []
        return [parse_line(raw, self.limits.max_log_line_bytes)[1] for raw in split_log(data)]


# --- pure functions of what the API server holds ----------------------------------------------


def stored_spec(obj: Obj) -> JobSpec:
    """The spec recorded on the job object at submission, validated as a new one is (anyone
    who may write the object may have written it); Conflict when it is not a valid spec."""
    name = obj.get("metadata", {}).get("name")
    try:
        data = json.loads((obj["metadata"].get("annotations") or {})[ANNOTATION_SPEC])
        return JobSpec.from_dict(data, _STORED_SPEC_LIMITS)
    except (KeyError, TypeError, ValueError, RecursionError, SpecError) as error:
        raise Conflict(
            f"job {name} carries no valid distrun spec ({str(error)[:200]}); delete it"
        ) from None


def unreadable_job(engine: str, obj: Obj, error: Conflict) -> Job:
    """A job object whose spec cannot be read: shown as such, with why."""
    meta = obj["metadata"]
    return Job(
        id=meta["name"],
        name=meta["name"],
        owner=_owner(obj) or "",
        engine=engine,
        framework="generic",
        state=JobState.FAILED,
        created_at=k8s_time(meta.get("creationTimestamp")) or 0.0,
        replicas=[],
        spec=JobSpec.from_dict({"framework": "generic", "code": ""}),
        reason=str(error),
    )


def _owned_by(obj: Obj, owner: str) -> bool:
    labels = obj["metadata"].get("labels", {})
    return _owner(obj) == owner and labels.get(LABEL_MANAGED_BY) == "distrun"


def _owner(obj: Obj) -> str | None:
    return (obj.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_OWNER)


def k8s_time(value: Any) -> float | None:
    return parse_time(value) if isinstance(value, str) else None


def describe(
    engine: str,
    obj: Obj,
    spec: JobSpec,
    pods: dict[str, Obj],
    phase: Phase,
    restarts: RestartBook | None = None,
    peaks: dict[str, int] | None = None,
    pod_attempt: Callable[[Obj], int] = lambda pod: 1,
) -> Job:
    """The job as the API server shows it: the object's status first, pods for the detail,
    and what the restart ledger kept of pods the controller deleted; `peaks`: each replica's
    largest working set metrics-server gave, where known (an OOM kill's words name it);
    `pod_attempt`: which attempt of the job a pod runs."""
    meta = obj["metadata"]
    replicas = [
        replica_status(name, pods.get(name), (peaks or {}).get(name))
        for name in spec.replica_names()
    ]
    apply_restarts(restarts or {}, replicas, pods)
    for replica in replicas:
        replica.restarts += phase.restarts
    plan = restart_plan(spec)
    state, reason = phase.state, phase.reason
    if state is None:  # the object does not say: the pods do
        state = (
            JobState.RUNNING
            if any(r.state != JobState.PENDING for r in replicas)
            else JobState.PENDING
        )
    if meta.get("deletionTimestamp") and not state.terminal:
        state, reason = JobState.CANCELLED, CANCELLED_REASON
    if state.terminal:
        _mark_removed(replicas, pods)
    failed = next((r for r in replicas if r.state == JobState.FAILED), None)
    if state == JobState.FAILED and failed is None:  # its pod is gone: the ledger says
        failed = blame(restarts or {}, replicas)
    if state == JobState.PENDING and reason is None:
        reason = pending_reason(replicas) or "waiting for the controller to create the pods"
    if state == JobState.FAILED and failed is not None:
        # The replica and its exit, as the local engine says it, not the controller's summary
        # (the Training Operator words a failure with no restart asked as a backoff limit).
        reason = failure_text(failed.name, failed.reason or "no exit code")
    started = phase.started_at or min(
        (r.started_at for r in replicas if r.started_at is not None), default=None
    )
    finished = phase.finished_at
    if state.terminal and finished is None:
        finished = max((r.finished_at for r in replicas if r.finished_at), default=None)
    attempt = phase.restarts + 1  # a whole-job restart recreates every pod: the controller's
    scope = plan.scope and (phase.restart_scope or plan.scope)
    attempts = Attempts(
        attempt,
        plan.limit,
        scope,
        phase.attempt_started_at or (started if attempt == 1 else None),
        phase.restarted_at,
        sum(r.restarts for r in replicas) if scope == "replica" else 0,
    )
    seen = copy.deepcopy(restarts or {})  # with what the pods say now, read only
    for name, pod in pods.items():
        observe(seen, name, pod, pod_attempt(pod), (peaks or {}).get(name))
    created = k8s_time(meta.get("creationTimestamp")) or 0.0
    return Job(
        id=meta["name"],
        name=spec.name,
        owner=_owner(obj) or "",
        engine=engine,
        framework=spec.framework,
        state=state,
        created_at=created,
        replicas=replicas,
        spec=spec,
        started_at=started,
        finished_at=finished,
        reason=reason,
        failed_replica=failed.name if failed is not None and state == JobState.FAILED else None,
        attempt=attempt,
        max_restarts=plan.limit,
        restart_scope=scope,
        timeline=kube_timeline(created, seen, attempts, state, finished, reason),
    )


def annotated_count(pod: Obj, key: str) -> int:
    """A count a controller wrote into the pod's annotation `key` (0 when absent or not one):
    ASCII digits, few enough for a count ("²".isdigit() holds, and int() refuses it)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(key, "")
    valid = isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 6
    return int(value) if valid else 0


def owner_reference(job: Obj) -> Obj:
    """An ownerReferences entry naming `job`: the garbage collector removes what carries it."""
    meta = job["metadata"]
    return {
        "apiVersion": job["apiVersion"],
        "kind": job["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
    }


def _mark_removed(replicas: list[ReplicaStatus], pods: dict[str, Obj]) -> None:
    """A replica of an ended job with no pod was stopped with it: the controller removes the
    pods still running when a job ends (cleanPodPolicy Running, Volcano's CompleteJob). Not
    "no pod yet": no pod is coming."""
    for replica in replicas:
        if replica.name not in pods and replica.state == JobState.PENDING:
            replica.state = JobState.CANCELLED
            replica.reason = REMOVED_REASON


def replica_status(name: str, pod: Obj | None, peak: int | None = None) -> ReplicaStatus:
    role, index = name.rsplit("-", 1)
    status = ReplicaStatus(name=name, role=role, index=int(index))
    if pod is None:
        status.reason = "no pod yet"
        return status
    status.gpu = pod_gpus(pod)
    pod_status = pod.get("status") or {}
    containers = pod_status.get("containerStatuses") or []
    container = containers[0] if containers else {}
    state = container.get("state") or {}
    status.restarts = int(container.get("restartCount", 0))
    running, terminated, waiting = (
        state.get("running"),
        state.get("terminated"),
        state.get("waiting"),
    )
    phase = pod_status.get("phase", "Pending")
    if running:
        status.started_at = k8s_time(running.get("startedAt"))
    if terminated:
        status.started_at = k8s_time(terminated.get("startedAt"))
        status.finished_at = k8s_time(terminated.get("finishedAt"))
        status.exit_code = terminated.get("exitCode")
    if phase == "Running":
        status.state = JobState.RUNNING
    elif phase == "Succeeded":
        status.state = JobState.SUCCEEDED
    elif phase == "Failed":
        status.state = JobState.FAILED
        status.reason = attempt_words(pod, terminated or {}, peak)
    else:
        status.reason = _pending_pod_reason(pod, waiting)
    if status.state == JobState.RUNNING and waiting:
        status.reason = _words(waiting, "waiting")  # e.g. CrashLoopBackOff between restarts
    return status


def _pending_pod_reason(pod: Obj, waiting: Obj | None) -> str:
    pod_status = pod.get("status") or {}
    for condition in pod_status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return _words(condition, "not scheduled") + gpu_shortage(condition.get("message", ""))
    if waiting:
        return _words(waiting, "waiting")
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return f"starting on node {node}"
    return "waiting to be scheduled" if not pod_status.get("conditions") else "starting"


def _words(status: Obj, default: str) -> str:
    """ "Reason: message" of a condition or a container's waiting state."""
    why = status.get("reason") or default
    return f"{why}: {status.get('message', '')}".strip(": ")


def pending_reason(replicas: list[ReplicaStatus]) -> str | None:
    pending = [r for r in replicas if r.state == JobState.PENDING and r.reason != "no pod yet"]
    if not pending:
        return None
    first = pending[0]
    others = f" (and {len(pending) - 1} more)" if len(pending) > 1 else ""
    return f"{first.name}: {first.reason}{others}"


def conditions_phase(obj: Obj, terminal: dict[str, JobState], running: tuple[str, ...]) -> Phase:
    """A phase from `status.conditions`: of the terminal types that are True, the one that
    became so last wins (a job can fail after it was once marked otherwise); else running."""
    conditions = [
        c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"
    ]
    status = obj.get("status") or {}
    started = k8s_time(status.get("startTime"))
    ends = [c for c in conditions if c.get("type") in terminal]
    if ends:
        last = max(enumerate(ends), key=lambda ic: (ic[1].get("lastTransitionTime") or "", ic[0]))[
            1
        ]
        finished = k8s_time(status.get("completionTime")) or k8s_time(
            last.get("lastTransitionTime")
        )
        return Phase(terminal[last["type"]], last.get("message") or None, started, finished)
    if any(c.get("type") in running for c in conditions):
        return Phase(JobState.RUNNING, None, started)
    return Phase(None, None, started)
