/**
 * Words for a job's state, age and duration. Pure functions: the translation bundle is
 * passed in, so they run the same in the browser and in unit tests.
 */

import { IJob, IReplicaStatus, JobState } from './model';
import { describeWaiting } from './stuck';
import { ITrans } from './trans';

/** The state in one translated word, for badges. */
export function stateLabel(state: JobState, trans: ITrans): string {
  switch (state) {
    case 'pending':
      return trans.__('pending');
    case 'running':
      return trans.__('running');
    case 'succeeded':
      return trans.__('succeeded');
    case 'failed':
      return trans.__('failed');
    case 'cancelled':
      return trans.__('cancelled');
  }
}

/** One status line: `pending`, `running 2/3`, `succeeded in 12 s`, `failed: worker-1 ...`. */
export function formatStatus(job: IJob, trans: ITrans, now?: number): string {
  const total = job.replicas.length;
  switch (job.state) {
    case 'pending':
      return job.reason
        ? trans.__('pending: %1', describeWaiting(job.reason, trans))
        : trans.__('pending');
    case 'running':
      return (
        trans.__('running %1/%2', job.replicas_running, total) +
        formatAttempt(job, trans)
      );
    case 'succeeded': {
      const took = jobDuration(job, now);
      return took === null
        ? trans.__('succeeded')
        : trans.__('succeeded in %1', formatDuration(took, trans));
    }
    case 'cancelled':
      return trans.__('cancelled');
    case 'failed':
      return formatFailure(job, trans);
  }
}

/** `, attempt 2 of 4 after worker-1 failed: ...` once the job was restarted, else nothing. */
export function formatAttempt(job: IJob, trans: ITrans): string {
  const attempt = job.attempt ?? 1;
  if (attempt <= 1) {
    return '';
  }
  const of = (job.max_restarts ?? 0) + 1;
  const failure = job.last_failure;
  return failure
    ? trans.__(', attempt %1 of %2 after %3', attempt, of, failure.text)
    : trans.__(', attempt %1 of %2', attempt, of);
}

/** Which device or share each replica got ("worker-0: GPU 1 (GPU-…)"); null if none. */
export function formatGpus(job: IJob): string | null {
  const lines = job.replicas
    .filter(replica => replica.gpu)
    .map(replica => `${replica.name}: ${replica.gpu}`);
  return lines.length ? lines.join('\n') : null;
}

function formatFailure(job: IJob, trans: ITrans): string {
  const replica = findReplica(job, job.failed_replica);
  const parts: string[] = [];
  if (replica) {
    parts.push(
      replica.exit_code === null
        ? replica.name
        : trans.__('%1 exited with code %2', replica.name, replica.exit_code)
    );
  }
  const reason = job.reason ?? replica?.reason;
  if (reason) {
    parts.push(reason);
  }
  return parts.length
    ? trans.__('failed: %1', parts.join(', '))
    : trans.__('failed');
}

function findReplica(
  job: IJob,
  name: string | null
): IReplicaStatus | undefined {
  return name === null
    ? undefined
    : job.replicas.find(replica => replica.name === name);
}

/** Seconds the job has run: until it finished, or until `now` while it runs. */
export function jobDuration(job: IJob, now?: number): number | null {
  if (job.started_at === null) {
    return null;
  }
  const end = job.finished_at ?? now;
  return end === undefined ? null : Math.max(0, end - job.started_at);
}

/** `45 s`, `3 min 5 s`, `2 h 3 min`, `3 d 4 h`. */
export function formatDuration(seconds: number, trans: ITrans): string {
  const s = Math.floor(seconds);
  if (s < 60) {
    return trans.__('%1 s', s);
  }
  if (s < 3600) {
    return trans.__('%1 min %2 s', Math.floor(s / 60), s % 60);
  }
  if (s < 86400) {
    return trans.__(
      '%1 h %2 min',
      Math.floor(s / 3600),
      Math.floor(s / 60) % 60
    );
  }
  return trans.__(
    '%1 d %2 h',
    Math.floor(s / 86400),
    Math.floor(s / 3600) % 24
  );
}

/** `just now`, `5 s ago`, `3 min ago`, `2 h ago`, `4 d ago`; times in epoch seconds. */
export function formatAge(then: number, now: number, trans: ITrans): string {
  const s = Math.floor(now - then);
  if (s < 5) {
    return trans.__('just now');
  }
  if (s < 60) {
    return trans.__('%1 s ago', s);
  }
  if (s < 3600) {
    return trans.__('%1 min ago', Math.floor(s / 60));
  }
  if (s < 86400) {
    return trans.__('%1 h ago', Math.floor(s / 3600));
  }
  return trans.__('%1 d ago', Math.floor(s / 86400));
}
