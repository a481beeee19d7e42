/**
 * The left-area job list: the user's jobs newest first, refreshed every 2 s while visible and
 * right after every action, with cancel and delete per job (as commands). A sweep's trials are
 * one entry that expands to them and opens the sweep's view; jobs ticked in the list can be
 * compared side by side.
 */

import { CommandRegistry } from '@lumino/commands';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';
import { ITranslator, TranslationBundle } from '@jupyterlab/translation';
import { refreshIcon } from '@jupyterlab/ui-components';

import { DistrunAPIError, listJobs } from '../common/api';
import {
  formatAge,
  formatDuration,
  formatGpus,
  formatStatus,
  jobDuration,
  stateLabel
} from '../common/format';
import { distrunIcon } from '../common/icons';
import { IJob, isTerminal, JobState, trialOf } from '../common/model';
import { CommandIDs, TRANSLATION_DOMAIN } from '../common/tokens';

const POLL_INTERVAL_MS = 2000;
/** Consecutive failed checks before the panel says the server extension is missing. */
export const FAILURES_BEFORE_MISSING = 3;

export class JobListPanel extends Widget {
  constructor(options: { commands: CommandRegistry; translator: ITranslator }) {
    super();
    this._commands = options.commands;
    this._trans = options.translator.load(TRANSLATION_DOMAIN);
    this.id = 'distrun-jobs';
    this.title.icon = distrunIcon;
    this.title.caption = this._trans.__('Distributed jobs');
    this.addClass('jp-distrun-JobList');
    this._build();
    this._poll = new Poll({
      factory: () => this.refresh(),
      frequency: { interval: POLL_INTERVAL_MS, backoff: false },
      standby: () => !this.isVisible || document.visibilityState === 'hidden',
      name: 'distrun:jobs'
    });
  }

  /** Fetches the job list now; never rejects (failures show in the panel). */
  async refresh(): Promise<void> {
    this._list.dataset.loading = 'true';
    try {
      const { jobs } = await listJobs();
      this._failures = 0;
      this._render(jobs);
    } catch (error) {
      this._failures++;
      this._renderFailure(error as Error);
    } finally {
      this._list.dataset.loading = 'false';
    }
  }

  /** Puts `node` (the Run-distributed form) between the toolbar and the job list. */
  addSection(node: HTMLElement): void {
    this.node.insertBefore(node, this._message);
  }

  dispose(): void {
    this._poll.dispose();
    super.dispose();
  }

  protected onAfterShow(): void {
    void this._poll.refresh();
  }

  private _build(): void {
    const toolbar = document.createElement('div');
    toolbar.className = 'jp-distrun-JobList-toolbar';
    const title = document.createElement('h2');
    title.textContent = this._trans.__('Distributed jobs');
    const refresh = document.createElement('button');
    refresh.className = 'jp-Button jp-mod-minimal jp-distrun-JobList-refresh';
    refresh.title = this._trans.__('Refresh the job list');
    refresh.dataset.testId = 'distrun-refresh';
    refreshIcon.element({ container: refresh });
    refresh.onclick = () => void this._commands.execute(CommandIDs.refreshJobs);
    this._compare.className = 'jp-Button jp-mod-styled jp-mod-minimal';
    this._compare.dataset.testId = 'distrun-compare';
    this._compare.onclick = () =>
      void this._commands.execute(CommandIDs.compareJobs, {
        ids: [...this._selected]
      });
    this._updateCompare();
    toolbar.append(title, this._compare, refresh);

    this._message.className = 'jp-distrun-JobList-message';
    this._message.dataset.testId = 'distrun-job-list-message';

    this._list.className = 'jp-distrun-JobList-items';
    this._list.dataset.testId = 'distrun-job-list';
    this._list.dataset.loading = 'true';

    this.node.append(toolbar, this._message, this._list);
  }

  private _render(jobs: IJob[]): void {
    const now = Date.now() / 1000;
    this._message.textContent = jobs.length
      ? ''
      : this._trans.__('No jobs yet. Run a cell with "Run distributed".');
    const sweeps = new Map<string, IJob[]>();
    for (const job of jobs) {
      const trial = trialOf(job);
      if (trial) {
        sweeps.set(trial[0], [...(sweeps.get(trial[0]) ?? []), job]);
      }
    }
    const items: HTMLElement[] = [];
    for (const job of jobs) {
      const sweepId = trialOf(job)?.[0];
      if (sweepId === undefined) {
        items.push(this._card(job, now));
      } else if (sweeps.has(sweepId)) {
        items.push(this._sweepCard(sweepId, sweeps.get(sweepId)!, now));
        sweeps.delete(sweepId); // listed once, where its newest trial is
      }
    }
    this._list.replaceChildren(...items);
    const ids = new Set(jobs.map(job => job.id));
    this._selected = new Set([...this._selected].filter(id => ids.has(id)));
    this._updateCompare();
  }

  /** A sweep: one entry with its progress, opening the sweep's view, expanding to its trials. */
  private _sweepCard(
    sweepId: string,
    trials: IJob[],
    now: number
  ): HTMLElement {
    const byNumber = [...trials].sort(
      (a, b) => (trialOf(a)?.[1] ?? 0) - (trialOf(b)?.[1] ?? 0)
    );
    const card = document.createElement('li');
    card.className = 'jp-distrun-JobCard jp-distrun-SweepCard';
    card.dataset.sweepId = sweepId;
    const state = sweepState(trials);
    card.dataset.state = state;
    const top = document.createElement('div');
    top.className = 'jp-distrun-JobCard-top';
    const expanded = this._expanded.has(sweepId);
    const toggle = document.createElement('button');
    toggle.className = 'jp-Button jp-mod-minimal jp-distrun-SweepCard-toggle';
    toggle.dataset.testId = 'distrun-sweep-toggle';
    toggle.setAttribute('aria-expanded', String(expanded));
    toggle.textContent = expanded ? '▾' : '▸';
    toggle.title = expanded
      ? this._trans.__('Hide the trials')
      : this._trans.__('Show the trials');
    toggle.onclick = () => {
      if (!this._expanded.delete(sweepId)) {
        this._expanded.add(sweepId);
      }
      void this.refresh();
    };
    const badge = document.createElement('span');
    badge.className = 'jp-distrun-badge';
    badge.dataset.state = state;
    badge.textContent = stateLabel(state, this._trans);
    const name = document.createElement('span');
    name.className = 'jp-distrun-JobCard-name';
    name.textContent = sweepId;
    const actions = document.createElement('span');
    actions.className = 'jp-distrun-JobCard-actions';
    if (trials.some(job => !isTerminal(job.state))) {
      actions.append(
        this._button(CommandIDs.cancelSweep, sweepId, 'distrun-sweep-cancel')
      );
    }
    actions.append(
      this._button(CommandIDs.deleteSweep, sweepId, 'distrun-sweep-delete')
    );
    top.append(toggle, badge, name, actions);
    const meta = document.createElement('div');
    meta.className = 'jp-distrun-JobCard-meta';
    const running = trials.filter(job => !isTerminal(job.state)).length;
    meta.textContent = [
      this._trans.__('sweep'),
      this._trans._n('%1 trial', '%1 trials', trials.length),
      running ? this._trans.__('%1 running', running) : null,
      formatAge(
        Math.min(...trials.map(job => job.created_at)),
        now,
        this._trans
      )
    ]
      .filter(part => part !== null)
      .join(' · ');
    card.append(top, meta);
    this._openOnSelect(card, CommandIDs.openSweep, { id: sweepId });
    if (expanded) {
      const list = document.createElement('ul');
      list.className = 'jp-distrun-SweepCard-trials';
      list.append(...byNumber.map(job => this._card(job, now)));
      card.append(list);
    }
    return card;
  }

  private _updateCompare(): void {
    const count = this._selected.size;
    this._compare.textContent = count
      ? this._trans.__('Compare (%1)', count)
      : this._trans.__('Compare');
    this._compare.disabled = count < 2;
    this._compare.title = this._trans.__(
      'Tick two or more jobs, then compare their metrics and specs'
    );
  }

  private _checkbox(job: IJob): HTMLElement {
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.className = 'jp-distrun-JobCard-select';
    box.dataset.testId = 'distrun-select';
    box.checked = this._selected.has(job.id);
    box.title = this._trans.__('Select %1 to compare', job.id);
    box.onchange = () => {
      if (box.checked) {
        this._selected.add(job.id);
      } else {
        this._selected.delete(job.id);
      }
      this._updateCompare();
    };
    return box;
  }

  private _renderFailure(error: Error): void {
    if (this._failures < FAILURES_BEFORE_MISSING) {
      return; // a blip: keep showing the last list
    }
    const missing = error instanceof DistrunAPIError && error.status === 404;
    this._message.textContent = missing
      ? this._trans.__(
          'The distrun server extension is missing: check `jupyter server extension list`.'
        )
      : this._trans.__('Cannot list jobs: %1', error.message);
    this._message.classList.add('jp-mod-error');
    this._list.replaceChildren();
  }

  private _card(job: IJob, now: number): HTMLElement {
    const card = document.createElement('li');
    card.className = 'jp-distrun-JobCard';
    card.dataset.jobId = job.id;
    card.dataset.state = job.state;

    const top = document.createElement('div');
    top.className = 'jp-distrun-JobCard-top';
    const badge = document.createElement('span');
    badge.className = 'jp-distrun-badge';
    badge.dataset.state = job.state;
    badge.textContent = stateLabel(job.state, this._trans);
    badge.title = formatStatus(job, this._trans, now);
    const name = document.createElement('span');
    name.className = 'jp-distrun-JobCard-name';
    name.textContent = job.id;
    name.title = job.name;
    top.append(this._checkbox(job), badge, name, this._actions(job));

    const meta = document.createElement('div');
    meta.className = 'jp-distrun-JobCard-meta';
    const duration = jobDuration(job, now);
    meta.textContent = [
      job.framework,
      this._trans._n('%1 replica', '%1 replicas', job.replicas.length),
      formatAge(job.created_at, now, this._trans),
      duration === null ? null : formatDuration(duration, this._trans)
    ]
      .filter(part => part !== null)
      .join(' · ');

    card.append(top, meta);
    this._openOnSelect(card, CommandIDs.openLogs, { id: job.id });
    const gpus = formatGpus(job);
    if (gpus) {
      const line = document.createElement('div');
      line.className = 'jp-distrun-JobCard-gpus';
      line.dataset.testId = 'distrun-job-gpus';
      line.textContent = gpus;
      card.append(line);
    }
    // A failed job says why; so does a pending one the engine reports stuck.
    if (job.state === 'failed' || (job.state === 'pending' && job.reason)) {
      const reason = document.createElement('div');
      reason.className = 'jp-distrun-JobCard-reason';
      reason.dataset.testId = 'distrun-job-reason';
      reason.dataset.state = job.state;
      reason.textContent = formatStatus(job, this._trans, now);
      card.append(reason);
    }
    return card;
  }

  /**
   * Clicking a card (not its buttons, box or nested cards) or pressing Enter on it runs
   * `command`: a job's logs, a sweep's view.
   */
  private _openOnSelect(
    card: HTMLElement,
    command: string,
    args: { id: string }
  ): void {
    card.tabIndex = 0;
    card.title = this._commands.caption(command, args);
    const open = (event: Event) => {
      const target = event.target as HTMLElement;
      const inner = target.closest('button, input, .jp-distrun-JobCard');
      if (inner === card || !inner) {
        event.stopPropagation();
        void this._commands.execute(command, args);
      }
    };
    card.onclick = open;
    card.onkeydown = event => event.key === 'Enter' && open(event);
  }

  private _actions(job: IJob): HTMLElement {
    const actions = document.createElement('span');
    actions.className = 'jp-distrun-JobCard-actions';
    if (!isTerminal(job.state)) {
      actions.append(
        this._button(CommandIDs.cancelJob, job.id, 'distrun-cancel')
      );
    }
    actions.append(
      this._button(CommandIDs.deleteJob, job.id, 'distrun-delete')
    );
    return actions;
  }

  private _button(command: string, id: string, testId: string): HTMLElement {
    const args = { id };
    const button = document.createElement('button');
    button.className = 'jp-Button jp-mod-styled jp-mod-minimal';
    button.dataset.testId = testId;
    button.textContent = this._commands.label(command, args);
    button.title = this._commands.caption(command, args);
    button.onclick = () => void this._commands.execute(command, args);
    return button;
  }

  private readonly _commands: CommandRegistry;
  private readonly _trans: TranslationBundle;
  private readonly _poll: Poll;
  private readonly _message = document.createElement('div');
  private readonly _list = document.createElement('ul');
  private _failures = 0;
  private readonly _compare = document.createElement('button');
  private _selected = new Set<string>();
  private readonly _expanded = new Set<string>();
}

/** A sweep's state in one word: running while a trial is, else how its trials ended. */
export function sweepState(trials: readonly IJob[]): JobState {
  if (trials.some(job => !isTerminal(job.state))) {
    return 'running';
  }
  if (trials.some(job => job.state === 'succeeded')) {
    return 'succeeded';
  }
  return trials.some(job => job.state === 'failed') ? 'failed' : 'cancelled';
}
