import { ILineRun } from '../model';
import { linesOfRuns } from '../runs';

describe('linesOfRuns', () => {
  it('gives each line its seq and time in seconds', () => {
    const run: ILineRun = {
      replica: 'worker-0',
      seq: 7,
      times_ms: [1500, 2500],
      texts: ['a', 'b']
    };
    expect(linesOfRuns([run])).toEqual([
      ['worker-0', 7, 1.5, 'a'],
      ['worker-0', 8, 2.5, 'b']
    ]);
  });

  it('merges replicas by capture time, each in seq order', () => {
    const runs: ILineRun[] = [
      {
        replica: 'worker-0',
        seq: 0,
        times_ms: [1000, 3000, 3000],
        texts: ['a0', 'a1', 'a2']
      },
      {
        replica: 'worker-1',
        seq: 4,
        times_ms: [2000, 3000],
        texts: ['b4', 'b5']
      }
    ];
    expect(linesOfRuns(runs).map(line => line[3])).toEqual([
      'a0',
      'b4',
      'a1',
      'a2',
      'b5'
    ]);
  });

  it('has no lines for no runs', () => {
    expect(linesOfRuns([])).toEqual([]);
  });
});
