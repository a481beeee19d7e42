/**
 * Several runs' metrics on one chart: a select of the metrics any run reported and one line
 * per run (a sweep's trials, or jobs being compared), coloured from the replica palette.
 */

import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { PALETTE_SIZE } from '../common/colors';
import { MetricPoint } from '../common/model';
import { IChartSeries, renderChart } from '../common/chart';

export interface IRun {
  label: string;
  /** Stable across redraws: picks the run's colour. */
  index: number;
  series: Record<string, MetricPoint[]>;
  /** Drawn thicker (the best trial). */
  highlight?: boolean;
}

export class RunsChart extends Widget {
  constructor(
    private readonly _trans: TranslationBundle,
    preferred: string | null = null
  ) {
    super();
    this.addClass('jp-distrun-RunsChart');
    this._chosen = preferred ?? '';
    const bar = document.createElement('div');
    bar.className = 'jp-distrun-MetricsPanel-bar';
    const label = document.createElement('label');
    label.textContent = this._trans.__('Metric');
    this._select.className = 'jp-mod-styled';
    this._select.dataset.testId = 'distrun-runs-metric';
    this._select.onchange = () => {
      this._chosen = this._select.value;
      this._draw();
    };
    label.append(this._select);
    this._legend.className = 'jp-distrun-MetricsPanel-legend';
    bar.append(label, this._legend);
    this._empty.className = 'jp-distrun-MetricsPanel-empty';
    this._empty.textContent = this._trans.__('No metrics reported yet.');
    this._chart.classList.add('jp-distrun-Chart');
    this._chart.dataset.testId = 'distrun-runs-chart';
    this._chart.setAttribute('role', 'img');
    this.node.append(bar, this._empty, this._chart);
  }

  get metric(): string {
    return this._chosen;
  }

  setRuns(runs: IRun[]): void {
    this._runs = runs;
    this._draw();
  }

  protected onResize(): void {
    this._draw();
  }

  private _draw(): void {
    const metrics = [
      ...new Set(this._runs.flatMap(run => Object.keys(run.series)))
    ].sort();
    if (!metrics.includes(this._chosen)) {
      this._chosen = metrics[0] ?? this._chosen;
    }
    this._select.replaceChildren(
      ...metrics.map(name => new Option(name, name))
    );
    this._select.value = this._chosen;
    const series: IChartSeries[] = this._runs
      .filter(run => run.series[this._chosen]?.length)
      .map(run => ({
        label: run.label,
        colorClass: `jp-distrun-c${run.index % PALETTE_SIZE}${run.highlight ? ' jp-mod-highlight' : ''}`,
        xs: run.series[this._chosen].map(([step]) => step),
        ys: run.series[this._chosen].map(([, value]) => value)
      }));
    this._empty.hidden = series.length > 0;
    this._chart.style.display = series.length ? '' : 'none';
    this._chart.dataset.series = String(series.length);
    renderChart(this._chart, series, {
      width: Math.max(320, this.node.clientWidth - 16),
      height: 240,
      xLabel: this._trans.__('step'),
      yLabel: this._chosen
    });
    this._chart.setAttribute(
      'aria-label',
      this._trans.__('%1 per run', this._chosen)
    );
    this._legend.replaceChildren(
      ...series.map(one => {
        const item = document.createElement('span');
        item.className = `jp-distrun-MetricsPanel-key ${one.colorClass}`;
        item.textContent = one.label;
        return item;
      })
    );
  }

  private _runs: IRun[] = [];
  private _chosen: string;
  private readonly _select = document.createElement('select');
  private readonly _legend = document.createElement('span');
  private readonly _empty = document.createElement('div');
  private readonly _chart = document.createElementNS(
    'http://www.w3.org/2000/svg',
    'svg'
  );
}
