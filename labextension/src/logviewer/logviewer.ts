/**
 * The log viewer: one job in the main area, live. A status line in words, then five tabs:
 * Logs (every replica's lines, virtualised, with replica filter, search, follow / pause and
 * jump to the first error), Metrics (the live chart), Usage (CPU, memory, GPU per replica),
 * Timeline (attempts, failures, restarts, resumes) and Spec (the job as a cell, with Run again
 * and Edit and run again).
 *
 * Lines travel websocket -> LogBuffer (de-duplicated, resume cursor) -> once per animation
 * frame, within a time budget -> LogStore + MetricStore + LogView -> the few rows in view.
 * A burst of a million lines is absorbed over several frames, never in one long task.
 */

import {
  ITranslator,
  nullTranslator,
  TranslationBundle
} from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { Panel, Widget } from '@lumino/widgets';

import { appendAnsi, plainText } from '../common/ansi';
import { getUsage } from '../common/api';
import { appendFrameLine } from '../common/sourceframes';
import { ScalarsPoller } from './scalars';
import { TimelinePanel } from './timelinepanel';
import { UsageStore, usageNotes } from './usagestore';
import { replicaColorIndex, replicaPrefix } from '../common/colors';
import { formatStatus } from '../common/format';
import { distrunIcon } from '../common/icons';
import { LogBuffer } from '../common/logbuffer';
import { DEFAULT_CAPACITY, LogStore, LogView } from './logstore';
import { MetricStore } from './metrics';
import { MetricsPanel } from './metricspanel';
import { IJob, isTerminal, IUsageSample, LogTuple } from '../common/model';
import { cellFromSpec } from '../common/specheader';
import { connectJobStream, JobStream } from '../common/stream';
import { UnfinishedLines } from '../common/unfinished';
import { EndAfterLines } from '../common/endstatus';
import { CommandIDs, TRANSLATION_DOMAIN } from '../common/tokens';
import { VirtualList } from './virtuallist';

/** Time a frame may spend taking in new lines; the rest is the browser's. */
const FRAME_BUDGET_MS = 8;
/** Lines taken in between two looks at the clock. */
const CHUNK_LINES = 2000;
/** Longer lines are cut on screen (the download has them whole). */
export const MAX_RENDERED_CHARS = 2000;
const SEARCH_DELAY_MS = 150;

export type ViewerTab = 'logs' | 'metrics' | 'usage' | 'timeline' | 'spec';

export interface ILogViewerOptions {
  jobId: string;
  commands: CommandRegistry;
  translator?: ITranslator;
  /** Lines kept in the browser; older ones are dropped (default two million). */
  capacity?: number;
}

export class LogViewer extends Panel {
  constructor(options: ILogViewerOptions) {
    super();
    this.jobId = options.jobId;
    this._commands = options.commands;
    this._trans = (options.translator ?? nullTranslator).load(
      TRANSLATION_DOMAIN
    );
    const capacity = options.capacity ?? DEFAULT_CAPACITY;
    this._buffer = new LogBuffer(capacity);
    this._store = new LogStore(capacity);
    this._view = new LogView(this._store);
    this.id = `distrun-logs-${this.jobId}`;
    this.title.label = this.jobId;
    this.title.caption = this._trans.__(
      'Logs of distributed job %1',
      this.jobId
    );
    this.title.icon = distrunIcon;
    this.title.closable = true;
    this.addClass('jp-distrun-LogViewer');
    this.node.dataset.testId = 'distrun-viewer';
    this.node.dataset.jobId = this.jobId;

    this._list = new VirtualList({
      rowCount: () => this._view.rows,
      renderRow: (row, node) => this._renderRow(row, node),
      scrolled: atEnd => this._setFollow(atEnd)
    });
    this._list.node.dataset.testId = 'distrun-viewer-log';
    // JupyterLab's own ANSI colour classes apply to the rows (common/ansi).
    this._list.addClass('jp-RenderedText');
    this._list.node.setAttribute('role', 'log');
    this._list.node.setAttribute(
      'aria-label',
      this._trans.__('Log lines of every shown replica')
    );
    this._metrics = new MetricsPanel(this._metricStore, this._trans, () =>
      this._replicaNames()
    );
    this._usageStore = new UsageStore(this._trans);
    this._usage = new MetricsPanel(
      this._usageStore,
      this._trans,
      () => this._replicaNames(),
      {
        empty: this._trans.__(
          'No usage yet: the engine samples each replica about once a second while it runs (the local engine; docs/observability.md).'
        ),
        testId: 'distrun-viewer-usage',
        selectTestId: 'distrun-viewer-usage-measure',
        chartTestId: 'distrun-viewer-usage-chart',
        preferred: this._usageStore.preferred,
        xLabel: this._trans.__('time'),
        xTime: true,
        stacked: true
      }
    );
    this._timeline = new TimelinePanel(this._trans);
    this._scalars = new ScalarsPoller(
      this.jobId,
      this._metricStore,
      () => this._metrics.refresh(),
      () =>
        this._end !== null ||
        (this._job !== null && isTerminal(this._job.state))
    );

    this._build();
    this._stream = connectJobStream(this.jobId, this._buffer, this._trans, {
      lines: lines => this._onLines(lines),
      partial: lines => this._onPartial(lines),
      status: job => this._onStatus(job),
      usage: samples => this._onUsage(samples),
      end: () => this._onEnd(),
      notice: (message, isError) => this._showNotice(message, isError)
    });
  }

  readonly jobId: string;

  /** The job as last reported by the server (null until the first status). */
  get job(): IJob | null {
    return this._job;
  }

  get follow(): boolean {
    return this._follow;
  }

  /** Follow (scroll with new lines) or pause. */
  setFollow(follow: boolean): void {
    this._setFollow(follow);
    if (follow) {
      this._list.scrollToEnd();
    }
  }

  /** Shows a tab. */
  showTab(tab: ViewerTab): void {
    this._tab = tab;
    const panes = {
      logs: this._logsPane,
      metrics: this._metrics,
      usage: this._usage,
      timeline: this._timeline,
      spec: this._specPane
    };
    for (const [name, pane] of Object.entries(panes)) {
      pane.setHidden(name !== tab);
    }
    if (tab === 'metrics') {
      this._scalars.start();
    } else {
      this._scalars.stop();
    }
    if (tab === 'usage') {
      this._askUsageNotes();
    }
    for (const [name, button] of this._tabButtons) {
      button.setAttribute('aria-selected', String(name === tab));
      button.tabIndex = name === tab ? 0 : -1;
    }
    this._render();
  }

  /** Scrolls to the first error of the shown replicas; false when there is none. */
  jumpToFirstError(): boolean {
    const row = this._view.firstErrorRow();
    if (row < 0) {
      this._showNotice(
        this._trans.__('No error among the shown replicas yet.')
      );
      return false;
    }
    this.showTab('logs');
    this._setFollow(false);
    this._markedRow = row;
    this._list.scrollToRow(row);
    return true;
  }

  /** Moves to the next (or previous) search match. */
  findNext(backwards = false): void {
    this._applySearch();
    const hasCurrent = this._currentMatch >= 0;
    const from = hasCurrent
      ? this._view.matchRow(this._currentMatch)
      : this._list.topRow;
    this._goToMatch(
      backwards
        ? this._view.previousMatch(from)
        : this._view.nextMatch(hasCurrent ? from + 1 : from)
    );
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._stream.dispose();
    this._scalars.dispose();
    cancelAnimationFrame(this._frame);
    window.clearTimeout(this._searchTimer);
    super.dispose();
  }

  protected onAfterShow(): void {
    this._render();
  }

  // --- building ---------------------------------------------------------------------------

  private _build(): void {
    const header = new Widget();
    header.addClass('jp-distrun-LogViewer-header');
    this._status.className = 'jp-distrun-LogViewer-status';
    this._status.dataset.testId = 'distrun-viewer-status';
    this._status.dataset.state = 'pending';
    this._status.setAttribute('role', 'status');
    this._status.textContent = this._trans.__('connecting…');
    const id = document.createElement('span');
    id.className = 'jp-distrun-LogViewer-id';
    id.textContent = this.jobId;
    const tabs = document.createElement('div');
    tabs.className = 'jp-distrun-LogViewer-tabs';
    tabs.setAttribute('role', 'tablist');
    const labels: Record<ViewerTab, string> = {
      logs: this._trans.__('Logs'),
      metrics: this._trans.__('Metrics'),
      usage: this._trans.__('Usage'),
      timeline: this._trans.__('Timeline'),
      spec: this._trans.__('Spec')
    };
    for (const tab of [
      'logs',
      'metrics',
      'usage',
      'timeline',
      'spec'
    ] as ViewerTab[]) {
      const button = document.createElement('button');
      button.className = 'jp-distrun-LogViewer-tab';
      button.setAttribute('role', 'tab');
      button.dataset.testId = `distrun-viewer-tab-${tab}`;
      button.textContent = labels[tab];
      button.onclick = () => this.showTab(tab);
      this._tabButtons.set(tab, button);
      tabs.append(button);
    }
    const actions = document.createElement('span');
    actions.className = 'jp-distrun-LogViewer-actions';
    this._cancel = this._commandButton(
      CommandIDs.cancelJob,
      'distrun-viewer-cancel',
      'jp-mod-warn'
    );
    actions.append(
      this._cancel,
      this._commandButton(CommandIDs.downloadLogs, 'distrun-viewer-download'),
      this._commandButton(
        CommandIDs.openTensorBoard,
        'distrun-viewer-tensorboard'
      ),
      this._commandButton(CommandIDs.rerunJob, 'distrun-viewer-rerun'),
      this._commandButton(CommandIDs.resumeJob, 'distrun-viewer-resume'),
      this._commandButton(CommandIDs.editRerunJob, 'distrun-viewer-edit-rerun')
    );
    this._cancel.hidden = true;
    header.node.append(this._status, id, tabs, actions);

    this._notice.className = 'jp-distrun-LogViewer-notice';
    this._notice.dataset.testId = 'distrun-viewer-notice';
    this._notice.hidden = true;
    header.node.append(this._notice);

    this._logsPane.addClass('jp-distrun-LogViewer-logs');
    const toolbar = new Widget();
    toolbar.addClass('jp-distrun-LogViewer-toolbar');
    toolbar.node.append(
      this._buildFilter(),
      this._buildSearch(),
      this._buildLogButtons()
    );
    this._logsPane.addWidget(toolbar);
    this._logsPane.addWidget(this._list);
    // Each replica's unfinished line (a progress bar being drawn), redrawn in place below.
    this._live.addClass('jp-distrun-live');
    this._live.addClass('jp-RenderedText');
    this._live.node.dataset.testId = 'distrun-viewer-live';
    this._logsPane.addWidget(this._live);

    this._specPane.addClass('jp-distrun-LogViewer-spec');
    this._specText.dataset.testId = 'distrun-viewer-spec';
    this._specPane.node.append(this._specText);

    const body = new Panel();
    body.addClass('jp-distrun-LogViewer-body');
    body.addWidget(this._logsPane);
    body.addWidget(this._metrics);
    body.addWidget(this._usage);
    body.addWidget(this._timeline);
    body.addWidget(this._specPane);

    this.addWidget(header);
    this.addWidget(body);
    this.showTab('logs');
  }

  private _buildFilter(): HTMLElement {
    this._chips.className = 'jp-distrun-LogViewer-replicas';
    this._chips.setAttribute('role', 'group');
    this._chips.setAttribute('aria-label', this._trans.__('Replicas shown'));
    return this._chips;
  }

  private _buildSearch(): HTMLElement {
    const box = document.createElement('span');
    box.className = 'jp-distrun-LogViewer-search';
    box.setAttribute('role', 'search');
    this._search.type = 'search';
    this._search.className = 'jp-mod-styled';
    this._search.placeholder = this._trans.__('Search the logs');
    this._search.setAttribute(
      'aria-label',
      this._trans.__(
        'Search the logs (Enter: next match, Shift+Enter: previous)'
      )
    );
    this._search.dataset.testId = 'distrun-viewer-search';
    this._search.oninput = () => {
      window.clearTimeout(this._searchTimer);
      this._searchTimer = window.setTimeout(
        () => this._onSearchInput(),
        SEARCH_DELAY_MS
      );
    };
    this._search.onkeydown = event => {
      if (event.key === 'Enter') {
        event.preventDefault();
        this.findNext(event.shiftKey);
      }
    };
    const previous = this._button(
      this._trans.__('▲'),
      this._trans.__('Previous match'),
      'distrun-viewer-search-prev'
    );
    previous.onclick = () => this.findNext(true);
    const next = this._button(
      this._trans.__('▼'),
      this._trans.__('Next match'),
      'distrun-viewer-search-next'
    );
    next.onclick = () => this.findNext(false);
    this._matchCount.className = 'jp-distrun-LogViewer-count';
    this._matchCount.dataset.testId = 'distrun-viewer-search-count';
    this._matchCount.setAttribute('aria-live', 'polite');
    box.append(this._search, previous, next, this._matchCount);
    return box;
  }

  private _buildLogButtons(): HTMLElement {
    const box = document.createElement('span');
    box.className = 'jp-distrun-LogViewer-logButtons';
    this._followButton = this._button(
      this._trans.__('Follow'),
      this._trans.__('Scroll with new lines (pause by scrolling up)'),
      'distrun-viewer-follow'
    );
    this._followButton.onclick = () => this.setFollow(!this._follow);
    this._errorButton = this._button(
      this._trans.__('First error'),
      this._trans.__(
        'Jump to the first Traceback, Error, Exception or FAILED line'
      ),
      'distrun-viewer-first-error'
    );
    this._errorButton.onclick = () => this.jumpToFirstError();
    this._dropped.className = 'jp-distrun-LogViewer-dropped';
    this._dropped.dataset.testId = 'distrun-viewer-dropped';
    box.append(this._followButton, this._errorButton, this._dropped);
    this._setFollow(true);
    return box;
  }

  private _button(
    label: string,
    title: string,
    testId: string
  ): HTMLButtonElement {
    const button = document.createElement('button');
    button.className = 'jp-Button jp-mod-styled jp-mod-minimal';
    button.textContent = label;
    button.title = title;
    button.setAttribute('aria-label', title);
    button.dataset.testId = testId;
    return button;
  }

  private _commandButton(
    command: string,
    testId: string,
    extraClass = ''
  ): HTMLButtonElement {
    const args = { id: this.jobId };
    const button = this._button(
      this._commands.label(command, args),
      this._commands.caption(command, args),
      testId
    );
    if (extraClass) {
      button.classList.add(extraClass);
    }
    button.onclick = () => void this._commands.execute(command, args);
    return button;
  }

  // --- the stream -------------------------------------------------------------------------

  private _onLines(lines: LogTuple[]): void {
    if (this._buffer.push(lines) > 0) {
      if (this._unfinished.finished(lines)) {
        this._renderLive();
      }
      this._schedule();
    }
  }

  private _onPartial(lines: LogTuple[]): void {
    if (!this._unfinished.update(lines, this._buffer.cursor())) {
      return;
    }
    for (const [replica, seq, , text] of lines) {
      if (text) {
        this._metricStore.addPartial(replica, seq, text);
      }
    }
    this._metricStore.touch();
    this._renderLive();
    if (this._tab === 'metrics') {
      this._metrics.refresh();
    }
  }

  private _renderLive(): void {
    const rows = this._unfinished.lines(this._replicaNames());
    this._live.node.replaceChildren(
      ...rows.map(([replica, , , text]) => {
        const row = document.createElement('div');
        row.className = 'jp-distrun-LogViewer-row';
        row.dataset.replica = replica;
        row.append(this._prefix(replica), this._textNode(text, false));
        return row;
      })
    );
  }

  /**
   * Once, what the engine cannot measure of this job, in words over the Usage charts: why it
   * does not sample at all, or a GPU metrics-server does not report (docs/observability.md).
   */
  private _askUsageNotes(): void {
    if (this._usageNotesAsked) {
      return;
    }
    this._usageNotesAsked = true;
    // No samples wanted (they come on the log stream): the largest `since` there is.
    getUsage(this.jobId, Number.MAX_SAFE_INTEGER).then(
      report => this._usage.setNotes(usageNotes(report)),
      () => {
        this._usageNotesAsked = false; // asked again when the tab is shown again
      }
    );
  }

  private _onUsage(samples: IUsageSample[]): void {
    this._usageStore.add(samples);
    if (this._tab === 'usage') {
      this._usage.refresh();
    }
  }

  private _onStatus(job: IJob): void {
    const shown = this._endAfterLines.status(job);
    if (shown) {
      this._showStatus(shown);
    }
  }

  private _showStatus(job: IJob): void {
    this._job = job;
    this._status.textContent = formatStatus(
      job,
      this._trans,
      Date.now() / 1000
    );
    this._status.dataset.state = job.state;
    this._cancel.hidden = isTerminal(job.state);
    this._replicaStates = new Map(job.replicas.map(r => [r.name, r.state]));
    this._jobReplicas = job.replicas.map(r => r.name);
    this._prefixWidth = Math.max(
      this._prefixWidth,
      ...this._jobReplicas.map(n => n.length)
    );
    this._updateChips();
    this._updateSpec(job);
    this._usageStore.setSpec(job.spec);
    this._timeline.setJob(job);
  }

  private _onEnd(): void {
    // Shown once every line before it is taken in (`_takeIn`).
    this._end = this._endAfterLines.end();
    this._cancel.hidden = true;
    if (this._unfinished.clear()) {
      this._renderLive();
    }
    this._schedule();
  }

  private _showNotice(message: string, isError = false): void {
    this._notice.textContent = message;
    this._notice.hidden = false;
    this._notice.classList.toggle('jp-mod-error', isError);
  }

  private _schedule(): void {
    if (this._frame === 0) {
      this._frame = requestAnimationFrame(() => this._takeIn());
    }
  }

  /** Takes in pending lines for at most FRAME_BUDGET_MS, then renders. */
  private _takeIn(): void {
    this._frame = 0;
    const deadline = performance.now() + FRAME_BUDGET_MS;
    do {
      if (this._queueStart >= this._queue.length) {
        const { lines, skipped } = this._buffer.drain();
        if (skipped > 0) {
          this._store.skip(skipped);
          this._view.update(this._store.end, 1);
        }
        this._queue = lines;
        this._queueStart = 0;
        if (lines.length === 0) {
          break;
        }
      }
      const chunk = this._queue.slice(
        this._queueStart,
        this._queueStart + CHUNK_LINES
      );
      this._queueStart += chunk.length;
      const from = this._store.end;
      const dropped = this._store.append(chunk);
      this._view.update(from, dropped);
      for (const [replica, seq, , text] of chunk) {
        this._metricStore.addLine(replica, seq, text);
      }
    } while (performance.now() < deadline);
    this._metricStore.touch();
    if (this._queueStart < this._queue.length || this._buffer.pending > 0) {
      this._schedule();
    } else if (this._endAfterLines.ended) {
      if (this._end) {
        this._showStatus(this._end);
        this._end = null;
      }
      this.node.dataset.ended = 'true';
    }
    if (this._store.replicas.length !== this._chipReplicas.length) {
      this._updateChips();
    }
    this._render();
  }

  // --- rendering --------------------------------------------------------------------------

  private _render(): void {
    if (!this.isVisible) {
      return;
    }
    this._list.node.dataset.rows = String(this._view.rows);
    this._dropped.textContent = this._store.first
      ? this._trans.__(
          '%1 older lines dropped here (Download has them all)',
          this._store.first
        )
      : '';
    this._errorButton.disabled = this._view.firstErrorRow() < 0;
    this._updateMatchCount();
    if (this._tab === 'logs') {
      if (this._follow) {
        this._list.scrollToEnd();
      } else {
        this._list.refresh();
      }
    } else if (this._tab === 'metrics') {
      this._metrics.refresh();
    } else if (this._tab === 'usage') {
      this._usage.refresh();
    }
  }

  private _renderRow(row: number, node: HTMLElement): void {
    const line = this._view.lineAt(row);
    const replica = this._store.replicas[this._store.replicaOf(line)];
    const text = this._store.text(line);
    node.replaceChildren(this._prefix(replica), this._textNode(text, true));
    node.dataset.replica = replica;
    const current =
      this._currentMatch >= 0 &&
      this._view.matchRow(this._currentMatch) === row;
    node.classList.toggle('jp-mod-current', current);
    node.classList.toggle('jp-mod-marked', row === this._markedRow);
  }

  private _prefix(replica: string): HTMLElement {
    const prefix = document.createElement('span');
    prefix.className = `jp-distrun-prefix jp-distrun-c${replicaColorIndex(replica, this._replicaNames())}`;
    prefix.textContent = replicaPrefix(replica, this._prefixWidth);
    return prefix;
  }

  /** A line's text as a terminal shows it, in colour; with the search's matches marked
   * (then without colours), or cut when it is very long. */
  private _textNode(raw: string, searchable: boolean): HTMLElement {
    const node = document.createElement('pre');
    node.className = 'jp-distrun-row-text';
    const shown = plainText(raw);
    if (shown.length > MAX_RENDERED_CHARS) {
      node.textContent = this._trans.__(
        '%1… (%2 more characters)',
        shown.slice(0, MAX_RENDERED_CHARS),
        shown.length - MAX_RENDERED_CHARS
      );
    } else if (searchable && this._view.highlights(shown).length > 0) {
      node.append(...this._highlighted(shown));
    } else if (!appendFrameLine(node, raw, this.jobId)) {
      appendAnsi(node, raw);
    }
    return node;
  }

  private _highlighted(text: string): Array<string | HTMLElement> {
    const spans = this._view.highlights(text);
    if (spans.length === 0) {
      return [text];
    }
    const parts: Array<string | HTMLElement> = [];
    let at = 0;
    for (const [start, end] of spans) {
      parts.push(text.slice(at, start));
      const mark = document.createElement('mark');
      mark.className = 'jp-distrun-match';
      mark.textContent = text.slice(start, end);
      parts.push(mark);
      at = end;
    }
    parts.push(text.slice(at));
    return parts;
  }

  private _replicaNames(): readonly string[] {
    return this._jobReplicas.length ? this._jobReplicas : this._store.replicas;
  }

  private _updateChips(): void {
    const names = [...this._jobReplicas];
    for (const name of this._store.replicas) {
      if (!names.includes(name)) {
        names.push(name);
      }
    }
    this._prefixWidth = Math.max(
      this._prefixWidth,
      ...names.map(n => n.length)
    );
    if (names.join() !== this._chipReplicas.join()) {
      this._chipReplicas = names;
      this._chips.replaceChildren(...names.map(name => this._chip(name)));
    }
    for (const chip of this._chips.children) {
      const name = (chip as HTMLElement).dataset.replica!;
      const state = this._replicaStates.get(name);
      if (state) {
        (chip as HTMLElement).dataset.state = state;
        (chip as HTMLElement).title = this._trans.__('%1: %2', name, state);
      }
    }
  }

  private _chip(name: string): HTMLElement {
    const chip = document.createElement('label');
    const colour = replicaColorIndex(name, this._replicaNames());
    chip.className = `jp-distrun-chip jp-distrun-c${colour}`;
    chip.dataset.replica = name;
    chip.dataset.testId = 'distrun-viewer-replica';
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.checked = !this._view.isHidden(name);
    box.onchange = () => {
      this._view.setHidden(name, !box.checked);
      this._currentMatch = -1;
      this._markedRow = -1;
      this._render();
    };
    const label = document.createElement('span');
    label.textContent = name;
    chip.append(box, label);
    return chip;
  }

  private _updateSpec(job: IJob): void {
    const cell = cellFromSpec(job.spec).cell;
    if (this._specText.textContent !== cell) {
      this._specText.textContent = cell;
    }
  }

  // --- search and follow -------------------------------------------------------------------

  private _onSearchInput(): void {
    this._applySearch();
    if (this._view.matchCount > 0) {
      this._goToMatch(
        this._view.nextMatch(this._follow ? 0 : this._list.topRow)
      );
    } else {
      this._render();
    }
  }

  private _applySearch(): void {
    if (this._search.value !== this._view.query) {
      window.clearTimeout(this._searchTimer);
      this._view.setQuery(this._search.value);
      this._currentMatch = -1;
    }
  }

  private _goToMatch(index: number): void {
    this._currentMatch = index;
    if (index < 0) {
      this._render();
      return;
    }
    this._setFollow(false);
    this._list.scrollToRow(this._view.matchRow(index));
    this._render();
  }

  private _updateMatchCount(): void {
    const count = this._view.matchCount;
    this._matchCount.textContent = !this._view.query
      ? ''
      : count === 0
        ? this._trans.__('no match')
        : this._currentMatch >= 0
          ? this._trans.__('%1 of %2', this._currentMatch + 1, count)
          : this._trans._n('%1 match', '%1 matches', count);
    this._matchCount.dataset.count = String(count);
  }

  private _setFollow(follow: boolean): void {
    this._follow = follow;
    if (this._followButton) {
      this._followButton.setAttribute('aria-pressed', String(follow));
      this._followButton.textContent = follow
        ? this._trans.__('Following')
        : this._trans.__('Paused');
    }
  }

  private readonly _commands: CommandRegistry;
  private readonly _trans: TranslationBundle;
  private readonly _buffer: LogBuffer;
  private readonly _store: LogStore;
  private readonly _view: LogView;
  private readonly _metricStore = new MetricStore();
  private readonly _unfinished = new UnfinishedLines();
  private readonly _live = new Widget();
  private readonly _list: VirtualList;
  private readonly _metrics: MetricsPanel;
  private readonly _usage: MetricsPanel;
  private _usageNotesAsked = false;
  private readonly _usageStore: UsageStore;
  private readonly _timeline: TimelinePanel;
  private readonly _scalars: ScalarsPoller;
  private readonly _stream: JobStream;
  private readonly _logsPane = new Panel();
  private readonly _specPane = new Widget();
  private readonly _specText = document.createElement('pre');
  private readonly _status = document.createElement('span');
  private readonly _notice = document.createElement('div');
  private readonly _chips = document.createElement('span');
  private readonly _search = document.createElement('input');
  private readonly _matchCount = document.createElement('span');
  private readonly _dropped = document.createElement('span');
  private readonly _tabButtons = new Map<ViewerTab, HTMLButtonElement>();
  private _cancel!: HTMLButtonElement;
  private _followButton: HTMLButtonElement | null = null;
  private _errorButton!: HTMLButtonElement;
  private _job: IJob | null = null;
  private readonly _endAfterLines = new EndAfterLines();
  private _end: IJob | null = null; // the terminal status, shown once every line is taken in
  private _jobReplicas: string[] = [];
  private _chipReplicas: string[] = [];
  private _replicaStates = new Map<string, string>();
  private _prefixWidth = 0;
  private _queue: LogTuple[] = [];
  private _queueStart = 0;
  private _frame = 0;
  private _searchTimer = 0;
  private _currentMatch = -1;
  private _markedRow = -1;
  private _follow = true;
  private _tab: ViewerTab = 'logs';
}
