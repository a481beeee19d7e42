/**
 * The status a view of a job shows, so that the end never shows before the last line: a
 * terminal status is held until the stream's `end` (which comes after every line, from any
 * server, this one's earlier versions included), and the view shows it once the lines that came
 * before it are shown.
 */

import { IJob, isTerminal } from './model';

export class EndAfterLines {
  /** The status to show now; null when it is the end, held until `end()`. */
  status(job: IJob): IJob | null {
    if (isTerminal(job.state) && !this._ended) {
      this._held = job;
      return null;
    }
    return job;
  }

  /** The stream ended: the held end, to show once the lines before it are shown (or null). */
  end(): IJob | null {
    this._ended = true;
    const held = this._held;
    this._held = null;
    return held;
  }

  /** Whether the stream has ended. */
  get ended(): boolean {
    return this._ended;
  }

  private _held: IJob | null = null;
  private _ended = false;
}
