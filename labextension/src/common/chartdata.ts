/**
 * What a line chart (linechart.ts, drawn by uPlot) is given, turned into what uPlot takes:
 * the series' points merged onto one ascending x array (uPlot's "aligned data"), the y range
 * that keeps the requested limits in view, the limits' dashed lines, and the legend's values.
 * Pure: no DOM, and uPlot only as types, so that jest tests all of it.
 */

import type uPlot from 'uplot';

export interface IChartSeries {
  /** The legend's name of the series (a replica, a run). */
  label: string;
  /** A CSS class giving the series its `color` (the replica palette of style/base.css). */
  colorClass: string;
  xs: readonly number[];
  ys: readonly number[];
  /** Drawn thicker (a sweep's best trial). */
  highlight?: boolean;
}

/** A horizontal line across the chart at `y` (a requested limit), labelled at its right end. */
export interface IChartLimit {
  label: string;
  y: number;
}

/**
 * The series on one x array, as uPlot draws them: [xs, ys of each series...], x ascending,
 * null where a series has no point at that x (uPlot leaves a gap... or, with spanGaps, joins
 * across it). Series sharing one x array (replicas sampled together) are passed through
 * without copying the x values; a series that repeats an x keeps its last value there.
 */
export function alignSeries(
  series: readonly IChartSeries[]
): uPlot.AlignedData {
  if (!series.length) {
    return [[]];
  }
  const first = series[0].xs;
  if (isAscending(first) && series.every(one => sameValues(one.xs, first))) {
    return [first as number[], ...series.map(one => one.ys as number[])];
  }
  const xs = [...new Set(series.flatMap(one => one.xs))].sort((a, b) => a - b);
  const position = new Map(xs.map((x, i) => [x, i]));
  const columns = series.map(one => {
    const ys: Array<number | null> = new Array(xs.length).fill(null);
    one.xs.forEach((x, i) => {
      ys[position.get(x)!] = one.ys[i];
    });
    return ys;
  });
  return [xs, ...columns];
}

/** How many points each series holds (what the chart's legend rows say in `data-points`). */
export function pointCounts(series: readonly IChartSeries[]): number[] {
  return series.map(one => one.xs.length);
}

/**
 * The y scale's range: the data's, widened to take in every limit, and padded when it is
 * one value so that a constant series sits mid-chart.
 */
export function yRange(
  dataMin: number | null,
  dataMax: number | null,
  limits: readonly IChartLimit[]
): uPlot.Range.MinMax {
  const values = [dataMin, dataMax, ...limits.map(limit => limit.y)].filter(
    (v): v is number => v !== null && Number.isFinite(v)
  );
  if (!values.length) {
    return [0, 1];
  }
  const min = Math.min(...values);
  const max = Math.max(...values);
  if (max > min) {
    const pad = (max - min) * 0.05;
    return [min - pad, max + pad];
  }
  const pad = Math.abs(min) > 0 ? Math.abs(min) * 0.1 : 1;
  return [min - pad, max + pad];
}

/**
 * The legend's text for a series' value: the value under the cursor, or, with the cursor
 * off the chart, the series' latest value (what a live chart is asked most).
 */
export function legendValue(
  column: ArrayLike<number | null | undefined>,
  value: number | null | undefined,
  cursorIndex: number | null | undefined
): string {
  let shown = value;
  if (cursorIndex === null || cursorIndex === undefined) {
    shown = latest(column);
  }
  return shown === null || shown === undefined ? '–' : formatValue(shown);
}

/** A number as the legend shows it: four significant digits, exponent form at the extremes. */
export function formatValue(value: number): string {
  const magnitude = Math.abs(value);
  if (value !== 0 && (magnitude >= 1e6 || magnitude < 1e-3)) {
    return value.toExponential(3);
  }
  return String(Number(value.toPrecision(4)));
}

/** The last non-null value of a column, or null when it has none. */
export function latest(
  column: ArrayLike<number | null | undefined>
): number | null {
  for (let i = column.length - 1; i >= 0; i--) {
    const value = column[i];
    if (value !== null && value !== undefined) {
      return value;
    }
  }
  return null;
}

/** What the limit lines are drawn with: the theme's error colour and its UI font. */
export interface ILimitStyle {
  color: string;
  font: string;
  /** The canvas' pixels per CSS pixel (uPlot draws at device resolution). */
  pixelRatio: number;
}

/** The part of uPlot a draw hook uses to draw the limits (a fake one in the tests). */
export interface ILimitCanvas {
  ctx: Pick<
    CanvasRenderingContext2D,
    | 'save'
    | 'restore'
    | 'beginPath'
    | 'moveTo'
    | 'lineTo'
    | 'stroke'
    | 'fillText'
    | 'setLineDash'
  > & {
    strokeStyle: unknown;
    fillStyle: unknown;
    lineWidth: number;
    font: string;
    textAlign: CanvasTextAlign;
  };
  bbox: { left: number; top: number; width: number; height: number };
  valToPos(value: number, scale: string, canvasPixels?: boolean): number;
}

/** Draws each limit as a dashed line across the plot, its label above its right end. */
export function drawLimits(
  u: ILimitCanvas,
  limits: readonly IChartLimit[],
  style: ILimitStyle
): void {
  if (!limits.length) {
    return;
  }
  const { ctx, bbox } = u;
  const ratio = style.pixelRatio;
  ctx.save();
  ctx.strokeStyle = style.color;
  ctx.fillStyle = style.color;
  ctx.lineWidth = ratio;
  ctx.font = style.font;
  ctx.textAlign = 'right';
  ctx.setLineDash([6 * ratio, 4 * ratio]);
  for (const limit of limits) {
    const y = Math.round(u.valToPos(limit.y, 'y', true));
    ctx.beginPath();
    ctx.moveTo(bbox.left, y);
    ctx.lineTo(bbox.left + bbox.width, y);
    ctx.stroke();
    ctx.fillText(
      limit.label,
      bbox.left + bbox.width - 4 * ratio,
      y - 4 * ratio
    );
  }
  ctx.restore();
}

function isAscending(xs: readonly number[]): boolean {
  for (let i = 1; i < xs.length; i++) {
    if (!(xs[i] > xs[i - 1])) {
      return false;
    }
  }
  return true;
}

function sameValues(a: readonly number[], b: readonly number[]): boolean {
  if (a === b) {
    return true;
  }
  if (a.length !== b.length) {
    return false;
  }
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) {
      return false;
    }
  }
  return true;
}
