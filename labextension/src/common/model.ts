/**
 * The server's JSON shapes (see the API contract), typed once for every module.
 */

export type JobState =
  'pending' | 'running' | 'succeeded' | 'failed' | 'cancelled';

export interface IReplicaStatus {
  name: string;
  role: string;
  index: number;
  state: JobState;
  exit_code: number | null;
  restarts: number;
  started_at: number | null;
  finished_at: number | null;
  reason: string | null;
  /** The device(s) or share it got, in words; null (or absent, older servers): no GPU. */
  gpu?: string | null;
}

export interface IRoleSpec {
  replicas: number;
  resources?: {
    cpu?: string | null;
    memory?: string | null;
    gpu?: number | string;
    gpu_memory?: string | null;
  };
}

export interface IJobSpec {
  framework: string;
  roles: Record<string, IRoleSpec>;
  name?: string;
  [field: string]: unknown;
}

/** One moment of a job's life (submitted, started, failed, restarting, resumed, ended). */
export interface ITimelineEvent {
  time: number;
  kind: string;
  attempt: number;
  text: string;
  replica: string | null;
  exit_code: number | null;
  signal: string | null;
  oom: boolean;
  step: number | null;
}

export interface IJob {
  id: string;
  name: string;
  owner: string;
  engine: string;
  framework: string;
  state: JobState;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  replicas: IReplicaStatus[];
  replicas_running: number;
  spec: IJobSpec;
  reason: string | null;
  failed_replica: string | null;
  last_lines: string[];
  /** Which run of the job this is (1, then 2 after a whole-job restart); absent: older servers. */
  attempt?: number;
  max_restarts?: number;
  restart_scope?: 'job' | 'replica' | null;
  timeline?: ITimelineEvent[];
  last_failure?: ITimelineEvent | null;
  /** Once failed: each replica's last traceback, the same one on several replicas once. */
  tracebacks?: ITracebackGroup[];
}

export interface ITracebackGroup {
  replicas: string[];
  lines: string[];
}

/** A device a replica holds: its utilisation and the replica's memory on it (NVML). */
export interface IGpuUsage {
  index: number;
  utilization_percent: number | null;
  memory_bytes: number | null;
}

/** A replica's process tree at one sample: CPU (100 = one core), resident memory. */
export interface IReplicaUsage {
  cpu_percent: number;
  rss_bytes: number;
  processes: number;
  gpus: IGpuUsage[];
}

/** One sample of every replica running then, numbered from 0 per job (core/usage.py). */
export interface IUsageSample {
  seq: number;
  time: number;
  replicas: Record<string, IReplicaUsage>;
}

export interface IJobList {
  jobs: IJob[];
}

/** One captured line: replica name, per-replica sequence number, capture time, text. */
export type LogTuple = [
  replica: string,
  seq: number,
  time: number,
  text: string
];

/**
 * Consecutive lines of one replica, in columns: line `seq + i` was captured at
 * `times_ms[i]` (epoch milliseconds) and reads `texts[i]`.
 */
export interface ILineRun {
  replica: string;
  seq: number;
  times_ms: number[];
  texts: string[];
}

/** A server -> client websocket frame of `/distrun/jobs/{id}/logs/stream`. */
/** The log stream's versions, newest first (core/stream_versions.py). */
export const STREAM_PROTOCOLS = [
  'distrun.logs.v3',
  'distrun.logs.v2',
  'distrun.logs.v1'
];

/**
 * The header that names the ticket of a log stream opened before its job exists
 * (server_ext/distrun/server/stream_tickets.py); a server without it ignores the header.
 */
export const STREAM_TICKET_HEADER = 'Distrun-Stream-Ticket';

/**
 * The version of the REST resources this extension parses, sent with every request in the
 * `Distrun-API-Version` header (server_ext/distrun/core/api_versions.py): a server that does
 * not serve it answers 406 with a message saying so.
 */
export const API_VERSION_HEADER = 'Distrun-API-Version';
export const REST_API_VERSION = '1';

export type StreamMessage =
  | { type: 'runs'; runs: ILineRun[] }
  /** Version 1 (a server that selected it, or none): a row per line. */
  | { type: 'lines'; lines: LogTuple[] }
  /** Replicas' unfinished lines (a progress bar being drawn), as a terminal shows them. */
  | { type: 'partial'; lines: LogTuple[] }
  | { type: 'status'; job: IJob }
  /** Version 3: the replicas' sampled usage, from `usage_since` on. */
  | { type: 'usage'; samples: IUsageSample[] }
  | { type: 'end' }
  | { type: 'error'; message: string };

/** The body of `POST /distrun/jobs` for a cell. */
export interface ISubmitCell {
  cell: string;
  cwd?: string;
  overrides?: Partial<IJobSpec>;
}

export const TERMINAL_STATES: ReadonlySet<JobState> = new Set([
  'succeeded',
  'failed',
  'cancelled'
]);

export function isTerminal(state: JobState): boolean {
  return TERMINAL_STATES.has(state);
}

/** Job ids are DNS-1035 labels of at most 40 characters (the server 404s anything else). */
export function isJobId(value: unknown): value is string {
  return (
    typeof value === 'string' &&
    value.length <= 40 &&
    /^[a-z]([-a-z0-9]*[a-z0-9])?$/.test(value)
  );
}

/** A metric's points: [step, value] (a line naming no step counts as the next report). */
export type MetricPoint = [step: number, value: number];

export interface ISweepTrial {
  number: number;
  job_id: string;
  params: Record<string, number | string>;
  /** In a tpe/bayes search, what proposed its parameters: the model or a first random draw. */
  origin?: 'tpe' | 'random' | null;
  /** The job's state, or 'stopped' when the sweep's stopping rule (median, asha) stopped it. */
  state: JobState | 'stopped';
  /** asha: the rung (0 the first) and its step where the trial was stopped. */
  rung?: number | null;
  rung_step?: number | null;
  objective: number | null;
  started_at: number | null;
  finished_at: number | null;
  /** Present when the server read the trial's log (one sweep, not the list). */
  metrics?: Record<string, number>;
  series?: Record<string, MetricPoint[]>;
}

export interface ISweepObjective {
  metric: string;
  goal: 'min' | 'max';
  read: 'last' | 'best';
}

export interface ISweep {
  id: string;
  name: string;
  engine: string | null;
  definition: {
    params: Record<string, Record<string, unknown[]>>;
    objective: ISweepObjective | null;
    [field: string]: unknown;
  } | null;
  trials_total: number;
  counts: Record<string, number>;
  ended: boolean;
  created_at: number | null;
  best: number | null;
  trials: ISweepTrial[];
}

/** `GET /distrun/jobs/{id}/scalars`: replica -> TensorBoard tag -> [step, value] points. */
/** `GET /distrun/jobs/{id}/usage` (core/usage.py's UsageReport). */
export interface IUsageReport {
  available: boolean;
  /** Why the engine does not sample this job, where it does not. */
  reason: string | null;
  interval_seconds: number | null;
  memory_limits: Record<string, number>;
  samples: IUsageSample[];
  next: number | null;
  /** What it cannot measure of this job, in words (a GPU metrics-server does not report). */
  notes: string[];
}

export interface IScalarsReport {
  available: boolean;
  reason: string | null;
  replicas: Record<string, Record<string, [number, number][]>>;
}

export interface IJobMetrics {
  id: string;
  metrics: Record<string, number>;
  series: Record<string, MetricPoint[]>;
}

/** The environment variable naming a trial's sweep and number: "<sweep id>/<n>". */
export const SWEEP_ENV = 'DISTRUN_SWEEP';
/** What a trial's environment carries beyond its parameters, to be a sweep's trial. */
export const TRIAL_ONLY_ENV: ReadonlySet<string> = new Set([
  SWEEP_ENV,
  'DISTRUN_SWEEP_SPEC'
]);

/** [sweep id, trial number] of a job that is a sweep's trial, else null. */
export function trialOf(job: IJob): [string, number] | null {
  const env = (job.spec.env ?? {}) as Record<string, string>;
  const match = /^([^/]+)\/(\d+)$/.exec(env[SWEEP_ENV] ?? '');
  return match ? [match[1], Number(match[2])] : null;
}

/** The spec less what made it a trial (its parameters stay): a trial run again on its own. */
export function withoutTrialEnv(spec: IJobSpec): IJobSpec {
  const env = (spec.env ?? {}) as Record<string, string>;
  const kept = Object.entries(env).filter(([key]) => !TRIAL_ONLY_ENV.has(key));
  return { ...spec, env: Object.fromEntries(kept) };
}
