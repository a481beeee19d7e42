/**
 * A job's usage samples (the log websocket's version 3) as the Usage tab plots them: one
 * measure each (CPU, resident memory, GPU utilisation where there is one), a series per
 * replica, over seconds since the first sample.
 */

import { IUsageSample } from '../common/model';
import { ITrans } from '../common/trans';
import { DEFAULT_MAX_POINTS, MetricSeries } from './metrics';
import { IMeasureSource } from './metricspanel';

const MiB = 1024 * 1024;

export class UsageStore implements IMeasureSource {
  constructor(
    trans: ITrans,
    readonly maxPoints: number = DEFAULT_MAX_POINTS
  ) {
    this._names = {
      cpu: trans.__('CPU (%, 100 = one core)'),
      memory: trans.__('memory (MiB, resident)'),
      gpu: trans.__('GPU (%, the busiest it holds)')
    };
  }

  /** Takes new samples, each once (the stream gives each once across reconnects). */
  add(samples: IUsageSample[]): void {
    for (const sample of samples) {
      this._start ??= sample.time;
      const x = sample.time - this._start;
      for (const [replica, usage] of Object.entries(sample.replicas)) {
        this._series(this._names.cpu, replica).add(x, usage.cpu_percent);
        this._series(this._names.memory, replica).add(x, usage.rss_bytes / MiB);
        const busy = usage.gpus
          .map(gpu => gpu.utilization_percent)
          .filter((p): p is number => p !== null);
        if (busy.length) {
          this._series(this._names.gpu, replica).add(x, Math.max(...busy));
        }
      }
    }
    if (samples.length) {
      this._version++;
    }
  }

  get version(): number {
    return this._version;
  }

  metrics(): string[] {
    return [...this._byMeasure.keys()];
  }

  series(measure: string): MetricSeries[] {
    return [...(this._byMeasure.get(measure)?.values() ?? [])];
  }

  /** The measure shown first. */
  get preferred(): string[] {
    return [this._names.cpu];
  }

  private _series(measure: string, replica: string): MetricSeries {
    let byReplica = this._byMeasure.get(measure);
    if (!byReplica) {
      byReplica = new Map();
      this._byMeasure.set(measure, byReplica);
    }
    let series = byReplica.get(replica);
    if (!series) {
      series = new MetricSeries(measure, replica, 'step', this.maxPoints);
      byReplica.set(replica, series);
    }
    return series;
  }

  private readonly _names: { cpu: string; memory: string; gpu: string };
  private readonly _byMeasure = new Map<string, Map<string, MetricSeries>>();
  private _start: number | undefined;
  private _version = 0;
}
