/**
 * The log viewer's Metrics tab: a select of the metrics seen so far and a live chart of the
 * chosen one, one line per replica.
 */

import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { IChartSeries, renderChart } from '../common/chart';
import { replicaColorIndex } from '../common/colors';
import { MetricStore } from './metrics';

/** Redraw at most this often while lines stream in. */
const REDRAW_INTERVAL_MS = 250;
const PREFERRED_METRICS = ['loss', 'train_loss', 'train/loss', 'accuracy'];

export class MetricsPanel extends Widget {
  constructor(
    private readonly _store: MetricStore,
    private readonly _trans: TranslationBundle,
    private readonly _replicas: () => readonly string[]
  ) {
    super();
    this.addClass('jp-distrun-MetricsPanel');
    this.node.dataset.testId = 'distrun-viewer-metrics';
    const bar = document.createElement('div');
    bar.className = 'jp-distrun-MetricsPanel-bar';
    const label = document.createElement('label');
    label.textContent = this._trans.__('Metric');
    this._select.className = 'jp-mod-styled';
    this._select.dataset.testId = 'distrun-viewer-metric';
    this._select.onchange = () => {
      this._chosen = this._select.value;
      this._draw();
    };
    label.append(this._select);
    this._legend.className = 'jp-distrun-MetricsPanel-legend';
    bar.append(label, this._legend);

    this._empty.className = 'jp-distrun-MetricsPanel-empty';
    this._empty.textContent = this._trans.__(
      'No metrics yet. Lines like "step 10 loss=0.31" or "accuracy: 0.92" are plotted here as they arrive.'
    );
    this._chart.classList.add('jp-distrun-Chart');
    this._chart.dataset.testId = 'distrun-viewer-chart';
    this._chart.setAttribute('role', 'img');
    this.node.append(bar, this._empty, this._chart);
  }

  /** Redraws when metrics changed (throttled); cheap to call on every frame. */
  refresh(): void {
    if (!this.isVisible || this._store.version === this._drawnVersion) {
      return;
    }
    const wait = this._lastDraw + REDRAW_INTERVAL_MS - performance.now();
    if (wait > 0) {
      if (!this._timer) {
        this._timer = window.setTimeout(() => {
          this._timer = 0;
          this.refresh();
        }, wait);
      }
      return;
    }
    this._draw();
  }

  dispose(): void {
    window.clearTimeout(this._timer);
    super.dispose();
  }

  protected onAfterShow(): void {
    this._draw();
  }

  protected onResize(): void {
    if (this.isVisible) {
      this._draw();
    }
  }

  private _draw(): void {
    this._lastDraw = performance.now();
    this._drawnVersion = this._store.version;
    const metrics = this._store.metrics();
    this._updateSelect(metrics);
    this._empty.hidden = metrics.length > 0;
    this._chart.style.display = metrics.length ? '' : 'none';
    if (!this._chosen) {
      this._legend.replaceChildren();
      return;
    }
    const known = this._replicas();
    const series = this._store.series(this._chosen);
    const chartSeries: IChartSeries[] = series.map(one => ({
      label: one.replica,
      colorClass: `jp-distrun-c${replicaColorIndex(one.replica, known)}`,
      xs: one.xs,
      ys: one.ys
    }));
    const byStep = series.every(one => one.xKind === 'step');
    const width = Math.max(200, this.node.clientWidth - 16);
    const height = Math.max(160, this.node.clientHeight - 56);
    renderChart(this._chart, chartSeries, {
      width,
      height,
      xLabel: byStep ? this._trans.__('step') : this._trans.__('log line'),
      yLabel: this._chosen
    });
    this._chart.setAttribute(
      'aria-label',
      this._trans.__('%1 per replica', this._chosen)
    );
    this._legend.replaceChildren(
      ...chartSeries.map(one => {
        const item = document.createElement('span');
        item.className = `jp-distrun-MetricsPanel-key ${one.colorClass}`;
        item.textContent = one.label;
        return item;
      })
    );
  }

  private _updateSelect(metrics: string[]): void {
    if (!this._chosen || !metrics.includes(this._chosen)) {
      this._chosen =
        PREFERRED_METRICS.find(name => metrics.includes(name)) ??
        metrics[0] ??
        '';
    }
    if (this._select.options.length !== metrics.length) {
      this._select.replaceChildren(
        ...metrics.map(name => new Option(name, name))
      );
    }
    this._select.value = this._chosen;
  }

  private readonly _select = document.createElement('select');
  private readonly _legend = document.createElement('span');
  private readonly _empty = document.createElement('div');
  private readonly _chart = document.createElementNS(
    'http://www.w3.org/2000/svg',
    'svg'
  );
  private _chosen = '';
  private _drawnVersion = -1;
  private _lastDraw = 0;
  private _timer = 0;
}
