import { LogBuffer, formatSince } from '../logbuffer';
import { LogTuple } from '../model';

function lines(replica: string, from: number, count: number): LogTuple[] {
  return Array.from({ length: count }, (_, i) => [
    replica,
    from + i,
    1000 + i,
    `line ${from + i}`
  ]);
}

describe('LogBuffer', () => {
  it('drains every pushed line in arrival order and then is empty', () => {
    const buffer = new LogBuffer(100);
    buffer.push(lines('worker-0', 0, 2));
    buffer.push(lines('worker-1', 0, 1));
    const drained = buffer.drain();
    expect(drained.lines.map(l => `${l[0]}:${l[1]}`)).toEqual([
      'worker-0:0',
      'worker-0:1',
      'worker-1:0'
    ]);
    expect(drained.skipped).toBe(0);
    expect(buffer.pending).toBe(0);
    expect(buffer.drain()).toEqual({ lines: [], skipped: 0 });
  });

  it('keeps only the newest maxLines pending and counts the dropped ones', () => {
    const buffer = new LogBuffer(1000);
    for (let frame = 0; frame < 100; frame++) {
      buffer.push(lines('worker-0', frame * 1000, 1000));
    }
    expect(buffer.pending).toBe(1000);
    const drained = buffer.drain();
    expect(drained.skipped).toBe(99_000);
    expect(drained.lines).toHaveLength(1000);
    expect(drained.lines[0][1]).toBe(99_000);
    expect(drained.lines[999][1]).toBe(99_999);
  });

  it('drops repeated sequence numbers so a resumed stream shows nothing twice', () => {
    const buffer = new LogBuffer(100);
    expect(buffer.push(lines('worker-0', 0, 5))).toBe(5);
    expect(buffer.push(lines('worker-0', 3, 4))).toBe(2);
    expect(buffer.drain().lines.map(l => l[1])).toEqual([0, 1, 2, 3, 4, 5, 6]);
  });

  it('tracks the next sequence per replica as the resume cursor', () => {
    const buffer = new LogBuffer(10);
    buffer.push(lines('worker-0', 0, 11));
    buffer.push(lines('master-0', 0, 3));
    expect(buffer.cursor()).toEqual({ 'worker-0': 11, 'master-0': 3 });
    expect(buffer.sinceParam()).toBe('worker-0:11,master-0:3');
    buffer.drain();
    expect(buffer.sinceParam()).toBe('worker-0:11,master-0:3');
  });

  it('rejects a non-positive capacity', () => {
    expect(() => new LogBuffer(0)).toThrow(RangeError);
  });
});

describe('formatSince', () => {
  it('is empty for an empty cursor', () => {
    expect(formatSince({})).toBe('');
  });
});
