import { ISweep, ISweepTrial } from '../../common/model';
import { ITrans } from '../../common/trans';
import {
  columns,
  formatCell,
  otherMetrics,
  progressText,
  sortTrials,
  stoppedLabel
} from '../sweeptable';

const trans: ITrans = {
  __: (msgid: string, ...args: unknown[]) =>
    args.reduce<string>(
      (text, arg, i) => text.replace(`%${i + 1}`, String(arg)),
      msgid
    )
};

function trial(number: number, extra: Partial<ISweepTrial> = {}): ISweepTrial {
  return {
    number,
    job_id: `fit-t${number}-aaaaa`,
    params: {
      lr: [0.3, 0.1, 0.03][number] ?? 0.01,
      opt: number % 2 ? 'sgd' : 'adam'
    },
    state: 'succeeded',
    objective: null,
    started_at: 100,
    finished_at: 100 + number,
    metrics: {},
    ...extra
  };
}

const SWEEP: ISweep = {
  id: 'sweep-abc123',
  name: 'fit',
  engine: 'local',
  definition: {
    params: {
      lr: { values: [0.3, 0.1, 0.03] },
      opt: { values: ['adam', 'sgd'] }
    },
    objective: { metric: 'loss', goal: 'min', read: 'last' }
  },
  trials_total: 4,
  counts: { succeeded: 2, stopped: 1, queued: 1 },
  ended: false,
  created_at: 1,
  best: 1,
  trials: [
    trial(0, { objective: 0.5, metrics: { loss: 0.5, acc: 0.7 } }),
    trial(1, { objective: 0.25, metrics: { loss: 0.25, acc: 0.9, lr_now: 1 } }),
    trial(2, { state: 'stopped', objective: null, finished_at: null })
  ]
};

describe('the sweep table', () => {
  it('has the trial, each parameter, state, objective, other metrics and duration', () => {
    expect(columns(SWEEP, trans).map(col => col.label)).toEqual([
      '#',
      'lr',
      'opt',
      'state',
      'loss',
      'acc',
      'lr_now',
      'seconds'
    ]);
  });

  it('lists the other metrics most reported first, never the objective', () => {
    expect(otherMetrics(SWEEP, 'loss')).toEqual(['acc', 'lr_now']);
  });

  it('sorts numbers by value both ways, empty cells last either way', () => {
    const objective = columns(SWEEP, trans).find(
      col => col.key === 'objective'
    )!;
    const up = sortTrials(SWEEP.trials, objective, 'ascending', 200);
    expect(up.map(t => t.number)).toEqual([1, 0, 2]);
    const down = sortTrials(SWEEP.trials, objective, 'descending', 200);
    expect(down.map(t => t.number)).toEqual([0, 1, 2]);
  });

  it('sorts words alphabetically and keeps trial order on ties', () => {
    const opt = columns(SWEEP, trans).find(col => col.key === 'param:opt')!;
    expect(
      sortTrials(SWEEP.trials, opt, 'ascending', 0).map(t => t.number)
    ).toEqual([0, 2, 1]);
  });

  it('counts a running trial up to now', () => {
    const seconds = columns(SWEEP, trans).find(col => col.key === 'duration')!;
    expect(seconds.value(SWEEP.trials[2], 150)).toBe(50);
  });

  it('says the progress in one line with the best so far', () => {
    expect(progressText(SWEEP)).toBe('3/4 done · 1 queued · best #1 loss=0.25');
  });

  it('formats cells to 6 significant digits and empty as a dash', () => {
    expect(formatCell(1 / 3)).toBe('0.333333');
    expect(formatCell(12)).toBe('12');
    expect(formatCell(null)).toBe('–');
    expect(formatCell('adam')).toBe('adam');
  });
});

describe('a sweep that learns', () => {
  const modelSweep: ISweep = {
    ...SWEEP,
    definition: { ...SWEEP.definition!, search: 'tpe' },
    trials: [
      trial(0, { origin: 'random', objective: 0.5 }),
      trial(1, { origin: 'tpe', objective: 0.25 }),
      trial(2, { origin: 'tpe', state: 'stopped', rung: 1, rung_step: 3 })
    ]
  };

  it('says which trials the model proposed, in a column of their own', () => {
    const cols = columns(modelSweep, trans);
    expect(cols.map(col => col.label)).toContain('proposed by');
    const origin = cols.find(col => col.key === 'origin')!;
    expect(modelSweep.trials.map(t => origin.value(t, 0))).toEqual([
      'random',
      'tpe',
      'tpe'
    ]);
    expect(columns(SWEEP, trans).map(col => col.key)).not.toContain('origin');
  });

  it('says at the step of which rung asha stopped a trial', () => {
    expect(stoppedLabel(modelSweep.trials[2], trans)).toBe('stopped at step 3');
    expect(stoppedLabel(SWEEP.trials[2], trans)).toBe('stopped');
  });
});
