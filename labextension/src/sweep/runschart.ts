/**
 * Several runs' metrics on one chart: a select of the metrics any run reported and one line
 * per run (a sweep's trials, or jobs being compared), coloured from the replica palette.
 */

import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { PALETTE_SIZE } from '../common/colors';
import { IChartSeries } from '../common/chartdata';
import { MetricChart } from '../common/metricchart';
import { MetricPoint } from '../common/model';

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
    /** The metric shown first, while any run reports it. */
    public preferred: string | null = null
  ) {
    super();
    this.addClass('jp-distrun-RunsChart');
    this._chart = new MetricChart({
      trans: this._trans,
      empty: this._trans.__('No metrics reported yet.'),
      selectTestId: 'distrun-runs-metric',
      chartTestId: 'distrun-runs-chart',
      onChoose: () => this._draw(),
      fitTo: this.node,
      size: () => ({
        width: Math.max(320, this.node.clientWidth - 16),
        height: 280
      })
    });
    this.node.append(...this._chart.nodes);
  }

  get metric(): string {
    return this._chart.chosen;
  }

  setRuns(runs: IRun[]): void {
    this._runs = runs;
    this._draw();
  }

  dispose(): void {
    this._chart.dispose();
    super.dispose();
  }

  private _draw(): void {
    const metrics = [
      ...new Set(this._runs.flatMap(run => Object.keys(run.series)))
    ].sort();
    const chosen = this._chart.offer(
      metrics,
      this.preferred ? [this.preferred] : []
    );
    const series: IChartSeries[] = this._runs
      .filter(run => run.series[chosen]?.length)
      .map(run => ({
        label: run.label,
        colorClass: `jp-distrun-c${run.index % PALETTE_SIZE}`,
        highlight: run.highlight,
        xs: run.series[chosen].map(([step]) => step),
        ys: run.series[chosen].map(([, value]) => value)
      }));
    this._chart.draw(
      series,
      {
        xLabel: this._trans.__('step'),
        yLabel: chosen
      },
      this._trans.__('%1 per run', chosen)
    );
  }

  private _runs: IRun[] = [];
  private readonly _chart: MetricChart;
}
