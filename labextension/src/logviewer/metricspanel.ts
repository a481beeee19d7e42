/**
 * The log viewer's Metrics tab: a select of the metrics seen so far and a live chart of the
 * chosen one, one line per replica.
 */

import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { IChartSeries } from '../common/chart';
import { MetricChart } from '../common/metricchart';
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
    this._chart = new MetricChart({
      trans: this._trans,
      empty: this._trans.__(
        'No metrics yet. Lines like "step 10 loss=0.31" or "accuracy: 0.92" are plotted here as they arrive.'
      ),
      selectTestId: 'distrun-viewer-metric',
      chartTestId: 'distrun-viewer-chart',
      onChoose: () => this._draw()
    });
    this.node.append(...this._chart.nodes);
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
    const chosen = this._chart.offer(this._store.metrics(), PREFERRED_METRICS);
    const known = this._replicas();
    const series = chosen ? this._store.series(chosen) : [];
    const chartSeries: IChartSeries[] = series.map(one => ({
      label: one.replica,
      colorClass: `jp-distrun-c${replicaColorIndex(one.replica, known)}`,
      xs: one.xs,
      ys: one.ys
    }));
    const byStep = series.every(one => one.xKind === 'step');
    this._chart.draw(
      chartSeries,
      {
        width: Math.max(200, this.node.clientWidth - 16),
        height: Math.max(160, this.node.clientHeight - 56),
        xLabel: byStep ? this._trans.__('step') : this._trans.__('log line'),
        yLabel: chosen
      },
      this._trans.__('%1 per replica', chosen)
    );
  }

  private readonly _chart: MetricChart;
  private _drawnVersion = -1;
  private _lastDraw = 0;
  private _timer = 0;
}
