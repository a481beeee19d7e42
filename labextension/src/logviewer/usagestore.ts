/**
 * A job's usage samples (the log websocket's version 3) as the Usage tab plots them: one
 * measure each (CPU, resident memory, GPU utilisation and the replica's memory on its GPUs
 * where it holds one), a series per replica, over the samples' times (Unix seconds: the
 * chart's time axis).
 */

import { IChartLimit } from '../common/chartdata';
import { IJobSpec, IUsageReport, IUsageSample } from '../common/model';
import { ITrans } from '../common/trans';
import { roleMemoryLimits } from '../common/usage';
import { DEFAULT_MAX_POINTS, MetricSeries } from './metrics';
import { IMeasureSource } from './metricspanel';

const MiB = 1024 * 1024;

/**
 * What the Usage tab says in words over its charts: why the engine does not sample the job,
 * where it does not, and what it cannot measure of it (the server's own sentences).
 */
export function usageNotes(
  report: Pick<IUsageReport, 'available' | 'reason' | 'notes'>
): string[] {
  const reason = !report.available && report.reason ? [report.reason] : [];
  return [...reason, ...(report.notes ?? [])];
}

export class UsageStore implements IMeasureSource {
  constructor(
    private readonly _trans: ITrans,
    readonly maxPoints: number = DEFAULT_MAX_POINTS
  ) {
    this._names = {
      cpu: _trans.__('CPU (%, 100 = one core)'),
      memory: _trans.__('memory (MiB, resident)'),
      gpu: _trans.__('GPU (%, the busiest it holds)'),
      gpuMemory: _trans.__('GPU memory (MiB, its processes’ on its GPUs)')
    };
  }

  /** Takes new samples, each once (the stream gives each once across reconnects). */
  add(samples: IUsageSample[]): void {
    for (const sample of samples) {
      const x = sample.time;
      for (const [replica, usage] of Object.entries(sample.replicas)) {
        this._series(this._names.cpu, replica).add(x, usage.cpu_percent);
        this._series(this._names.memory, replica).add(x, usage.rss_bytes / MiB);
        const busy = usage.gpus
          .map(gpu => gpu.utilization_percent)
          .filter((p): p is number => p !== null);
        if (busy.length) {
          this._series(this._names.gpu, replica).add(x, Math.max(...busy));
        }
        const held = usage.gpus
          .map(gpu => gpu.memory_bytes)
          .filter((bytes): bytes is number => bytes !== null);
        if (held.length) {
          const total = held.reduce((sum, bytes) => sum + bytes, 0);
          this._series(this._names.gpuMemory, replica).add(x, total / MiB);
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

  /** The requested limits the spec set: each role's `%memory` on the memory chart. */
  limits(measure: string): IChartLimit[] {
    return measure === this._names.memory ? this._memoryLimits : [];
  }

  /** Reads the limits from the job's spec (the same spec every time: read once). */
  setSpec(spec: IJobSpec): void {
    if (this._spec === spec) {
      return;
    }
    this._spec = spec;
    this._memoryLimits = Object.entries(roleMemoryLimits(spec)).map(
      ([role, bytes]) => ({
        label: this._trans.__('%1 limit', role),
        y: bytes / MiB
      })
    );
    this._version++;
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

  private readonly _names: {
    cpu: string;
    memory: string;
    gpu: string;
    gpuMemory: string;
  };
  private readonly _byMeasure = new Map<string, Map<string, MetricSeries>>();
  private _spec: IJobSpec | null = null;
  private _memoryLimits: IChartLimit[] = [];
  private _version = 0;
}
