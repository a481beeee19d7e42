import { formatAge, formatDuration, formatGpus, formatStatus } from '../format';
import { ITrans } from '../trans';
import { IJob, IReplicaStatus, JobState } from '../model';

/** Substitutes %1, %2, ... like JupyterLab's gettext bundles. */
const trans: ITrans = {
  __: (msgid: string, ...args: any[]) =>
    msgid.replace(/%(\d+)/g, (_, n) => String(args[Number(n) - 1]))
};

function replica(
  name: string,
  state: JobState,
  exitCode: number | null = null
): IReplicaStatus {
  const [role, index] = name.split('-');
  return {
    name,
    role,
    index: Number(index),
    state,
    exit_code: exitCode,
    restarts: 0,
    started_at: 100,
    finished_at: null,
    reason: null
  };
}

function job(
  state: JobState,
  replicas: IReplicaStatus[],
  extra: Partial<IJob> = {}
): IJob {
  return {
    id: 'job-abc',
    name: 'job',
    owner: 'alice',
    engine: 'local',
    framework: 'generic',
    state,
    created_at: 90,
    started_at: 100,
    finished_at: null,
    replicas,
    replicas_running: replicas.filter(r => r.state === 'running').length,
    spec: {
      framework: 'generic',
      roles: { worker: { replicas: replicas.length } }
    },
    reason: null,
    failed_replica: null,
    last_lines: [],
    ...extra
  };
}

describe('formatStatus', () => {
  it('says pending, with the reason when there is one', () => {
    expect(formatStatus(job('pending', []), trans)).toBe('pending');
    expect(
      formatStatus(job('pending', [], { reason: 'waiting for a node' }), trans)
    ).toBe('pending: waiting for a node');
  });

  it('counts running replicas out of all replicas', () => {
    const replicas = [
      replica('worker-0', 'running'),
      replica('worker-1', 'pending')
    ];
    expect(formatStatus(job('running', replicas), trans)).toBe('running 1/2');
  });

  it('says which attempt a restarted job runs and why the last one ended', () => {
    const replicas = [replica('worker-0', 'running')];
    const failure = {
      time: 10,
      kind: 'failed',
      attempt: 1,
      text: 'worker-0 failed: killed by SIGKILL (out of memory?)',
      replica: 'worker-0',
      exit_code: -9,
      signal: 'SIGKILL',
      oom: false,
      step: null
    };
    const restarted = job('running', replicas, {
      attempt: 2,
      max_restarts: 3,
      last_failure: failure
    });
    expect(formatStatus(restarted, trans)).toBe(
      'running 1/1, attempt 2 of 4 after worker-0 failed: killed by SIGKILL (out of memory?)'
    );
    expect(formatStatus(job('running', replicas, { attempt: 1 }), trans)).toBe(
      'running 1/1'
    );
  });

  it('says how long a successful job took', () => {
    const done = job('succeeded', [replica('worker-0', 'succeeded', 0)], {
      finished_at: 172
    });
    expect(formatStatus(done, trans)).toBe('succeeded in 1 min 12 s');
  });

  it('names the failed replica, its exit code and the reason', () => {
    const failed = job(
      'failed',
      [replica('worker-0', 'succeeded', 0), replica('worker-1', 'failed', 3)],
      {
        failed_replica: 'worker-1',
        reason: 'worker-1 exited with code 3',
        finished_at: 110
      }
    );
    expect(formatStatus(failed, trans)).toBe(
      'failed: worker-1 exited with code 3, worker-1 exited with code 3'
    );
  });

  it('says failed with the reason alone when no replica is named', () => {
    const failed = job('failed', [], { reason: 'deadline exceeded' });
    expect(formatStatus(failed, trans)).toBe('failed: deadline exceeded');
    expect(formatStatus(job('failed', []), trans)).toBe('failed');
  });

  it('says cancelled', () => {
    expect(formatStatus(job('cancelled', []), trans)).toBe('cancelled');
  });
});

describe('formatDuration', () => {
  it.each([
    [0, '0 s'],
    [59.9, '59 s'],
    [60, '1 min 0 s'],
    [3599, '59 min 59 s'],
    [3600 * 2 + 180, '2 h 3 min'],
    [86400 * 3 + 3600 * 4, '3 d 4 h']
  ])('formats %p seconds as %p', (seconds, words) => {
    expect(formatDuration(seconds, trans)).toBe(words);
  });
});

describe('formatAge', () => {
  it.each([
    [1000, 'just now'],
    [1030, '30 s ago'],
    [1000 + 125, '2 min ago'],
    [1000 + 7200, '2 h ago'],
    [1000 + 86400 * 2, '2 d ago']
  ])('at %p an event at 1000 is %p', (now, words) => {
    expect(formatAge(1000, now, trans)).toBe(words);
  });
});

describe('formatGpus', () => {
  it("lists each replica's device or share, and nothing without GPUs", () => {
    const share = {
      ...replica('worker-0', 'running'),
      gpu: '50% of GPU 0 (GPU-a)'
    };
    const none = replica('worker-1', 'running');
    expect(formatGpus(job('running', [share, none]))).toBe(
      'worker-0: 50% of GPU 0 (GPU-a)'
    );
    expect(formatGpus(job('running', [none]))).toBeNull();
  });
});
