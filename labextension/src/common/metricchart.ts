/**
 * What every metrics chart shows: a select of the metrics there are, the chart of the chosen
 * one with a legend, and a note instead when there is nothing to plot. The log viewer's
 * Metrics tab (one line per replica) and the sweep and compare views (one line per run) each
 * decide what to plot; this draws it.
 */

import { IChartOptions, IChartSeries, renderChart } from './chart';
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
    this._legend.className = 'jp-distrun-MetricsPanel-legend';
    bar.append(label, this._legend);
    this._empty.className = 'jp-distrun-MetricsPanel-empty';
    this._empty.textContent = options.empty;
    this._chart.classList.add('jp-distrun-Chart');
    this._chart.dataset.testId = options.chartTestId;
    this._chart.setAttribute('role', 'img');
    this.nodes = [bar, this._empty, this._chart];
  }

  /** The bar (select and legend), the note and the chart, to put in a widget's node. */
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

  /** Draws `series` of the chosen metric with their legend, or the note when there is none. */
  draw(
    series: readonly IChartSeries[],
    options: IChartOptions,
    ariaLabel: string
  ): void {
    this._empty.hidden = series.length > 0;
    this._chart.style.display = series.length ? '' : 'none';
    this._chart.dataset.series = String(series.length);
    if (!series.length) {
      this._legend.replaceChildren();
      return;
    }
    renderChart(this._chart, series, options);
    this._chart.setAttribute('aria-label', ariaLabel);
    this._legend.replaceChildren(
      ...series.map(one => {
        const item = document.createElement('span');
        item.className = `jp-distrun-MetricsPanel-key ${one.colorClass}`;
        item.textContent = one.label;
        return item;
      })
    );
  }

  private _chosen = '';
  private _offered: string[] = [];
  private readonly _select = document.createElement('select');
  private readonly _legend = document.createElement('span');
  private readonly _empty = document.createElement('div');
  private readonly _chart = document.createElementNS(
    'http://www.w3.org/2000/svg',
    'svg'
  );
}
