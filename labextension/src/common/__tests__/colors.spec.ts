import {
  PALETTE_SIZE,
  replicaColorIndex,
  replicaPrefix,
  stringHash
} from '../colors';

describe('replicaColorIndex', () => {
  it('gives each replica of a job its own colour up to the palette size', () => {
    const replicas = Array.from(
      { length: PALETTE_SIZE },
      (_, i) => `worker-${i}`
    );
    const colours = replicas.map(r => replicaColorIndex(r, replicas));
    expect(new Set(colours).size).toBe(PALETTE_SIZE);
  });

  it('follows the job order, so master-0 is first', () => {
    const replicas = ['master-0', 'worker-0', 'worker-1'];
    expect(replicaColorIndex('master-0', replicas)).toBe(0);
    expect(replicaColorIndex('worker-1', replicas)).toBe(2);
  });

  it('wraps around when there are more replicas than colours', () => {
    const replicas = Array.from({ length: 10 }, (_, i) => `worker-${i}`);
    expect(replicaColorIndex('worker-8', replicas)).toBe(0);
  });

  it('colours an unknown replica by a stable hash inside the palette', () => {
    const first = replicaColorIndex('evaluator-0');
    expect(replicaColorIndex('evaluator-0')).toBe(first);
    expect(first).toBeGreaterThanOrEqual(0);
    expect(first).toBeLessThan(PALETTE_SIZE);
  });
});

describe('stringHash', () => {
  it('is the FNV-1a hash', () => {
    expect(stringHash('')).toBe(0x811c9dc5);
    expect(stringHash('a')).toBe(0xe40c292c);
  });
});

describe('replicaPrefix', () => {
  it('pads names so the bars line up', () => {
    expect(replicaPrefix('ps-0', 8)).toBe('ps-0     | ');
    expect(replicaPrefix('worker-0', 8)).toBe('worker-0 | ');
  });
});
