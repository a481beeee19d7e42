import { LogTuple } from '../model';
import { UnfinishedLines } from '../unfinished';

const line = (replica: string, seq: number, text: string): LogTuple => [
  replica,
  seq,
  0,
  text
];

describe('UnfinishedLines', () => {
  it('shows each replica its newest unfinished line, in replica order', () => {
    const shown = new UnfinishedLines();
    expect(
      shown.update([line('w-1', 3, '10%'), line('w-0', 7, '5%')], {})
    ).toBe(true);
    shown.update([line('w-1', 3, '50%')], {});
    expect(shown.lines(['w-0', 'w-1']).map(l => [l[0], l[3]])).toEqual([
      ['w-0', '5%'],
      ['w-1', '50%']
    ]);
  });

  it('lets the finished line of its seq, or a later one, replace it', () => {
    const shown = new UnfinishedLines();
    shown.update([line('w-0', 7, '90%')], {});
    expect(shown.finished([line('w-0', 6, 'an earlier line')])).toBe(false);
    expect(shown.finished([line('w-0', 7, '100%')])).toBe(true);
    expect(shown.size).toBe(0);
  });

  it('ignores one its finished line overtook, and takes one back on an empty text', () => {
    const shown = new UnfinishedLines();
    expect(shown.update([line('w-0', 4, 'stale')], { 'w-0': 5 })).toBe(false);
    shown.update([line('w-0', 5, 'now')], { 'w-0': 5 });
    shown.update([line('w-0', 5, '')], { 'w-0': 5 });
    expect(shown.size).toBe(0);
  });
});
