/**
 * What every metrics chart shows: a select of the metrics there are, the chart of the chosen
 * one (linechart.ts: zoom, and a legend with each line's value), and a note instead when
 * there is nothing to plot. The log viewer's
 * Metrics tab (one line per replica) and the sweep and compare views (one line per run) each
 * decide what to plot; this draws it.
 */

import { IChartSeries } from './chartdata';
import { IChartSpec, ISize, LineChart } from './linechart';
import { ITrans } from './trans';

export class MetricChart {
  constructor(options: {
    trans: ITrans;
    /** What the note says while there is nothing to plot. */
    empty: string;
    selectTestId: string;
    chartTestId: string;
    /** Called when the person chooses another metric. */
    onChoose: () => void;
    /** The element whose resizing resizes the chart (by default the chart's own box). */
    fitTo?: HTMLElement;
    /** The chart's size, legend included (by default its own box's, sized by CSS). */
    size?: () => ISize;
  }) {
    const bar = document.createElement('div');
    bar.className = 'jp-distrun-MetricsPanel-bar';
    const label = document.createElement('label');
    label.textContent = options.trans.__('Metric');
    this._select.className = 'jp-mod-styled';
    this._select.dataset.testId = options.selectTestId;
    this._select.onchange = () => {
      this._chosen = this._select.value;
      options.onChoose();
    };
    label.append(this._select);
    bar.append(label);
    this._empty.className = 'jp-distrun-MetricsPanel-empty';
    this._empty.textContent = options.empty;
    const host = document.createElement('div');
    host.className = 'jp-distrun-Chart';
    host.dataset.testId = options.chartTestId;
    host.setAttribute('role', 'img');
    this._chart = new LineChart(
      host,
      options.fitTo ?? host,
      options.size ??
        (() => ({ width: host.clientWidth, height: host.clientHeight }))
    );
    this.nodes = [bar, this._empty, host];
  }

  /** The bar (the select), the note and the chart, to put in a widget's node. */
  readonly nodes: readonly Element[];

  /** The metric shown ('' while there is none). */
  get chosen(): string {
    return this._chosen;
  }

  /**
   * Offers `metrics` in the select and returns the one to show: the chosen one while it is
   * offered, else the first of `preferred` that is, else the first.
   */
  offer(metrics: readonly string[], preferred: readonly string[] = []): string {
    if (!metrics.includes(this._chosen)) {
      this._chosen =
        preferred.find(name => metrics.includes(name)) ?? metrics[0] ?? '';
    }
    if (this._offered.join('\n') !== metrics.join('\n')) {
      this._offered = [...metrics];
      this._select.replaceChildren(
        ...metrics.map(name => new Option(name, name))
      );
    }
    this._select.value = this._chosen;
    return this._chosen;
  }

  /** Draws `series` of the chosen metric, or the note when there is none. */
  draw(
    series: readonly IChartSeries[],
    spec: IChartSpec,
    ariaLabel: string
  ): void {
    this._empty.hidden = series.length > 0;
    this._chart.node.style.display = series.length ? '' : 'none';
    this._chart.update(series, spec);
    this._chart.node.setAttribute('aria-label', ariaLabel);
  }

  /** Frees the chart (its uPlot and observers). */
  dispose(): void {
    this._chart.dispose();
  }

  private _chosen = '';
  private _offered: string[] = [];
  private readonly _select = document.createElement('select');
  private readonly _empty = document.createElement('div');
  private readonly _chart: LineChart;
}
