/**
 * A sweep in the main area: its progress, a sortable table of its trials (best marked), the
 * objective of every trial per step on one chart, and what to do next: open a trial's logs,
 * run the best again, edit and run it again, cancel or delete the sweep. Refreshed every 2 s
 * until the sweep has ended.
 */

import { CommandRegistry } from '@lumino/commands';
import { Poll } from '@lumino/polling';
import { Panel, Widget } from '@lumino/widgets';
import { ITranslator, TranslationBundle } from '@jupyterlab/translation';

import { getSweep } from '../common/api';
import { stateLabel } from '../common/format';
import { distrunIcon } from '../common/icons';
import { ISweep, ISweepTrial, JobState } from '../common/model';
import { CommandIDs, TRANSLATION_DOMAIN } from '../common/tokens';
import { RunsChart } from './runschart';
import {
  columns,
  formatCell,
  IColumn,
  progressText,
  SortDirection,
  sortTrials,
  stoppedLabel
} from './sweeptable';

const POLL_INTERVAL_MS = 2000;

export class SweepView extends Panel {
  constructor(options: {
    sweepId: string;
    commands: CommandRegistry;
    translator: ITranslator;
  }) {
    super();
    this.sweepId = options.sweepId;
    this._commands = options.commands;
    this._trans = options.translator.load(TRANSLATION_DOMAIN);
    this.id = `distrun-sweep-${this.sweepId}`;
    this.title.label = this._trans.__('Sweep %1', this.sweepId);
    this.title.icon = distrunIcon;
    this.title.closable = true;
    this.addClass('jp-distrun-SweepView');
    this.node.dataset.testId = 'distrun-sweep-view';
    this._chart = new RunsChart(this._trans);
    this._build();
    this._poll = new Poll({
      factory: () => this.refresh(),
      frequency: { interval: POLL_INTERVAL_MS, backoff: false },
      name: `distrun:sweep:${this.sweepId}`
    });
  }

  readonly sweepId: string;

  get sweep(): ISweep | null {
    return this._sweep;
  }

  async refresh(): Promise<void> {
    try {
      this._sweep = await getSweep(this.sweepId);
      this._message.textContent = '';
      this._render();
      if (this._sweep.ended) {
        this._poll.dispose();
      }
    } catch (error) {
      this._message.textContent = this._trans.__(
        'Cannot read the sweep: %1',
        (error as Error).message
      );
    }
  }

  dispose(): void {
    this._poll.dispose();
    super.dispose();
  }

  protected onAfterAttach(): void {
    void this.refresh();
  }

  private _build(): void {
    const head = document.createElement('div');
    head.className = 'jp-distrun-SweepView-head';
    const title = document.createElement('h2');
    title.textContent = this.title.label;
    this._progress.className = 'jp-distrun-SweepView-progress';
    this._progress.dataset.testId = 'distrun-sweep-progress';
    this._objective.className = 'jp-distrun-SweepView-objective';
    head.append(title, this._progress, this._objective, this._actions);
    this._actions.className = 'jp-distrun-SweepView-actions';
    this._message.className = 'jp-distrun-SweepView-message';
    this._message.setAttribute('role', 'alert');
    this._table.className = 'jp-distrun-SweepView-table';
    this._table.dataset.testId = 'distrun-sweep-table';
    for (const node of [head, this._message, this._table]) {
      this.addWidget(new Widget({ node }));
    }
    this.addWidget(this._chart);
  }

  private _render(): void {
    const sweep = this._sweep;
    if (!sweep) {
      return;
    }
    this._progress.textContent = progressText(sweep);
    this.node.dataset.ended = String(sweep.ended);
    const objective = sweep.definition?.objective;
    this._objective.textContent = objective
      ? this._trans.__(
          'Objective: %1, %2 (%3 value)',
          objective.metric,
          objective.goal === 'min'
            ? this._trans.__('lowest')
            : this._trans.__('highest'),
          objective.read
        )
      : this._trans.__('No objective: trials are not ranked.');
    this._renderActions(sweep);
    this._renderTable(sweep);
    this._chart.preferred = objective?.metric ?? null;
    this._chart.setRuns(
      sweep.trials.map(trial => ({
        label: `#${trial.number}`,
        index: trial.number,
        series: trial.series ?? {},
        highlight: trial.number === sweep.best
      }))
    );
  }

  private _bestJob(sweep: ISweep): string | null {
    return (
      sweep.trials.find(trial => trial.number === sweep.best)?.job_id ?? null
    );
  }

  private _renderActions(sweep: ISweep): void {
    const best = this._bestJob(sweep);
    const buttons: HTMLElement[] = [];
    const add = (
      label: string,
      testId: string,
      command: string,
      args: Record<string, string>
    ) => {
      const button = document.createElement('button');
      button.className = 'jp-Button jp-mod-styled jp-mod-minimal';
      button.textContent = label;
      button.dataset.testId = testId;
      button.title = this._commands.caption(command, args);
      button.onclick = () =>
        void this._commands.execute(command, args).then(() => this.refresh());
      buttons.push(button);
    };
    if (best) {
      add(
        this._trans.__('Run the best again'),
        'distrun-sweep-rerun-best',
        CommandIDs.rerunJob,
        { id: best }
      );
      add(
        this._trans.__('Edit and run again…'),
        'distrun-sweep-edit-best',
        CommandIDs.editRerunJob,
        { id: best }
      );
    }
    if (!sweep.ended) {
      add(
        this._trans.__('Cancel sweep'),
        'distrun-sweep-cancel',
        CommandIDs.cancelSweep,
        { id: sweep.id }
      );
    }
    add(
      this._trans.__('Delete sweep'),
      'distrun-sweep-delete',
      CommandIDs.deleteSweep,
      { id: sweep.id }
    );
    this._actions.replaceChildren(...buttons);
  }

  private _renderTable(sweep: ISweep): void {
    const now = Date.now() / 1000;
    const cols = columns(sweep, this._trans);
    const sortColumn = cols.find(col => col.key === this._sortKey) ?? null;
    const rows = sortColumn
      ? sortTrials(sweep.trials, sortColumn, this._sortDirection, now)
      : sweep.trials;
    const head = document.createElement('tr');
    head.append(document.createElement('th')); // the best trial's mark
    for (const col of cols) {
      head.append(this._headerCell(col));
    }
    const body = rows.map(trial => this._row(trial, cols, sweep, now));
    const thead = document.createElement('thead');
    thead.append(head);
    const tbody = document.createElement('tbody');
    tbody.append(...body);
    this._table.replaceChildren(thead, tbody);
  }

  private _headerCell(col: IColumn): HTMLElement {
    const cell = document.createElement('th');
    const sorted = col.key === this._sortKey;
    cell.setAttribute('aria-sort', sorted ? this._sortDirection : 'none');
    const button = document.createElement('button');
    button.className = 'jp-distrun-SweepView-sort';
    button.dataset.column = col.key;
    button.textContent = col.label;
    button.title = this._trans.__('Sort by %1', col.label);
    button.onclick = () => {
      this._sortDirection =
        sorted && this._sortDirection === 'ascending'
          ? 'descending'
          : 'ascending';
      this._sortKey = col.key;
      this._render();
    };
    cell.append(button);
    return cell;
  }

  private _row(
    trial: ISweepTrial,
    cols: IColumn[],
    sweep: ISweep,
    now: number
  ): HTMLElement {
    const row = document.createElement('tr');
    const best = trial.number === sweep.best;
    row.dataset.trial = String(trial.number);
    row.dataset.jobId = trial.job_id;
    row.dataset.best = String(best);
    row.tabIndex = 0;
    row.title = this._trans.__('Open the logs of trial #%1', trial.number);
    const mark = document.createElement('td');
    mark.className = 'jp-distrun-SweepView-best';
    mark.textContent = best ? '★' : '';
    if (best) {
      mark.title = this._trans.__('The best trial');
    }
    row.append(mark);
    for (const col of cols) {
      const cell = document.createElement('td');
      cell.dataset.column = col.key;
      const value = col.value(trial, now);
      if (col.key === 'state') {
        const badge = document.createElement('span');
        badge.className = 'jp-distrun-badge';
        badge.dataset.state = trial.state;
        badge.textContent =
          trial.state === 'stopped'
            ? stoppedLabel(trial, this._trans)
            : stateLabel(trial.state as JobState, this._trans);
        if (typeof trial.rung === 'number') {
          badge.dataset.rung = String(trial.rung);
          badge.title = this._trans.__(
            'Stopped by asha at rung %1 (step %2): behind the trials that reached it',
            trial.rung,
            trial.rung_step ?? ''
          );
        }
        cell.append(badge);
      } else if (col.key === 'origin') {
        cell.textContent =
          trial.origin === 'tpe'
            ? this._trans.__('model')
            : trial.origin === 'random'
              ? this._trans.__('random')
              : '';
        if (trial.origin) {
          cell.dataset.origin = trial.origin;
          cell.title =
            trial.origin === 'tpe'
              ? this._trans.__(
                  'Proposed by the model from the trials before it'
                )
              : this._trans.__('Drawn at random before the model had results');
        }
      } else {
        cell.textContent =
          col.key === 'duration' && typeof value === 'number'
            ? value.toFixed(1)
            : formatCell(value);
      }
      row.append(cell);
    }
    const open = () =>
      void this._commands.execute(CommandIDs.openLogs, { id: trial.job_id });
    row.onclick = open;
    row.onkeydown = event => event.key === 'Enter' && open();
    return row;
  }

  private _sweep: ISweep | null = null;
  private _sortKey = '';
  private _sortDirection: SortDirection = 'ascending';
  private readonly _commands: CommandRegistry;
  private readonly _trans: TranslationBundle;
  private readonly _poll: Poll;
  private readonly _chart: RunsChart;
  private readonly _progress = document.createElement('div');
  private readonly _objective = document.createElement('div');
  private readonly _actions = document.createElement('div');
  private readonly _message = document.createElement('div');
  private readonly _table = document.createElement('table');
}
