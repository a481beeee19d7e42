/**
 * The log viewer's Metrics and Usage tabs: a select of the metrics there are and a live chart
 * of the chosen one (Metrics), or every measure's chart one above the other (Usage: `stacked`),
 * one line per replica (drag to zoom, double-click to zoom out, the
 * legend giving each replica's value under the cursor or its latest).
 */

import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { IChartLimit, IChartSeries } from '../common/chartdata';
import { IChartSpec, LineChart } from '../common/linechart';
import { MetricChart } from '../common/metricchart';
import { replicaColorIndex } from '../common/colors';
import { MetricSeries } from './metrics';

/** Redraw at most this often while lines stream in. */
const REDRAW_INTERVAL_MS = 250;
const PREFERRED_METRICS = ['loss', 'train_loss', 'train/loss', 'accuracy'];

/** What a panel plots: named measures, each a series per replica (MetricStore, UsageStore). */
export interface IMeasureSource {
  readonly version: number;
  metrics(): string[];
  series(metric: string): MetricSeries[];
  /** Lines to draw across the measure's chart (the requested limits), if any. */
  limits?(metric: string): IChartLimit[];
}

/** How a panel differs: its note while empty, its test ids, the measures it prefers. */
export interface IPanelOptions {
  empty: string;
  testId: string;
  selectTestId: string;
  chartTestId: string;
  preferred: readonly string[];
  /** The x axis' label; by default "step" (or "log line" for series without steps). */
  xLabel?: string;
  /** The x values are Unix times in seconds (drawn as a time axis). */
  xTime?: boolean;
  /** Every measure on a chart of its own, one above the other, instead of a select of them. */
  stacked?: boolean;
}

/** The height of each chart of a stacked panel, its legend included, in pixels. */
const STACKED_CHART_HEIGHT = 260;

/** The Metrics tab's options: metrics read from the lines (and TensorBoard's scalars). */
export function metricsPanelOptions(trans: TranslationBundle): IPanelOptions {
  return {
    empty: trans.__(
      'No metrics yet. Lines like "step 10 loss=0.31" or "accuracy: 0.92" are plotted here as they arrive.'
    ),
    testId: 'distrun-viewer-metrics',
    selectTestId: 'distrun-viewer-metric',
    chartTestId: 'distrun-viewer-chart',
    preferred: PREFERRED_METRICS
  };
}

export class MetricsPanel extends Widget {
  constructor(
    private readonly _store: IMeasureSource,
    private readonly _trans: TranslationBundle,
    private readonly _replicas: () => readonly string[],
    private readonly _options: IPanelOptions = metricsPanelOptions(_trans)
  ) {
    super();
    this.addClass('jp-distrun-MetricsPanel');
    this.node.dataset.testId = _options.testId;
    this._chart = new MetricChart({
      trans: this._trans,
      empty: _options.empty,
      selectTestId: _options.selectTestId,
      chartTestId: _options.chartTestId,
      onChoose: () => this._draw()
    });
    this._notes.className = 'jp-distrun-MetricsPanel-notes';
    this._notes.dataset.testId = `${_options.testId}-notes`;
    this._notes.hidden = true;
    if (_options.stacked) {
      this.addClass('jp-mod-stacked');
      this._stack.className = 'jp-distrun-MetricsPanel-stack';
      const [, empty] = this._chart.nodes;
      this.node.append(this._notes, empty, this._stack);
    } else {
      this.node.append(this._notes, ...this._chart.nodes);
    }
  }

  /** Says in words what the chart cannot show (what the engine does not measure). */
  setNotes(notes: readonly string[]): void {
    this._notes.replaceChildren(
      ...notes.map(note => {
        const line = document.createElement('p');
        line.textContent = note;
        return line;
      })
    );
    this._notes.hidden = notes.length === 0;
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
    this._chart.dispose();
    for (const chart of this._stacked.values()) {
      chart.dispose();
    }
    super.dispose();
  }

  protected onAfterShow(): void {
    this._draw();
  }

  private _draw(): void {
    this._lastDraw = performance.now();
    this._drawnVersion = this._store.version;
    if (this._options.stacked) {
      this._drawStacked();
      return;
    }
    const chosen = this._chart.offer(
      this._store.metrics(),
      this._options.preferred
    );
    const series = chosen ? this._store.series(chosen) : [];
    const chartSeries = chosen ? this._chartSeries(chosen) : [];
    const byStep = series.every(one => one.xKind === 'step');
    this._chart.draw(
      chartSeries,
      {
        xLabel:
          this._options.xLabel ??
          (byStep ? this._trans.__('step') : this._trans.__('log line')),
        yLabel: chosen,
        xTime: this._options.xTime,
        limits: chosen ? (this._store.limits?.(chosen) ?? []) : []
      },
      this._trans.__('%1 per replica', chosen)
    );
  }

  /** Each measure's chart, in the store's order, created as measures appear. */
  private _drawStacked(): void {
    const measures = this._store.metrics();
    (this._chart.nodes[1] as HTMLElement).hidden = measures.length > 0;
    for (const measure of measures) {
      const chart = this._stacked.get(measure) ?? this._addStacked(measure);
      chart.update(this._chartSeries(measure), this._spec(measure));
    }
  }

  /** A new chart for `measure`, under the others (the panel owns it: disposed with it). */
  private _addStacked(measure: string): LineChart {
    const host = document.createElement('div');
    host.className = 'jp-distrun-Chart';
    host.dataset.testId = this._options.chartTestId;
    host.dataset.measure = measure;
    host.setAttribute('role', 'img');
    host.setAttribute('aria-label', this._trans.__('%1 per replica', measure));
    this._stack.append(host);
    const chart = new LineChart(host, this.node, () => ({
      width: this.node.clientWidth - 24,
      height: STACKED_CHART_HEIGHT
    }));
    this._stacked.set(measure, chart);
    return chart;
  }

  private _chartSeries(measure: string): IChartSeries[] {
    const known = this._replicas();
    return this._store.series(measure).map(one => ({
      label: one.replica,
      colorClass: `jp-distrun-c${replicaColorIndex(one.replica, known)}`,
      xs: one.xs,
      ys: one.ys
    }));
  }

  private _spec(measure: string): IChartSpec {
    return {
      xLabel: this._options.xLabel ?? this._trans.__('step'),
      yLabel: measure,
      xTime: this._options.xTime,
      limits: this._store.limits?.(measure) ?? []
    };
  }

  private readonly _chart: MetricChart;
  private readonly _stack = document.createElement('div');
  private readonly _stacked = new Map<string, LineChart>();
  private readonly _notes = document.createElement('div');
  private _drawnVersion = -1;
  private _lastDraw = 0;
  private _timer = 0;
}
