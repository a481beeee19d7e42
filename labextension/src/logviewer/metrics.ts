/**
 * Numbers that training code prints, picked out of log lines: `loss=0.31`, `loss: 0.31`,
 * `'loss': 0.31`, `step 120`, `Epoch [3/10]`, Keras' `- loss: 0.2950 - accuracy: 0.9148`,
 * Lightning's `[..., loss=0.123, v_num=0]`, tqdm's postfix `[00:01<00:09, loss=0.3]`, read from
 * the text as shown (colours and carriage returns applied). Pure functions, no DOM.
 * server_ext/distrun/core/metrics.py is its Python twin (a sweep's objective): both pass the
 * cases of __tests__/metric_lines.json, so change them together.
 *
 * The rules, so that timestamps, addresses, paths and versions are not metrics:
 * - A metric is a key and a number. The key is an identifier (letters, digits, `_`, and `/`
 *   or `.` between identifier parts: `train/loss`), not preceded by a letter, digit, `_`, `.`,
 *   `/` or `-`, and optionally quoted (`'loss': 0.3`, `"loss": 0.3`).
 * - Between key and number: `=`, or `:` followed by at least one space (so `12:34:56`,
 *   `file.py:12` and `host:8080` are not metrics), or, for the progress and metric words of
 *   SPACED_KEYS only, spaces (`step 120`, `loss 0.31`, `| lr 0.0005 |`).
 * - The number is a decimal or scientific literal, optionally in `[...]`, `tensor(...)`, or
 *   followed by `%`. It must end there: the next character is the end, a space, `%`, one of
 *   `])},;|'"`, or a `.`, `:` or `-` that is followed by a space (or ends the line). So a
 *   number followed by `.0`, `:34`, `.ckpt`, `-01` or `ms` is part of something else (an IP
 *   address, a version, a time, a file name, a date, a duration) and the key is skipped.
 * - Keys are compared in lower case. Env-style ALL-CAPS keys (`MASTER_PORT=29500`) and the
 *   identity keys of IGNORED_KEYS (`rank`, `world_size`, `pid`, ...) are not metrics.
 * - `step`, `global_step`, `iter`, `iteration` (and `Step [100/600]`) give the line's step,
 *   the chart's x axis, rather than a metric.
 */

import { plainText } from '../common/ansi';
import { IScalarsReport } from '../common/model';

export interface IParsedLine {
  /** The training step the line reports, when it names one. */
  step: number | null;
  /** Every metric on the line, in order, names in lower case. */
  metrics: Array<[name: string, value: number]>;
}

/** Keys whose value is the step (the chart's x). */
export const STEP_KEYS: ReadonlySet<string> = new Set([
  'step',
  'global_step',
  'iter',
  'iteration'
]);

/** Keys whose `N/M` value means "N of M" (N is kept). */
const PROGRESS_KEYS: ReadonlySet<string> = new Set([...STEP_KEYS, 'epoch']);

/** Numbers that identify rather than measure. */
export const IGNORED_KEYS: ReadonlySet<string> = new Set([
  'rank',
  'local_rank',
  'global_rank',
  'node_rank',
  'world_size',
  'local_world_size',
  'pid',
  'port',
  'seed',
  'v_num',
  'version',
  'line'
]);

/** Keys that may be followed by their value with only spaces between (`step 120`). */
const SPACED_KEY =
  /^(?:step|global_step|iter|iteration|epoch|loss|[a-z0-9_]*_loss|lr|learning_rate|acc|accuracy|[a-z0-9_]*_acc(?:uracy)?|ppl|perplexity|grad_norm)$/;

const KEY = String.raw`[A-Za-z_][A-Za-z0-9_]*(?:[/.][A-Za-z_][A-Za-z0-9_]*)*`;
const NUMBER = String.raw`[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?`;
/**
 * key, optional closing quote, separator, optional wrapper, number, optional `/total`.
 * Groups: 1 key, 2 separator, 3 number, 4 total.
 */
const METRIC = new RegExp(
  String.raw`(?<![A-Za-z0-9_./-])['"]?(${KEY})['"]?` +
    String.raw`(\s*=\s*|:\s+|\s+)` +
    String.raw`(?:tensor\(|\[)?` +
    String.raw`(${NUMBER})(?:\s*/\s*(\d+))?`,
  'g'
);
/** What may follow a number for it to be a whole number (a `.` or `:` only before a space). */
const CLEAN_END = /^(?:$|%|[\])},;|'"\s]|[.:-](?!\S))/;

export function parseMetrics(text: string): IParsedLine {
  const result: IParsedLine = { step: null, metrics: [] };
  if (text.length > MAX_PARSED_CHARS) {
    text = text.slice(0, MAX_PARSED_CHARS);
  }
  METRIC.lastIndex = 0;
  let match: RegExpExecArray | null;
  while ((match = METRIC.exec(text)) !== null) {
    const [whole, rawKey, separator, number, total] = match;
    const after = text.slice(match.index + whole.length);
    // The next key may begin inside this match's separator (`accuracy: epoch 3`): resume
    // just after the key so it gets its own chance.
    if (!accept(rawKey, separator, total, after)) {
      METRIC.lastIndex = match.index + match[0].indexOf(rawKey) + rawKey.length;
      continue;
    }
    const key = rawKey.toLowerCase();
    const value = Number(number);
    if (!Number.isFinite(value)) {
      continue;
    }
    if (STEP_KEYS.has(key)) {
      result.step ??= value;
    } else {
      result.metrics.push([key, value]);
    }
  }
  return result;
}

/** Lines longer than this are parsed on their first part only. */
export const MAX_PARSED_CHARS = 4096;

function accept(
  rawKey: string,
  separator: string,
  total: string | undefined,
  after: string
): boolean {
  const key = rawKey.toLowerCase();
  if (IGNORED_KEYS.has(key)) {
    return false;
  }
  if (isAllCaps(rawKey) && !SPACED_KEY.test(key)) {
    return false;
  }
  const spaced = !separator.includes('=') && !separator.includes(':');
  if (spaced && !SPACED_KEY.test(key)) {
    return false;
  }
  if (total !== undefined && !PROGRESS_KEYS.has(key)) {
    return false; // `Accuracy: 9890/10000` is a count, not a rate
  }
  return CLEAN_END.test(after);
}

function isAllCaps(key: string): boolean {
  return key.length > 1 && /^[A-Z][A-Z0-9_]*$/.test(key);
}

/** Where a metric's point goes on the x axis: the step when one was seen, else the line. */
export type XKind = 'step' | 'line';

/** What a TensorBoard tag is called among the metrics read from lines. */
export const TENSORBOARD_SUFFIX = ' (TensorBoard)';

/** One metric of one replica over time. Points are thinned to at most `maxPoints`. */
export class MetricSeries {
  constructor(
    readonly metric: string,
    readonly replica: string,
    readonly xKind: XKind,
    readonly maxPoints: number = DEFAULT_MAX_POINTS
  ) {}

  readonly xs: number[] = [];
  readonly ys: number[] = [];

  /** Keeps every `stride`-th point: doubled each time the series fills up. */
  get stride(): number {
    return this._stride;
  }

  add(x: number, y: number): void {
    this._seen++;
    if ((this._seen - 1) % this._stride !== 0) {
      return;
    }
    this.xs.push(x);
    this.ys.push(y);
    if (this.xs.length >= this.maxPoints) {
      this._thin();
    }
  }

  private _thin(): void {
    let kept = 0;
    for (let i = 0; i < this.xs.length; i += 2) {
      this.xs[kept] = this.xs[i];
      this.ys[kept] = this.ys[i];
      kept++;
    }
    this.xs.length = kept;
    this.ys.length = kept;
    this._stride *= 2;
  }

  private _stride = 1;
  private _seen = 0;
}

export const DEFAULT_MAX_POINTS = 4000;

// A progress count `n/N` standing alone (tqdm's ` 30/100 [`, Keras' `3/10 ━━`).
const PROGRESS = /(?:^|[\s|])(\d+)\/(\d+)(?=[\s[]|$)/;

/** How far into its line a progress count puts a line's state: n/N, or 0 without one. */
export function progressFraction(text: string): number {
  const match = PROGRESS.exec(text);
  if (!match) {
    return 0;
  }
  const [done, total] = [Number(match[1]), Number(match[2])];
  return total > 0 && done <= total ? done / total : 0;
}

/**
 * Every metric of a job, per replica, fed line by line as lines arrive.
 *
 * x is the step: the one on the line, else the last one that replica printed. A series
 * that began before its replica printed any step uses the line's sequence number instead,
 * for its whole life, so one series never mixes two axes.
 */
export class MetricStore {
  constructor(readonly maxPoints: number = DEFAULT_MAX_POINTS) {}

  /** Parses one line of `replica` (its per-replica sequence number is `seq`). */
  addLine(replica: string, seq: number, text: string): void {
    this._add(replica, seq, plainText(text), true);
  }

  /**
   * Parses a state of a line still being written (a progress bar's postfix, Keras' running
   * `- loss: 0.31`), so the chart moves during an epoch, not only at its end. Its points stay:
   * they are the curve within the epoch. A step it names is not remembered (the line is not
   * over); on the line axis, its progress `n/N` places it within its line.
   */
  addPartial(replica: string, seq: number, text: string): void {
    this._add(replica, seq, plainText(text), false);
  }

  private _add(
    replica: string,
    seq: number,
    text: string,
    finished: boolean
  ): void {
    const { step, metrics } = parseMetrics(text);
    if (step !== null && finished) {
      this._lastStep.set(replica, step);
    }
    const currentStep = step ?? this._lastStep.get(replica);
    const lineX = seq + progressFraction(text);
    for (const [metric, value] of metrics) {
      const series = this._series(metric, replica, currentStep !== undefined);
      series.add(
        series.xKind === 'step' ? (currentStep ?? lineX) : lineX,
        value
      );
    }
  }

  /**
   * Takes a job's TensorBoard scalars (the whole series each time, as the server reads them):
   * each tag becomes the metric `<tag> (TensorBoard)`, on the step axis.
   */
  setScalars(replicas: IScalarsReport['replicas']): void {
    for (const [replica, tags] of Object.entries(replicas)) {
      for (const [tag, points] of Object.entries(tags)) {
        const metric = `${tag}${TENSORBOARD_SUFFIX}`;
        const series = new MetricSeries(
          metric,
          replica,
          'step',
          this.maxPoints
        );
        for (const [step, value] of points) {
          series.add(step, value);
        }
        this._byReplica(metric).set(replica, series);
      }
    }
    this._version++;
  }

  /** Metric names in the order they were first seen. */
  metrics(): string[] {
    return [...this._byMetric.keys()];
  }

  /** The series of `metric`, one per replica that printed it. */
  series(metric: string): MetricSeries[] {
    return [...(this._byMetric.get(metric)?.values() ?? [])];
  }

  /** Bumped on every change, so a chart redraws only when something is new. */
  get version(): number {
    return this._version;
  }

  /** Counts a batch of lines as one change. */
  touch(): void {
    this._version++;
  }

  private _series(
    metric: string,
    replica: string,
    hasStep: boolean
  ): MetricSeries {
    const byReplica = this._byReplica(metric);
    let series = byReplica.get(replica);
    if (!series) {
      series = new MetricSeries(
        metric,
        replica,
        hasStep ? 'step' : 'line',
        this.maxPoints
      );
      byReplica.set(replica, series);
    }
    return series;
  }

  private _byReplica(metric: string): Map<string, MetricSeries> {
    let byReplica = this._byMetric.get(metric);
    if (!byReplica) {
      byReplica = new Map();
      this._byMetric.set(metric, byReplica);
    }
    return byReplica;
  }

  private readonly _byMetric = new Map<string, Map<string, MetricSeries>>();
  private readonly _lastStep = new Map<string, number>();
  private _version = 0;
}
