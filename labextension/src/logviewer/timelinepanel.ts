/**
 * The log viewer's Timeline tab: the job's life as its engine recorded it (submitted, each
 * attempt's start, each failure with its replica and exit, each restart, each resume from a
 * checkpoint's step, the end). A bar of the attempts, one segment each, as wide as it ran,
 * then a row an event, to the millisecond.
 */

import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { IJob, isTerminal, ITimelineEvent } from '../common/model';
import {
  attemptSpans,
  formatClock,
  formatSeconds,
  IAttemptSpan
} from '../common/timeline';

export class TimelinePanel extends Widget {
  constructor(private readonly _trans: TranslationBundle) {
    super();
    this.addClass('jp-distrun-Timeline');
    this.node.dataset.testId = 'distrun-viewer-timeline';
    this._bar.className = 'jp-distrun-Timeline-bar';
    this._bar.setAttribute('role', 'img');
    this._table.className = 'jp-distrun-Timeline-events';
    this._empty.className = 'jp-distrun-Timeline-empty';
    this.node.append(this._empty, this._bar, this._table);
    this.setJob(null);
  }

  /** Shows the job's timeline; redraws only when it changed (or a running attempt grew). */
  setJob(job: IJob | null, now = Date.now() / 1000): void {
    const events = job?.timeline ?? [];
    const key = `${events.length}:${job?.state ?? ''}`;
    const running = job !== null && !isTerminal(job.state);
    if (key === this._drawn && !running) {
      return;
    }
    this._drawn = key;
    this._empty.textContent =
      events.length === 0
        ? this._trans.__(
            'No timeline: the engine of this job records none (the local engine does; docs/fault-tolerance.md).'
          )
        : '';
    this._empty.hidden = events.length > 0;
    this._drawBar(attemptSpans(events), job?.state ?? '', now);
    if (this._table.rows.length !== events.length) {
      this._table.replaceChildren(
        ...events.map(event => this._row(event, events[0].time))
      );
    }
  }

  private _drawBar(spans: IAttemptSpan[], state: string, now: number): void {
    this._bar.hidden = spans.length === 0;
    if (spans.length === 0) {
      return;
    }
    const first = spans[0].start;
    const total = Math.max(
      ...spans.map(s => (s.end ?? now) - first),
      Number.EPSILON
    );
    this._bar.setAttribute(
      'aria-label',
      this._trans._n('%1 attempt', '%1 attempts', spans.length)
    );
    this._bar.replaceChildren(
      ...spans.map(span => {
        const segment = document.createElement('span');
        const ran = (span.end ?? now) - span.start;
        segment.className = 'jp-distrun-Timeline-attempt';
        // The last attempt ends as the job did: succeeded, failed or cancelled.
        segment.dataset.outcome =
          span.outcome === 'ended' ? state : span.outcome;
        segment.dataset.attempt = String(span.attempt);
        segment.style.flexGrow = String(Math.max(ran / total, 0.02));
        segment.textContent = String(span.attempt);
        segment.title = this._trans.__(
          'attempt %1: %2 (%3)',
          span.attempt,
          span.reason || this._trans.__('running'),
          formatSeconds(ran, this._trans)
        );
        return segment;
      })
    );
  }

  private _row(event: ITimelineEvent, origin: number): HTMLTableRowElement {
    const row = document.createElement('tr');
    row.dataset.kind = event.kind;
    row.dataset.testId = 'distrun-viewer-timeline-event';
    const cells = [
      formatClock(event.time),
      `+${formatSeconds(event.time - origin, this._trans)}`,
      this._trans.__('attempt %1', event.attempt),
      event.text
    ];
    for (const text of cells) {
      const cell = row.insertCell();
      cell.textContent = text;
    }
    return row;
  }

  private readonly _bar = document.createElement('div');
  private readonly _table = document.createElement('table');
  private readonly _empty = document.createElement('p');
  private _drawn = '';
}
