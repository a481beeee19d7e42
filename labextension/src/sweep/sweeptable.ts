/**
 * A sweep's results table, as data: its columns (trial, each parameter, what proposed them in
 * a model search, state, the objective, the other final metrics, duration) and its rows sorted by any column. Pure, so the sort
 * rules are tested without a browser; sweepview.ts draws it.
 */

import { ISweep, ISweepTrial } from '../common/model';
import { ITrans } from '../common/trans';

/** The other metrics shown beside the objective, at most. */
export const MAX_OTHER_METRICS = 4;

export type CellValue = number | string | null;

export interface IColumn {
  key: string;
  label: string;
  value: (trial: ISweepTrial, now: number) => CellValue;
}

export function columns(sweep: ISweep, trans: ITrans): IColumn[] {
  const objective = sweep.definition?.objective?.metric ?? null;
  const params = Object.keys(sweep.definition?.params ?? {});
  const others = otherMetrics(sweep, objective);
  return [
    { key: 'trial', label: '#', value: trial => trial.number },
    ...params.map(name => ({
      key: `param:${name}`,
      label: name,
      value: (trial: ISweepTrial) => trial.params[name] ?? null
    })),
    ...(isModelSearch(sweep)
      ? [
          {
            key: 'origin',
            label: trans.__('proposed by'),
            value: (trial: ISweepTrial) => trial.origin ?? null
          }
        ]
      : []),
    { key: 'state', label: trans.__('state'), value: trial => trial.state },
    ...(objective
      ? [
          {
            key: 'objective',
            label: objective,
            value: (trial: ISweepTrial) => trial.objective
          }
        ]
      : []),
    ...others.map(name => ({
      key: `metric:${name}`,
      label: name,
      value: (trial: ISweepTrial) => trial.metrics?.[name] ?? null
    })),
    {
      key: 'duration',
      label: trans.__('seconds'),
      value: (trial, now) => trialSeconds(trial, now)
    }
  ];
}

/** Whether the sweep's trials are proposed by a model (tpe, bayes) from the results so far. */
export function isModelSearch(sweep: ISweep): boolean {
  const search = sweep.definition?.search;
  return search === 'tpe' || search === 'bayes';
}

/** A trial's state in words: a stopped trial says the step of the asha rung it stopped at. */
export function stoppedLabel(trial: ISweepTrial, trans: ITrans): string {
  return typeof trial.rung_step === 'number'
    ? trans.__('stopped at step %1', trial.rung_step)
    : trans.__('stopped');
}

/** Metrics other than the objective that the trials reported, most reported first. */
export function otherMetrics(
  sweep: ISweep,
  objective: string | null
): string[] {
  const seen = new Map<string, number>();
  for (const trial of sweep.trials) {
    for (const name of Object.keys(trial.metrics ?? {})) {
      if (name !== objective) {
        seen.set(name, (seen.get(name) ?? 0) + 1);
      }
    }
  }
  return [...seen.entries()]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .slice(0, MAX_OTHER_METRICS)
    .map(([name]) => name);
}

export function trialSeconds(trial: ISweepTrial, now: number): number | null {
  if (trial.started_at === null) {
    return null;
  }
  return (trial.finished_at ?? now) - trial.started_at;
}

export type SortDirection = 'ascending' | 'descending';

/**
 * The trials sorted by `column`: numbers by value, words alphabetically, empty cells last
 * whichever the direction; ties keep trial order.
 */
export function sortTrials(
  trials: readonly ISweepTrial[],
  column: IColumn,
  direction: SortDirection,
  now: number
): ISweepTrial[] {
  const sign = direction === 'ascending' ? 1 : -1;
  return trials
    .map(trial => ({ trial, value: column.value(trial, now) }))
    .sort((a, b) => {
      if (a.value === null || b.value === null) {
        return a.value === b.value
          ? a.trial.number - b.trial.number
          : a.value === null
            ? 1
            : -1;
      }
      const order =
        typeof a.value === 'number' && typeof b.value === 'number'
          ? a.value - b.value
          : String(a.value).localeCompare(String(b.value));
      return order * sign || a.trial.number - b.trial.number;
    })
    .map(({ trial }) => trial);
}

/** A cell as text: numbers to 6 significant digits, empty as a dash. */
export function formatCell(value: CellValue): string {
  if (value === null) {
    return '–';
  }
  if (typeof value === 'number') {
    return Number.isInteger(value)
      ? String(value)
      : String(Number(value.toPrecision(6)));
  }
  return value;
}

/** "4/6 done · 2 running · best #3 loss=0.12": the sweep in one line. */
export function progressText(sweep: ISweep): string {
  const done = ['succeeded', 'failed', 'cancelled', 'stopped']
    .map(state => sweep.counts[state] ?? 0)
    .reduce((a, b) => a + b, 0);
  const parts = [`${done}/${sweep.trials_total} done`];
  for (const state of ['running', 'pending', 'queued']) {
    if (sweep.counts[state]) {
      parts.push(`${sweep.counts[state]} ${state}`);
    }
  }
  const best = sweep.trials.find(trial => trial.number === sweep.best);
  const objective = sweep.definition?.objective?.metric;
  if (best && objective && best.objective !== null) {
    parts.push(
      `best #${best.number} ${objective}=${formatCell(best.objective)}`
    );
  }
  return parts.join(' · ');
}
