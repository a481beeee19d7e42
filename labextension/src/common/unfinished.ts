/**
 * Each replica's unfinished line (a progress bar being drawn), as the server last showed it.
 *
 * The server sends an unfinished line with the seq the line will have once finished: it is
 * shown after the replica's last line until a line of that seq (or a later one) arrives, and an
 * empty text takes it back. An unfinished line for a seq already received is stale (it crossed
 * its finished line on the way) and ignored. Unfinished lines never move the resume cursor.
 */

import { LogTuple } from './model';

export class UnfinishedLines {
  /** Takes in a `partial` message; `next` is each replica's next seq wanted. Whether anything
   * shown changed. */
  update(lines: readonly LogTuple[], next: Record<string, number>): boolean {
    let changed = false;
    for (const line of lines) {
      const [replica, seq, , text] = line;
      if (seq < (next[replica] ?? 0)) {
        continue;
      }
      if (text) {
        this._lines.set(replica, line);
      } else {
        this._lines.delete(replica);
      }
      changed = true;
    }
    return changed;
  }

  /** Forgets the unfinished lines that `lines` finish; whether any was forgotten. */
  finished(lines: readonly LogTuple[]): boolean {
    let changed = false;
    for (const [replica, seq] of lines) {
      const unfinished = this._lines.get(replica);
      if (unfinished && unfinished[1] <= seq) {
        this._lines.delete(replica);
        changed = true;
      }
    }
    return changed;
  }

  clear(): boolean {
    const had = this._lines.size > 0;
    this._lines.clear();
    return had;
  }

  /** The unfinished lines, in the order of `replicas` (others last). */
  lines(replicas: readonly string[]): LogTuple[] {
    const rank = (name: string): number => {
      const index = replicas.indexOf(name);
      return index < 0 ? replicas.length : index;
    };
    return [...this._lines.values()].sort((a, b) => rank(a[0]) - rank(b[0]));
  }

  get size(): number {
    return this._lines.size;
  }

  private readonly _lines = new Map<string, LogTuple>();
}
