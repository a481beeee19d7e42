/**
 * A job shown live: a status line with a stop button over every replica's log lines.
 *
 * Lines go from the websocket into a LogBuffer and reach the DOM once per animation frame,
 * as one fragment, and the DOM keeps at most `maxLines` lines, so a job printing 100k
 * lines/s costs the tab one paint per frame rather than one per line.
 */

import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { cancelJob } from '../common/api';
import { appendAnsi } from '../common/ansi';
import { replicaColorIndex, replicaPrefix } from '../common/colors';
import { formatStatus } from '../common/format';
import { ITrans } from '../common/trans';
import { UnfinishedLines } from '../common/unfinished';
import { EndAfterLines } from '../common/endstatus';
import { LogBuffer } from '../common/logbuffer';
import { IJob, IJobSpec, isTerminal, LogTuple } from '../common/model';
import { connectJobStream, JobStream } from '../common/stream';
import { appendFrameLine } from '../common/sourceframes';
import { renderTracebacks } from '../common/tracebacks';
import { UsageGauges } from '../common/usage';
import { TRANSLATION_DOMAIN } from '../common/tokens';
import { traceMark } from '../common/trace';

export const DEFAULT_MAX_LINES = 5000;
/** At most this many lines are painted per animation frame; older ones are counted. */
export const MAX_LINES_PER_FRAME = 300;
/** After this long without a change shown, the next one is shown at once, not next frame. */
const QUIET_MS = 50;

export interface IJobViewOptions {
  jobId: string;
  translator?: ITranslator;
  maxLines?: number;
}

export class JobView extends Widget {
  constructor(options: IJobViewOptions) {
    super();
    this.jobId = options.jobId;
    this._trans = (options.translator ?? nullTranslator).load(
      TRANSLATION_DOMAIN
    );
    this._buffer = new LogBuffer(options.maxLines ?? DEFAULT_MAX_LINES);
    this.addClass('jp-distrun-JobView');
    this.node.dataset.testId = 'distrun-job';
    this.node.dataset.jobId = this.jobId;
    this._build();
    this._stream = connectJobStream(this.jobId, this._buffer, this._trans, {
      lines: lines => this._onLines(lines),
      partial: lines => this._onPartial(lines),
      status: job => this._onStatus(job),
      usage: samples => this._usage.update(this._replicas, samples, this._spec),
      end: () => this._onEnd(),
      notice: (message, isError) => this._showNotice(message, isError)
    });
  }

  readonly jobId: string;

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._stream.dispose();
    cancelAnimationFrame(this._frame);
    super.dispose();
  }

  private _build(): void {
    const header = document.createElement('div');
    header.className = 'jp-distrun-JobView-header';

    this._status.className = 'jp-distrun-JobView-status';
    this._status.dataset.testId = 'distrun-job-status';
    this._status.dataset.state = 'pending';
    this._status.textContent = this._trans.__('connecting…');

    const id = document.createElement('span');
    id.className = 'jp-distrun-JobView-id';
    id.textContent = this.jobId;

    this._stop.className =
      'jp-Button jp-mod-styled jp-mod-warn jp-distrun-JobView-stop';
    this._stop.dataset.testId = 'distrun-job-stop';
    this._stop.textContent = this._trans.__('Stop');
    this._stop.title = this._trans.__('Cancel the job: stop every replica');
    this._stop.onclick = () => void this._cancel();

    header.append(this._status, id, this._stop);

    this._notice.className = 'jp-distrun-JobView-notice';
    this._notice.hidden = true;

    // jp-RenderedText: JupyterLab's own ANSI colour classes apply to the lines (common/ansi).
    this._log.className = 'jp-distrun-JobView-log jp-RenderedText';
    this._log.dataset.testId = 'distrun-job-log';
    this._log.setAttribute('role', 'log');
    this._log.setAttribute('aria-label', this._trans.__('Replica logs'));
    // Known from scroll events, so painting never reads the layout before writing it.
    this._log.addEventListener(
      'scroll',
      () => {
        const log = this._log;
        this._follow = log.scrollHeight - log.scrollTop - log.clientHeight < 4;
      },
      { passive: true }
    );

    // Each replica's unfinished line (a progress bar being drawn), one row each, redrawn in
    // place below the lines.
    this._live.className = 'jp-distrun-live';
    this._live.dataset.testId = 'distrun-job-live';
    this._log.append(this._live);
    this._usage = new UsageGauges(this._trans);
    // A failed job's tracebacks, each once with its replicas (the lines below have them all).
    this._tracebacks.className = 'jp-distrun-tracebacks';
    this._tracebacks.dataset.testId = 'distrun-job-tracebacks';
    this._tracebacks.hidden = true;
    this.node.append(
      header,
      this._usage.node,
      this._tracebacks,
      this._notice,
      this._log
    );
  }

  private async _cancel(): Promise<void> {
    this._stop.disabled = true;
    try {
      this._onStatus(await cancelJob(this.jobId));
    } catch (error) {
      this._stop.disabled = false;
      this._showNotice((error as Error).message, true);
    }
  }

  private _onStatus(job: IJob): void {
    this._replicas = job.replicas.map(replica => replica.name);
    this._spec = job.spec;
    this._prefixWidth = Math.max(0, ...this._replicas.map(name => name.length));
    const shown = this._endAfterLines.status(job);
    if (shown) {
      this._showStatus(shown);
    }
  }

  private _showStatus(job: IJob): void {
    this._status.textContent = formatStatus(job, this._trans);
    this._status.dataset.state = job.state;
    this._stop.hidden = isTerminal(job.state);
    if (job.state === 'failed' && job.tracebacks?.length) {
      this._tracebacks.replaceChildren(
        ...renderTracebacks(job.tracebacks, this.jobId, this._trans)
      );
      this._tracebacks.hidden = false;
    }
  }

  private _onEnd(): void {
    this._stop.hidden = true;
    this._ended = true;
    this._end = this._endAfterLines.end(); // shown by the render that shows the last lines
    this._unfinished.clear();
    this._liveChanged = true;
    this._scheduleRender();
  }

  private _onLines(lines: LogTuple[]): void {
    if (this._buffer.push(lines) > 0) {
      this._liveChanged = this._unfinished.finished(lines) || this._liveChanged;
      this._scheduleRender();
    }
  }

  private _onPartial(lines: LogTuple[]): void {
    if (this._unfinished.update(lines, this._buffer.cursor())) {
      this._liveChanged = true;
      this._scheduleRender();
    }
  }

  private _showNotice(message: string, isError = false): void {
    this._notice.textContent = message;
    this._notice.hidden = false;
    this._notice.classList.toggle('jp-mod-error', isError);
  }

  private _scheduleRender(): void {
    if (this._frame !== 0) {
      return;
    }
    // The first change after a quiet spell is shown at once, in the frame it arrived in (a
    // plain cell shows its output so); changes that keep coming are shown once a frame.
    if (performance.now() - this._renderedAt > QUIET_MS) {
      this._render();
    } else {
      this._frame = requestAnimationFrame(() => this._render());
    }
  }

  private _render(): void {
    this._frame = 0;
    this._renderedAt = performance.now();
    if (!this._notice.classList.contains('jp-mod-error')) {
      this._notice.hidden = true;
    }
    const drained = this._buffer.drain();
    // Under a flood, paint only the newest lines of the frame: the rest are counted in a note.
    const lines = drained.lines.slice(-MAX_LINES_PER_FRAME);
    const skipped = drained.skipped + drained.lines.length - lines.length;
    const chunk = document.createElement('div');
    chunk.className = 'jp-distrun-chunk';
    if (skipped > 0) {
      chunk.append(this._skippedNote(skipped));
    }
    for (const line of lines) {
      chunk.append(this._lineNode(line));
    }
    if (chunk.childElementCount > 0) {
      this._trimLog(chunk.childElementCount);
      this._log.insertBefore(chunk, this._live);
      if (!this._painted) {
        this._painted = true;
        requestAnimationFrame(() => traceMark('first-paint', this.jobId));
      }
    }
    if (this._liveChanged) {
      this._liveChanged = false;
      const rows = this._unfinished.lines(this._replicas);
      this._live.replaceChildren(...rows.map(line => this._lineNode(line)));
    }
    if (this._follow) {
      this._log.scrollTop = this._log.scrollHeight;
    }
    if (this._end) {
      this._showStatus(this._end);
      this._end = null;
    }
    this.node.dataset.ended = String(this._ended);
  }

  private _lineNode([replica, , , text]: LogTuple): HTMLElement {
    const line = document.createElement('pre');
    line.className = 'jp-distrun-line';
    line.dataset.replica = replica;
    const prefix = document.createElement('span');
    const colour = replicaColorIndex(replica, this._replicas);
    prefix.className = `jp-distrun-prefix jp-distrun-c${colour}`;
    prefix.textContent = replicaPrefix(replica, this._prefixWidth);
    line.append(prefix);
    if (!appendFrameLine(line, text, this.jobId)) {
      appendAnsi(line, text);
    }
    return line;
  }

  private _skippedNote(count: number): HTMLElement {
    const note = document.createElement('div');
    note.className = 'jp-distrun-skipped';
    note.textContent = this._trans.__(
      '… %1 lines not shown here (the logs REST endpoint has them all)',
      count
    );
    return note;
  }

  /** Makes room for `adding` lines under `maxLines`, dropping the oldest frames' chunks. */
  private _trimLog(adding: number): void {
    this._shown += adding;
    let chunk = this._log.firstElementChild;
    while (
      chunk &&
      chunk !== this._live &&
      this._shown > this._buffer.maxLines
    ) {
      const next = chunk.nextElementSibling;
      this._shown -= chunk.childElementCount;
      chunk.remove();
      chunk = next;
    }
  }

  private readonly _trans: ITrans;
  private readonly _buffer: LogBuffer;
  private readonly _stream: JobStream;
  private readonly _status = document.createElement('span');
  private readonly _stop = document.createElement('button');
  private readonly _notice = document.createElement('div');
  private readonly _log = document.createElement('div');
  private readonly _live = document.createElement('div');
  private readonly _unfinished = new UnfinishedLines();
  private _liveChanged = false;
  private _replicas: string[] = [];
  private _spec: IJobSpec | null = null; // for the gauges' memory limits
  private readonly _tracebacks = document.createElement('div');
  private _usage!: UsageGauges; // each replica's newest CPU and memory, under the status
  private _prefixWidth = 0;
  private _frame = 0;
  private _renderedAt = -Infinity;
  private _painted = false; // traced: the first lines only
  private _ended = false;
  private readonly _endAfterLines = new EndAfterLines();
  private _end: IJob | null = null; // the terminal status, shown with the last lines
  private _follow = true;
  private _shown = 0;
}
