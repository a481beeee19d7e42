/**
 * Holds log lines between the websocket and the next animation frame.
 *
 * The websocket can deliver far more lines than a tab can paint, and a hidden tab gets no
 * animation frames at all, so the buffer keeps only the newest `maxLines` pending lines and
 * counts the ones it drops. It also keeps the resume cursor: for each replica the next
 * sequence number wanted, which is what `since` must say on a reconnect.
 */

import { LogTuple } from './model';

export interface IDrained {
  /** The lines to paint, oldest first. */
  lines: LogTuple[];
  /** How many older lines arrived since the last drain but will never be painted. */
  skipped: number;
}

export class LogBuffer {
  constructor(readonly maxLines: number) {
    if (!Number.isInteger(maxLines) || maxLines < 1) {
      throw new RangeError(
        `maxLines must be a positive integer, not ${maxLines}`
      );
    }
  }

  /** Accepts a frame's lines; returns how many were new (repeats of a seen seq are dropped). */
  push(lines: readonly LogTuple[]): number {
    let accepted = 0;
    for (const line of lines) {
      const [replica, seq] = line;
      if (seq < (this._next.get(replica) ?? 0)) {
        continue;
      }
      this._next.set(replica, seq + 1);
      this._pending.push(line);
      accepted++;
    }
    this._trim();
    return accepted;
  }

  /** The number of lines waiting to be painted. */
  get pending(): number {
    return this._pending.length - this._start;
  }

  /** Takes every pending line (at most `maxLines`) and the count of dropped ones. */
  drain(): IDrained {
    const drained = {
      lines: this._pending.slice(this._start),
      skipped: this._skipped
    };
    this._pending = [];
    this._start = 0;
    this._skipped = 0;
    return drained;
  }

  /** The next sequence number wanted per replica. */
  cursor(): Record<string, number> {
    return Object.fromEntries(this._next);
  }

  /** The cursor as the API's `since` parameter: `worker-0:11,master-0:3`. */
  sinceParam(): string {
    return formatSince(this.cursor());
  }

  private _trim(): void {
    const excess = this.pending - this.maxLines;
    if (excess <= 0) {
      return;
    }
    this._start += excess;
    this._skipped += excess;
    // Compact now and then rather than on every push: slicing is O(n).
    if (this._start > this.maxLines) {
      this._pending = this._pending.slice(this._start);
      this._start = 0;
    }
  }

  private _next = new Map<string, number>();
  private _pending: LogTuple[] = [];
  private _start = 0;
  private _skipped = 0;
}

export function formatSince(cursor: Record<string, number>): string {
  return Object.entries(cursor)
    .map(([replica, seq]) => `${replica}:${seq}`)
    .join(',');
}
