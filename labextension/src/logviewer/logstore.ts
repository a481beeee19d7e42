/**
 * A job's log lines in compact form, and the filtered, searchable view the log viewer shows.
 *
 * The store is two parallel arrays in arrival order, the merged index of every replica's
 * lines: the line texts, and a Uint16Array of replica numbers (2 bytes a line). A million
 * lines cost the strings themselves plus 2 MB. Lines are addressed by absolute number (the
 * n-th line ever stored), which stays valid when the oldest lines are dropped to keep the
 * store under its capacity.
 *
 * The view keeps the absolute numbers of the lines it shows (every line while no replica is
 * hidden, which costs nothing), the lines matching the search, and each replica's first error,
 * all updated incrementally as lines arrive.
 */

import { plainText } from '../common/ansi';
import { LogTuple } from '../common/model';

export const DEFAULT_CAPACITY = 2_000_000;

/**
 * The first error of a replica: a line containing `Traceback`, a word ending in `Error` or
 * `Exception` that starts with a capital (`Error`, `ValueError`, `NCCLException`), or the
 * word `FAILED`. Case-sensitive on purpose: `error_rate=0.1`, `0 errors` and `failed=0` are
 * not errors, while Python tracebacks, exception names and pytest/MPI `FAILED` are.
 */
export const ERROR_PATTERN =
  /Traceback|\b(?:[A-Z][A-Za-z0-9_]*)?(?:Error|Exception)\b|\bFAILED\b/;

export class LogStore {
  constructor(readonly capacity: number = DEFAULT_CAPACITY) {
    if (!Number.isInteger(capacity) || capacity < 4) {
      throw new RangeError(`capacity must be an integer >= 4, not ${capacity}`);
    }
  }

  /** Replica names, numbered in order of their first line. */
  get replicas(): readonly string[] {
    return this._replicas;
  }

  /** Absolute number of the oldest line still held (= lines dropped so far). */
  get first(): number {
    return this._dropped;
  }

  /** Absolute number one past the newest line. */
  get end(): number {
    return this._dropped + this._texts.length;
  }

  get size(): number {
    return this._texts.length;
  }

  /** The replica number of a replica name, if it has any line. */
  findReplica(name: string): number | undefined {
    return this._ids.get(name);
  }

  /** The replica number of a replica name, registering it when new. */
  replicaId(name: string): number {
    let id = this._ids.get(name);
    if (id === undefined) {
      id = this._replicas.length;
      this._replicas.push(name);
      this._ids.set(name, id);
    }
    return id;
  }

  /**
   * Appends lines (already de-duplicated). Returns how many of the oldest lines were dropped
   * to stay within capacity (a quarter of it at a time, so dropping stays rare).
   */
  append(lines: readonly LogTuple[]): number {
    this._reserve(this._texts.length + lines.length);
    for (const [replica, , , text] of lines) {
      this._replicaIds[this._texts.length] = this.replicaId(replica);
      this._texts.push(text);
    }
    if (this._texts.length <= this.capacity) {
      return 0;
    }
    const drop = this._texts.length - Math.floor((this.capacity * 3) / 4);
    this._texts.splice(0, drop);
    this._replicaIds.copyWithin(0, drop, drop + this._texts.length);
    this._dropped += drop;
    return drop;
  }

  /**
   * Records that `count` lines after the held ones never reached the store (the pending
   * buffer overflowed). The held lines are dropped too: numbers must stay gap-free.
   */
  skip(count: number): void {
    this._dropped += this._texts.length + count;
    this._texts = [];
  }

  text(line: number): string {
    return this._texts[line - this._dropped];
  }

  replicaOf(line: number): number {
    return this._replicaIds[line - this._dropped];
  }

  private _reserve(length: number): void {
    if (length <= this._replicaIds.length) {
      return;
    }
    let size = this._replicaIds.length;
    while (size < length) {
      size *= 2;
    }
    const grown = new Uint16Array(size);
    grown.set(this._replicaIds.subarray(0, this._texts.length));
    this._replicaIds = grown;
  }

  private _texts: string[] = [];
  private _replicaIds = new Uint16Array(1024);
  private _dropped = 0;
  private readonly _replicas: string[] = [];
  private readonly _ids = new Map<string, number>();
}

/** A growable sorted list of absolute line numbers. */
class LineList {
  get length(): number {
    return this._length - this._start;
  }

  at(index: number): number {
    return this._items[this._start + index];
  }

  push(line: number): void {
    if (this._length === this._items.length) {
      const grown = new Float64Array(Math.max(1024, this.length * 2));
      grown.set(this._items.subarray(this._start, this._length));
      this._length -= this._start;
      this._start = 0;
      this._items = grown;
    }
    this._items[this._length++] = line;
  }

  /** Forgets every line below `first`. */
  dropBelow(first: number): void {
    this._start += lowerBound(this, first);
  }

  clear(): void {
    this._start = 0;
    this._length = 0;
  }

  private _items = new Float64Array(1024);
  private _start = 0;
  private _length = 0;
}

/** The first index of `list` whose value is >= `value` (list sorted ascending). */
function lowerBound(
  list: { length: number; at(index: number): number },
  value: number
): number {
  let low = 0;
  let high = list.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (list.at(mid) < value) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

/**
 * What the viewer shows of a store: the lines of the replicas not hidden, as rows 0..rows-1,
 * the rows matching the search (the text as shown, without colour codes and with carriage
 * returns applied; case-insensitive), and the first error.
 */
export class LogView {
  constructor(readonly store: LogStore) {}

  /** The number of rows shown. */
  get rows(): number {
    return this._filtered ? this._lines.length : this.store.size;
  }

  /** The absolute line number of row `row`. */
  lineAt(row: number): number {
    return this._filtered ? this._lines.at(row) : this.store.first + row;
  }

  /** The row of absolute line `line`, or of the first shown line after it. */
  rowOf(line: number): number {
    return this._filtered
      ? lowerBound(this._lines, line)
      : Math.max(0, line - this.store.first);
  }

  isHidden(replica: string): boolean {
    return this._hidden.has(replica);
  }

  /** Shows or hides one replica's lines; rebuilds the rows, matches and errors. */
  setHidden(replica: string, hidden: boolean): void {
    if (hidden === this._hidden.has(replica)) {
      return;
    }
    if (hidden) {
      this._hidden.add(replica);
    } else {
      this._hidden.delete(replica);
    }
    this._rebuild();
  }

  get query(): string {
    return this._query;
  }

  /** Searches for `query` (empty: no search); rebuilds the matches. */
  setQuery(query: string): void {
    if (query === this._query) {
      return;
    }
    this._query = query;
    this._needle = query.toLowerCase();
    this._rebuild();
  }

  /** The number of shown rows matching the search. */
  get matchCount(): number {
    return this._matches.length;
  }

  /** The row of match `index` (0-based, in row order). */
  matchRow(index: number): number {
    return this.rowOf(this._matches.at(index));
  }

  /** The index of the first match at or after `row`, wrapping to 0; -1 without matches. */
  nextMatch(row: number): number {
    if (this._matches.length === 0) {
      return -1;
    }
    if (row >= this.rows) {
      return 0;
    }
    const index = lowerBound(this._matches, this.lineAt(row));
    return index < this._matches.length ? index : 0;
  }

  /** The index of the last match before `row`, wrapping to the last; -1 without matches. */
  previousMatch(row: number): number {
    if (this._matches.length === 0) {
      return -1;
    }
    if (row >= this.rows) {
      return this._matches.length - 1;
    }
    const index = lowerBound(this._matches, this.lineAt(row)) - 1;
    return index >= 0 ? index : this._matches.length - 1;
  }

  /** Where the search matches in `text`: [start, end) pairs, case-insensitive. */
  highlights(text: string): Array<[number, number]> {
    const spans: Array<[number, number]> = [];
    if (!this._needle) {
      return spans;
    }
    const haystack = text.toLowerCase();
    let from = 0;
    for (;;) {
      const at = haystack.indexOf(this._needle, from);
      if (at < 0) {
        return spans;
      }
      spans.push([at, at + this._needle.length]);
      from = at + this._needle.length;
    }
  }

  /** The row of the first error among the shown replicas, or -1. */
  firstErrorRow(): number {
    let first = Infinity;
    for (const [replica, line] of this._firstErrors) {
      if (!this._hidden.has(replica) && line < first) {
        first = line;
      }
    }
    return first === Infinity ? -1 : this.rowOf(first);
  }

  /** Takes in the lines appended to the store from absolute line `from` on. */
  update(from: number, dropped: number): void {
    if (dropped > 0) {
      this._lines.dropBelow(this.store.first);
      this._matches.dropBelow(this.store.first);
      this._rescanErrors();
    }
    const start = Math.max(from, this.store.first);
    this._scan(start, this.store.end);
    this._scanErrors(start, this.store.end);
  }

  private get _filtered(): boolean {
    return this._hidden.size > 0;
  }

  private _rebuild(): void {
    this._lines.clear();
    this._matches.clear();
    this._scan(this.store.first, this.store.end);
  }

  private _rescanErrors(): void {
    const stale = [...this._firstErrors].filter(
      ([, line]) => line < this.store.first
    );
    if (stale.length === 0) {
      return;
    }
    this._firstErrors.clear();
    this._scanErrors(this.store.first, this.store.end);
  }

  private _scan(from: number, to: number): void {
    const { store } = this;
    const hiddenIds = new Set(
      [...this._hidden].map(name => store.findReplica(name))
    );
    for (let line = from; line < to; line++) {
      if (hiddenIds.has(store.replicaOf(line))) {
        continue;
      }
      if (this._filtered) {
        this._lines.push(line);
      }
      if (
        this._needle &&
        plainText(store.text(line)).toLowerCase().includes(this._needle)
      ) {
        this._matches.push(line);
      }
    }
  }

  /** Errors are tracked for every replica (hidden ones too), so a filter change is cheap. */
  private _scanErrors(from: number, to: number): void {
    const { store } = this;
    const known = this._firstErrors;
    if (known.size === store.replicas.length && known.size > 0) {
      return;
    }
    for (let line = from; line < to; line++) {
      const replica = store.replicas[store.replicaOf(line)];
      if (
        !known.has(replica) &&
        ERROR_PATTERN.test(plainText(store.text(line)))
      ) {
        known.set(replica, line);
      }
    }
  }

  private readonly _hidden = new Set<string>();
  private readonly _lines = new LineList();
  private readonly _matches = new LineList();
  private readonly _firstErrors = new Map<string, number>();
  private _query = '';
  private _needle = '';
}
