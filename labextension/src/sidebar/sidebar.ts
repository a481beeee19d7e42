/**
 * The left-area job list: the user's jobs newest first, refreshed every 2 s while visible and
 * right after every action, with cancel and delete per job (as commands).
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
import { IJob, isTerminal } from '../common/model';
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
    toolbar.append(title, refresh);

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
    this._list.replaceChildren(...jobs.map(job => this._card(job, now)));
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
    top.append(badge, name, this._actions(job));

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
    this._openOnSelect(card, job);
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

  /** Clicking a card (not its buttons) or pressing Enter on it opens the job's logs. */
  private _openOnSelect(card: HTMLElement, job: IJob): void {
    const args = { id: job.id };
    card.tabIndex = 0;
    card.title = this._commands.caption(CommandIDs.openLogs, args);
    const open = (event: Event) => {
      if (!(event.target as HTMLElement).closest('button')) {
        void this._commands.execute(CommandIDs.openLogs, args);
      }
    };
    card.onclick = open;
    card.onkeydown = event => event.key === 'Enter' && open(event);
  }

  private _actions(job: IJob): HTMLElement {
    const actions = document.createElement('span');
    actions.className = 'jp-distrun-JobCard-actions';
    if (!isTerminal(job.state)) {
      actions.append(this._button(CommandIDs.cancelJob, job, 'distrun-cancel'));
    }
    actions.append(this._button(CommandIDs.deleteJob, job, 'distrun-delete'));
    return actions;
  }

  private _button(command: string, job: IJob, testId: string): HTMLElement {
    const args = { id: job.id };
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
}
