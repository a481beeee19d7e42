/**
 * @jest-environment jsdom
 */
import { IUsageSample } from '../model';
import { ITrans } from '../trans';
import {
  formatBytes,
  gauges,
  memoryBytes,
  roleMemoryLimits,
  UsageGauges
} from '../usage';

const GiB = 1024 ** 3;

const trans: ITrans = {
  __: (msgid: string, ...args: any[]) =>
    args.reduce<string>(
      (text, arg, i) => text.replace(`%${i + 1}`, String(arg)),
      msgid
    )
};

const sample = (
  seq: number,
  replicas: IUsageSample['replicas']
): IUsageSample => ({ seq, time: seq, replicas });

describe('formatBytes', () => {
  it('writes sizes as the CLI does', () => {
    expect(
      [
        100,
        12 * 1024,
        512 * 1024 ** 2,
        200 * 1024 ** 2 + 300 * 1024,
        3.9 * GiB,
        4 * GiB
      ].map(formatBytes)
    ).toEqual(['100 B', '12 KiB', '512 MiB', '200.3 MiB', '3.9 GiB', '4 GiB']);
  });
});

describe('gauges', () => {
  it('shows each replica in job order as the newest sample has it', () => {
    const samples = [
      sample(0, {
        'worker-0': { cpu_percent: 5, rss_bytes: 1, processes: 1, gpus: [] }
      }),
      sample(1, {
        'worker-0': {
          cpu_percent: 98.6,
          rss_bytes: GiB,
          processes: 2,
          gpus: [
            { index: 0, utilization_percent: 40, memory_bytes: 1 },
            { index: 1, utilization_percent: null, memory_bytes: null }
          ]
        }
      })
    ];
    expect(gauges(['worker-0', 'worker-1'], samples)).toEqual([
      {
        replica: 'worker-0',
        cpuPercent: 98.6,
        rssBytes: GiB,
        gpuPercent: 40,
        limitBytes: null,
        warning: null
      },
      {
        replica: 'worker-1',
        cpuPercent: null,
        rssBytes: null,
        gpuPercent: null,
        limitBytes: null,
        warning: null
      }
    ]);
  });

  it('marks a replica near its memory limit and an idle GPU beside a busy one', () => {
    const gpu = (busy: number) => [
      { index: 0, utilization_percent: busy, memory_bytes: 1 }
    ];
    const samples = [
      sample(0, {
        'master-0': {
          cpu_percent: 1,
          rss_bytes: 0.95 * GiB,
          processes: 1,
          gpus: gpu(90)
        },
        'worker-0': {
          cpu_percent: 1,
          rss_bytes: 0.5 * GiB,
          processes: 1,
          gpus: gpu(80)
        },
        'worker-1': {
          cpu_percent: 1,
          rss_bytes: 0.5 * GiB,
          processes: 1,
          gpus: gpu(2)
        }
      })
    ];
    const limits = roleMemoryLimits({
      framework: 'pytorch',
      roles: {
        master: { replicas: 1, resources: { memory: '1Gi' } },
        worker: { replicas: 2 }
      }
    });
    expect(limits).toEqual({ master: GiB });
    const shown = gauges(['master-0', 'worker-0', 'worker-1'], samples, limits);
    expect(shown.map(g => [g.replica, g.limitBytes, g.warning])).toEqual([
      ['master-0', GiB, 'memory'],
      ['worker-0', null, null],
      ['worker-1', null, 'gpu-idle']
    ]);
    // Every GPU idle: nothing to compare with, nothing marked.
    const quiet = [
      sample(1, {
        'worker-0': {
          cpu_percent: 1,
          rss_bytes: 1,
          processes: 1,
          gpus: gpu(0)
        },
        'worker-1': { cpu_percent: 1, rss_bytes: 1, processes: 1, gpus: gpu(3) }
      })
    ];
    expect(gauges(['worker-0', 'worker-1'], quiet).map(g => g.warning)).toEqual(
      [null, null]
    );
  });
});

describe('UsageGauges', () => {
  it('stays hidden until a sample comes, then draws a gauge per replica', () => {
    const shown = new UsageGauges(trans);
    shown.update(['worker-0', 'worker-1'], []);
    expect(shown.node.hidden).toBe(true);
    shown.update(
      ['worker-0', 'worker-1'],
      [
        sample(3, {
          'worker-0': {
            cpu_percent: 250,
            rss_bytes: 2 * GiB,
            processes: 3,
            gpus: []
          },
          'worker-1': {
            cpu_percent: 0.2,
            rss_bytes: 300,
            processes: 1,
            gpus: []
          }
        })
      ]
    );
    expect(shown.node.hidden).toBe(false);
    const items = [...shown.node.querySelectorAll('.jp-distrun-usage-gauge')];
    expect(items.map(item => item.textContent)).toEqual([
      'worker-0 250% · 2 GiB',
      'worker-1 0% · 300 B'
    ]);
    const fills = [
      ...shown.node.querySelectorAll<HTMLElement>('.jp-distrun-usage-fill')
    ];
    expect(fills.map(fill => fill.style.width)).toEqual(['100%', '0.2%']);
  });
});

describe('memoryBytes', () => {
  it('reads the memory quantities a role may ask for', () => {
    expect(memoryBytes('2Gi')).toBe(2 * 2 ** 30);
    expect(memoryBytes('500M')).toBe(500e6);
    expect(memoryBytes('1.5Gi')).toBe(1.5 * 2 ** 30);
    expect(memoryBytes('1048576')).toBe(1048576);
    expect(memoryBytes(' 64Mi ')).toBe(64 * 2 ** 20);
  });

  it('gives null for no quantity or one it does not read', () => {
    for (const text of [null, undefined, '', 'lots', '2 GB', '-1Gi', '1e9']) {
      expect(memoryBytes(text)).toBeNull();
    }
  });
});
