/**
 * A small SVG line chart: one line per series over shared linear axes, coloured through
 * CSS classes (the replica palette), so JupyterLab's theme decides every colour. The axis
 * arithmetic is pure and tested; `renderChart` only builds SVG elements.
 */

export interface IChartSeries {
  /** Shown in the series' tooltip and as `data-series`. */
  label: string;
  /** A CSS class giving the series its `color` (the line uses currentColor). */
  colorClass: string;
  xs: readonly number[];
  ys: readonly number[];
}

export interface IExtent {
  min: number;
  max: number;
}

/** Series with at most this many points also draw a dot per point. */
export const MAX_DOTTED_POINTS = 300;

const MARGIN = { top: 12, right: 16, bottom: 34, left: 60 };
const SVG_NS = 'http://www.w3.org/2000/svg';

/** The smallest and largest value over all the arrays, or null when they are all empty. */
export function extentOf(
  arrays: ReadonlyArray<readonly number[]>
): IExtent | null {
  let min = Infinity;
  let max = -Infinity;
  for (const values of arrays) {
    for (const value of values) {
      if (value < min) {
        min = value;
      }
      if (value > max) {
        max = value;
      }
    }
  }
  return min <= max ? { min, max } : null;
}

/** Widens a zero-width extent so that a constant series sits mid-chart. */
export function padExtent({ min, max }: IExtent): IExtent {
  if (max > min) {
    return { min, max };
  }
  const pad = Math.abs(min) > 0 ? Math.abs(min) * 0.1 : 1;
  return { min: min - pad, max: max + pad };
}

/** A round tick step (1, 2 or 5 times a power of ten) giving at most about `count` ticks. */
export function tickStep(min: number, max: number, count: number): number {
  const raw = (max - min) / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const fraction = raw / power;
  const nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10;
  return nice * power;
}

/** Round tick values inside [min, max]. */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!(max > min) || !Number.isFinite(min) || !Number.isFinite(max)) {
    return Number.isFinite(min) ? [min] : [];
  }
  const step = tickStep(min, max, count);
  const ticks: number[] = [];
  for (let i = Math.ceil(min / step); i * step <= max + step * 1e-9; i++) {
    // Multiplying (not adding) keeps 0.1 + 0.2 style drift out of the labels.
    ticks.push(Number((i * step).toPrecision(12)));
  }
  return ticks;
}

/** A tick label: as many decimals as the step needs, exponent form for extreme values. */
export function formatTick(value: number, step: number): string {
  if (value === 0) {
    return '0';
  }
  const magnitude = Math.abs(value);
  if (magnitude >= 1e6 || magnitude < 1e-4) {
    return value.toExponential(1);
  }
  const decimals = Math.max(0, Math.min(6, -Math.floor(Math.log10(step))));
  return value.toFixed(decimals);
}

/** A linear map from `domain` onto [from, to]. */
export function linearScale(
  domain: IExtent,
  from: number,
  to: number
): (value: number) => number {
  const span = domain.max - domain.min;
  return value =>
    span === 0
      ? (from + to) / 2
      : from + ((value - domain.min) / span) * (to - from);
}

/** The `points` attribute of a polyline through the series, in pixels. */
export function polylinePoints(
  xs: readonly number[],
  ys: readonly number[],
  x: (value: number) => number,
  y: (value: number) => number
): string {
  const parts: string[] = [];
  for (let i = 0; i < xs.length; i++) {
    parts.push(`${x(xs[i]).toFixed(1)},${y(ys[i]).toFixed(1)}`);
  }
  return parts.join(' ');
}

/** A horizontal line at `y` across the chart (a requested limit), labelled at its right end. */
export interface IChartLimit {
  label: string;
  y: number;
}

export interface IChartOptions {
  width: number;
  height: number;
  xLabel: string;
  yLabel: string;
  /** Drawn dashed, within the y axis' range. */
  limits?: readonly IChartLimit[];
}

/** Draws the series into `svg`, replacing whatever it held. */
export function renderChart(
  svg: SVGSVGElement,
  series: readonly IChartSeries[],
  options: IChartOptions
): void {
  const { width, height } = options;
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.replaceChildren();
  const xExtent = extentOf(series.map(s => s.xs));
  const limits = options.limits ?? [];
  const yExtent = extentOf([
    ...series.map(s => s.ys),
    limits.map(limit => limit.y)
  ]);
  if (!xExtent || !yExtent) {
    return;
  }
  const xDomain = padExtent(xExtent);
  const yDomain = padExtent(yExtent);
  const left = MARGIN.left;
  const right = Math.max(left + 1, width - MARGIN.right);
  const top = MARGIN.top;
  const bottom = Math.max(top + 1, height - MARGIN.bottom);
  const x = linearScale(xDomain, left, right);
  const y = linearScale(yDomain, bottom, top);

  const grid = element('g', { class: 'jp-distrun-Chart-grid' });
  const yTicks = niceTicks(
    yDomain.min,
    yDomain.max,
    Math.max(2, Math.floor((bottom - top) / 40))
  );
  const yStep = yTicks.length > 1 ? yTicks[1] - yTicks[0] : 1;
  for (const tick of yTicks) {
    const py = y(tick).toFixed(1);
    grid.append(element('line', { x1: left, x2: right, y1: py, y2: py }));
    grid.append(
      text(formatTick(tick, yStep), {
        x: left - 6,
        y: py,
        'text-anchor': 'end',
        dy: '0.32em'
      })
    );
  }
  const xTicks = niceTicks(
    xDomain.min,
    xDomain.max,
    Math.max(2, Math.floor((right - left) / 80))
  );
  const xStep = xTicks.length > 1 ? xTicks[1] - xTicks[0] : 1;
  for (const tick of xTicks) {
    grid.append(
      text(formatTick(tick, xStep), {
        x: x(tick).toFixed(1),
        y: bottom + 14,
        'text-anchor': 'middle'
      })
    );
  }
  grid.append(
    element('line', {
      class: 'jp-distrun-Chart-axis',
      x1: left,
      x2: right,
      y1: bottom,
      y2: bottom
    })
  );
  grid.append(
    element('line', {
      class: 'jp-distrun-Chart-axis',
      x1: left,
      x2: left,
      y1: top,
      y2: bottom
    })
  );
  grid.append(
    text(options.xLabel, {
      x: (left + right) / 2,
      y: height - 4,
      'text-anchor': 'middle'
    })
  );
  grid.append(
    text(options.yLabel, {
      x: 12,
      y: (top + bottom) / 2,
      'text-anchor': 'middle',
      transform: `rotate(-90 12 ${(top + bottom) / 2})`
    })
  );
  svg.append(grid);
  for (const limit of limits) {
    svg.append(limitLine(limit, y(limit.y), left, right));
  }

  for (const one of series) {
    const group = element('g', {
      class: `jp-distrun-Chart-series ${one.colorClass}`,
      'data-series': one.label
    });
    const title = element('title', {});
    title.textContent = one.label;
    group.append(title);
    group.append(
      element('polyline', {
        class: 'jp-distrun-Chart-line',
        points: polylinePoints(one.xs, one.ys, x, y),
        'data-points': one.xs.length
      })
    );
    if (one.xs.length <= MAX_DOTTED_POINTS) {
      for (let i = 0; i < one.xs.length; i++) {
        group.append(
          element('circle', {
            class: 'jp-distrun-Chart-point',
            cx: x(one.xs[i]).toFixed(1),
            cy: y(one.ys[i]).toFixed(1),
            r: 2.5
          })
        );
      }
    }
    svg.append(group);
  }
}

function element(
  name: string,
  attributes: Record<string, string | number>
): SVGElement {
  const node = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attributes)) {
    node.setAttribute(key, String(value));
  }
  return node;
}

function text(
  content: string,
  attributes: Record<string, string | number>
): SVGElement {
  const node = element('text', attributes);
  node.textContent = content;
  return node;
}

function limitLine(
  limit: IChartLimit,
  py: number,
  left: number,
  right: number
): SVGElement {
  const group = element('g', {
    class: 'jp-distrun-Chart-limit',
    'data-limit': limit.label
  });
  group.append(
    element('line', {
      x1: left,
      x2: right,
      y1: py.toFixed(1),
      y2: py.toFixed(1)
    }),
    text(limit.label, {
      x: right - 4,
      y: (py - 4).toFixed(1),
      'text-anchor': 'end'
    })
  );
  return group;
}
