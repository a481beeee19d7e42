import { UsageStore, usageNotes } from '../usagestore';
import { ITrans } from '../../common/trans';

const trans: ITrans = { __: (msgid: string) => msgid };
const MiB = 1024 * 1024;

function usage(cpu: number, rss: number, gpu: number | null = null) {
  return {
    cpu_percent: cpu,
    rss_bytes: rss,
    processes: 1,
    gpus:
      gpu === null
        ? []
        : [{ index: 0, utilization_percent: gpu, memory_bytes: 300 * MiB }]
  };
}

describe('UsageStore', () => {
  it('plots each measure per replica over the samples times', () => {
    const store = new UsageStore(trans);
    store.add([
      { seq: 0, time: 100, replicas: { 'worker-0': usage(50, 64 * MiB) } },
      {
        seq: 1,
        time: 101.5,
        replicas: {
          'worker-0': usage(99, 128 * MiB),
          'worker-1': usage(0, 32 * MiB, 80)
        }
      }
    ]);
    expect(store.metrics()).toEqual([
      'CPU (%, 100 = one core)',
      'memory (MiB, resident)',
      'GPU (%, the busiest it holds)',
      'GPU memory (MiB, its processes’ on its GPUs)'
    ]);
    const memory = store.series('memory (MiB, resident)');
    expect(memory.map(s => [s.replica, s.xs, s.ys])).toEqual([
      ['worker-0', [100, 101.5], [64, 128]],
      ['worker-1', [101.5], [32]]
    ]);
    expect(
      store.series('GPU (%, the busiest it holds)').map(s => s.replica)
    ).toEqual(['worker-1']);
    expect(
      store
        .series('GPU memory (MiB, its processes’ on its GPUs)')
        .map(s => [s.replica, s.xs, s.ys])
    ).toEqual([['worker-1', [101.5], [300]]]);
  });

  it('changes its version only when samples came', () => {
    const store = new UsageStore(trans);
    const before = store.version;
    store.add([]);
    expect(store.version).toBe(before);
    store.add([{ seq: 0, time: 1, replicas: { 'worker-0': usage(1, 1) } }]);
    expect(store.version).toBe(before + 1);
  });

  it("draws each role's requested memory on the memory chart only", () => {
    const store = new UsageStore(trans);
    const before = store.version;
    store.setSpec({
      framework: 'pytorch',
      roles: {
        master: { replicas: 1, resources: { memory: '2Gi' } },
        worker: { replicas: 2, resources: { memory: '500M', cpu: '1' } },
        evaluator: { replicas: 1 }
      }
    });
    expect(store.version).toBeGreaterThan(before);
    const limits = store.limits('memory (MiB, resident)');
    expect(limits.map(limit => limit.y)).toEqual([2048, 500e6 / MiB]);
    expect(limits.map(limit => limit.label)).toEqual(['%1 limit', '%1 limit']);
    expect(store.limits('CPU (%, 100 = one core)')).toEqual([]);
  });
});

describe('usageNotes', () => {
  const gpu =
    'GPU: not reported by metrics.k8s.io for worker-0, which requested a GPU: ...';

  it('says what the engine cannot measure, and why it does not sample', () => {
    expect(usageNotes({ available: true, reason: null, notes: [gpu] })).toEqual(
      [gpu]
    );
    expect(
      usageNotes({
        available: false,
        reason: 'metrics-server is not installed in this cluster: no usage',
        notes: [gpu]
      })
    ).toEqual([
      'metrics-server is not installed in this cluster: no usage',
      gpu
    ]);
    expect(usageNotes({ available: true, reason: null, notes: [] })).toEqual(
      []
    );
  });
});
