/**
 * A live line chart drawn by uPlot (canvas): one line per series, drag across it to zoom in
 * on x, double-click to zoom out, the legend under it giving each series' value under the
 * cursor (its latest value with the cursor away). Created once and fed with `update`: new
 * points go in through uPlot's `setData` (keeping a zoom the person chose); only a change of
 * the series shown (other replicas, another measure) builds a new uPlot. Colours come from
 * JupyterLab's CSS variables at each draw, so a theme change applies at once.
 *
 * benchmarks/browser/bench_charts.mjs measures it against the hand-drawn SVG chart it
 * replaced (docs/performance.md).
 */

import uPlot from 'uplot';

import {
  alignSeries,
  drawLimits,
  IChartLimit,
  IChartSeries,
  legendValue,
  pointCounts,
  yRange
} from './chartdata';

/** What is drawn besides the points: axes' labels, the limits, whether x is a time. */
export interface IChartSpec {
  xLabel: string;
  yLabel: string;
  /** x values are Unix times in seconds (a time axis); otherwise plain numbers. */
  xTime?: boolean;
  limits?: readonly IChartLimit[];
}

export interface ISize {
  width: number;
  height: number;
}

export class LineChart {
  /**
   * @param node where the chart goes (it gets `data-series`, `data-limits`, `data-x-min`,
   *   `data-x-max` and `data-zoomed`).
   * @param _size the chart's size, legend included, read when `_fitTo` resizes.
   */
  constructor(
    readonly node: HTMLElement,
    private readonly _fitTo: HTMLElement,
    private readonly _size: () => ISize
  ) {
    this._resizes = new ResizeObserver(() => this._fit());
    this._resizes.observe(_fitTo);
    this._themes = new MutationObserver(() => this._plot?.redraw(false));
    this._themes.observe(document.body, {
      attributes: true,
      attributeFilter: ['data-jp-theme-name', 'data-jp-theme-light']
    });
  }

  /** Shows `series`: new points in place, or a new chart when the series shown changed. */
  update(series: readonly IChartSeries[], spec: IChartSpec): void {
    this._limits = spec.limits ?? [];
    this.node.dataset.series = String(series.length);
    // The limits are drawn on the canvas: their labels here say which (tests read them).
    this.node.dataset.limits = this._limits.map(limit => limit.label).join('|');
    const shape = JSON.stringify([
      spec.xLabel,
      spec.yLabel,
      !!spec.xTime,
      series.map(one => [one.label, one.colorClass, !!one.highlight])
    ]);
    const data = alignSeries(series);
    if (!series.length) {
      this._destroy();
    } else if (this._plot && shape === this._shape) {
      this._plot.setData(data, !this._zoomed);
    } else {
      this._destroy();
      this._plot = new uPlot(this._options(series, spec), data, this.node);
      this._fit();
    }
    this._shape = shape;
    this._markLegend(series);
  }

  /** The uPlot drawing now (null while there is nothing to draw); for tests and the bench. */
  get plot(): uPlot | null {
    return this._plot;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._resizes.disconnect();
    this._themes.disconnect();
    this._destroy();
  }

  private _options(
    series: readonly IChartSeries[],
    spec: IChartSpec
  ): uPlot.Options {
    // uPlot scales a font's px size to the canvas' resolution: it must be in px.
    const family =
      getComputedStyle(this.node)
        .getPropertyValue('--jp-ui-font-family')
        .trim() || 'sans-serif';
    const font = `11px ${family}`;
    const color = (name: string) => () => this._cssVar(name);
    const axis = (label: string): uPlot.Axis => ({
      label,
      font,
      labelFont: font,
      stroke: color('--jp-ui-font-color2'),
      grid: { stroke: color('--jp-border-color2'), width: 1 },
      ticks: { stroke: color('--jp-border-color1'), width: 1 }
    });
    const value = (
      u: uPlot,
      v: number | null,
      sidx: number,
      idx: number | null
    ) => legendValue(u.data[sidx], v, idx);
    return {
      ...this._plotSize(),
      scales: {
        x: { time: !!spec.xTime },
        y: { range: (_u, min, max) => yRange(min, max, this._limits) }
      },
      axes: [axis(spec.xLabel), axis(spec.yLabel)],
      series: [
        { label: spec.xLabel },
        ...series.map((one): uPlot.Series => ({
          label: one.label,
          stroke: () => this._classColor(one.colorClass),
          width: one.highlight ? 3 : 1.5,
          // uPlot fills its points white: the page's background instead (dark themes).
          points: { fill: color('--jp-layout-color1') },
          spanGaps: true,
          value
        }))
      ],
      cursor: { drag: { x: true, y: false } },
      legend: { live: true },
      hooks: {
        draw: [
          u =>
            drawLimits(u, this._limits, {
              color: this._cssVar('--jp-error-color1'),
              font: `${Math.round(11 * uPlot.pxRatio)}px ${family}`,
              pixelRatio: uPlot.pxRatio
            })
        ],
        setScale: [(u, key) => key === 'x' && this._onZoom(u)]
      }
    };
  }

  /** Whether x is zoomed in (then new points keep the zoom), and the x range on the node. */
  private _onZoom(u: uPlot): void {
    const xs = u.data[0];
    const { min, max } = u.scales.x;
    if (min === undefined || max === undefined || !xs.length) {
      return;
    }
    this._zoomed = min > xs[0] || max < xs[xs.length - 1];
    this.node.dataset.xMin = String(min);
    this.node.dataset.xMax = String(max);
    this.node.dataset.zoomed = String(this._zoomed);
  }

  /** Each legend row says which series it is and how many points it has (tests read them). */
  private _markLegend(series: readonly IChartSeries[]): void {
    const rows = this._plot?.root.querySelectorAll<HTMLElement>(
      '.u-legend .u-series'
    );
    if (!rows) {
      return;
    }
    const counts = pointCounts(series);
    // Row 0 is the x series' (the cursor's x).
    series.forEach((one, i) => {
      const row = rows[i + 1];
      if (row) {
        row.dataset.series = one.label;
        row.dataset.points = String(counts[i]);
      }
    });
  }

  private _fit(): void {
    // A hidden tab's box is 0 wide: keep the size until it is shown again.
    if (this._plot && this._fitTo.isConnected && this._fitTo.clientWidth > 0) {
      const size = this._plotSize();
      if (
        size.width !== this._plot.width ||
        size.height !== this._plot.height
      ) {
        this._plot.setSize(size);
      }
    }
  }

  /** The plot's size: what `_size` gives, less the legend under it. */
  private _plotSize(): ISize {
    const { width, height } = this._size();
    const legend =
      this._plot?.root.querySelector<HTMLElement>('.u-legend')?.offsetHeight ??
      0;
    return {
      width: Math.max(100, Math.floor(width)),
      height: Math.max(100, Math.floor(height - legend))
    };
  }

  private _cssVar(name: string): string {
    return getComputedStyle(this.node).getPropertyValue(name).trim() || 'gray';
  }

  /** The colour a palette class gives (read from a hidden probe, so themes decide). */
  private _classColor(colorClass: string): string {
    let probe = this._probes.get(colorClass);
    if (!probe) {
      probe = document.createElement('span');
      probe.className = colorClass;
      probe.hidden = true;
      this.node.append(probe);
      this._probes.set(colorClass, probe);
    }
    return getComputedStyle(probe).color;
  }

  private _destroy(): void {
    this._plot?.destroy();
    this._plot = null;
    this._zoomed = false;
    this._shape = '';
    for (const probe of this._probes.values()) {
      probe.remove();
    }
    this._probes.clear();
    delete this.node.dataset.xMin;
    delete this.node.dataset.xMax;
    delete this.node.dataset.zoomed;
  }

  private _plot: uPlot | null = null;
  private _shape = '';
  private _zoomed = false;
  private _limits: readonly IChartLimit[] = [];
  private _disposed = false;
  private readonly _probes = new Map<string, HTMLElement>();
  private readonly _resizes: ResizeObserver;
  private readonly _themes: MutationObserver;
}
