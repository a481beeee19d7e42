/**
 * Brings a job's TensorBoard scalars into the Metrics tab: asks the server while the tab is
 * shown, every few seconds while the job runs, once more after it ended.
 */

import { getScalars } from '../common/api';
import { MetricStore } from './metrics';

const POLL_MS = 2000;

export class ScalarsPoller {
  constructor(
    private readonly _jobId: string,
    private readonly _store: MetricStore,
    private readonly _changed: () => void,
    private readonly _ended: () => boolean
  ) {}

  /** Starts asking (the tab was shown); a no-op while already asking or finished. */
  start(): void {
    if (this._running || this._finished || this._stopped) {
      return;
    }
    this._running = true;
    void this._poll();
  }

  /** Stops asking (the tab was hidden or the viewer closed). */
  stop(): void {
    this._running = false;
    window.clearTimeout(this._timer);
  }

  dispose(): void {
    this._stopped = true;
    this.stop();
  }

  private async _poll(): Promise<void> {
    const ended = this._ended(); // before asking: the last answer has every scalar
    try {
      const report = await getScalars(this._jobId);
      if (report.available) {
        this._store.setScalars(report.replicas);
        this._changed();
      } else {
        this._finished = true; // the engine never will: no point asking again
      }
    } catch {
      // the job's lines and metrics go on; scalars are asked again next time
    }
    if (ended) {
      this._finished = true;
    }
    if (this._running && !this._finished && !this._stopped) {
      this._timer = window.setTimeout(() => void this._poll(), POLL_MS);
    } else {
      this._running = false;
    }
  }

  private _running = false;
  private _finished = false;
  private _stopped = false;
  private _timer = 0;
}
