/**
 * Each replica's newest sampled usage as small gauges (CPU bar, memory), for the cell's
 * status area: one per replica in job order, updated as `usage` messages come.
 */

import { IJobSpec, IUsageSample } from './model';
import { ITrans } from './trans';

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** Bytes for people, in binary units, as the CLI writes them: 3.9 GiB, 200.3 MiB, 100 B. */
const QUANTITY_RE = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$/;
const QUANTITY_FACTORS: Record<string, number> = {
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60
};

/** Bytes of a Kubernetes memory quantity as a role's `%memory` holds it (`2Gi`, `500M`,
 * `1048576`); null for a form this does not read (the server has checked it already). */
export function memoryBytes(
  quantity: string | null | undefined
): number | null {
  const match = QUANTITY_RE.exec((quantity ?? '').trim());
  return match ? Number(match[1]) * QUANTITY_FACTORS[match[2] ?? ''] : null;
}

export function formatBytes(count: number): string {
  let value = count;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  if (unit === 0) {
    return `${count} B`;
  }
  // A tenth always, unless whole (as the CLI writes them).
  const digits = Number.isInteger(value) ? 0 : 1;
  return `${value.toFixed(digits)} ${UNITS[unit]}`;
}

/** A replica this close to its role's memory limit is marked. */
export const NEAR_LIMIT = 0.9;
/** A GPU at most this busy is idle, while another replica's at least BUSY_GPU_PERCENT is. */
export const IDLE_GPU_PERCENT = 5;
export const BUSY_GPU_PERCENT = 50;

/** Why a gauge is marked: near its memory limit, or its GPU idle while another is busy. */
export type GaugeWarning = 'memory' | 'gpu-idle' | null;

/** One replica's gauge: its newest figures, or null where the newest sample lacks it. */
export interface IGauge {
  replica: string;
  cpuPercent: number | null;
  rssBytes: number | null;
  gpuPercent: number | null;
  /** Its role's requested memory (`%memory`), in bytes. */
  limitBytes: number | null;
  warning: GaugeWarning;
}

/** Each role's requested memory in bytes, where the spec sets one. */
export function roleMemoryLimits(
  spec: IJobSpec | null
): Record<string, number> {
  const limits: Record<string, number> = {};
  for (const [role, roleSpec] of Object.entries(spec?.roles ?? {})) {
    const bytes = memoryBytes(roleSpec.resources?.memory);
    if (bytes !== null) {
      limits[role] = bytes;
    }
  }
  return limits;
}

/** Each of `replicas` as the newest of `samples` shows it, marked where it needs a look. */
export function gauges(
  replicas: string[],
  samples: IUsageSample[],
  roleLimits: Record<string, number> = {}
): IGauge[] {
  const newest = samples.length ? samples[samples.length - 1].replicas : {};
  const shown = replicas.map(replica => {
    const usage = newest[replica];
    const busy = (usage?.gpus ?? [])
      .map(gpu => gpu.utilization_percent)
      .filter((p): p is number => p !== null);
    return {
      replica,
      cpuPercent: usage ? usage.cpu_percent : null,
      rssBytes: usage ? usage.rss_bytes : null,
      gpuPercent: busy.length ? Math.max(...busy) : null,
      limitBytes: roleLimits[replica.replace(/-\d+$/, '')] ?? null,
      warning: null as GaugeWarning
    };
  });
  const busiestGpu = Math.max(-1, ...shown.map(g => g.gpuPercent ?? -1));
  for (const gauge of shown) {
    if (
      gauge.rssBytes !== null &&
      gauge.limitBytes !== null &&
      gauge.rssBytes >= NEAR_LIMIT * gauge.limitBytes
    ) {
      gauge.warning = 'memory';
    } else if (
      gauge.gpuPercent !== null &&
      gauge.gpuPercent <= IDLE_GPU_PERCENT &&
      busiestGpu >= BUSY_GPU_PERCENT
    ) {
      gauge.warning = 'gpu-idle';
    }
  }
  return shown;
}

export class UsageGauges {
  constructor(private readonly _trans: ITrans) {
    this.node.className = 'jp-distrun-usage';
    this.node.dataset.testId = 'distrun-job-usage';
    this.node.hidden = true;
  }

  readonly node = document.createElement('div');

  /** Shows the newest figures of `replicas` (job order) against the limits of `spec`;
   * hidden until a sample comes. */
  update(
    replicas: string[],
    samples: IUsageSample[],
    spec: IJobSpec | null = null
  ): void {
    if (!samples.length) {
      return;
    }
    this.node.hidden = false;
    const limits = roleMemoryLimits(spec);
    this.node.replaceChildren(
      ...gauges(replicas, samples, limits).map(gauge => this._gauge(gauge))
    );
  }

  /**
   * One replica's gauge: a CSS bar (a span's width) and a line of text, not a chart: a few
   * elements per replica per sample, with no axes or history to draw, so it stays plain DOM
   * rather than a uPlot each (the charts with history are the log viewer's, linechart.ts).
   */
  private _gauge(gauge: IGauge): HTMLElement {
    const item = document.createElement('span');
    item.className = 'jp-distrun-usage-gauge';
    item.dataset.replica = gauge.replica;
    const bar = document.createElement('span');
    bar.className = 'jp-distrun-usage-bar';
    const fill = document.createElement('span');
    fill.className = 'jp-distrun-usage-fill';
    const cpu = gauge.cpuPercent ?? 0;
    fill.style.width = `${Math.min(100, Math.max(0, cpu))}%`;
    bar.append(fill);
    const memory = gauge.rssBytes === null ? '–' : formatBytes(gauge.rssBytes);
    const parts = [
      gauge.cpuPercent === null ? '–' : `${Math.round(gauge.cpuPercent)}%`,
      gauge.limitBytes === null
        ? memory
        : this._trans.__('%1 of %2', memory, formatBytes(gauge.limitBytes))
    ];
    if (gauge.gpuPercent !== null) {
      parts.push(this._trans.__('GPU %1%', Math.round(gauge.gpuPercent)));
    }
    const text = document.createElement('span');
    text.className = 'jp-distrun-usage-text';
    text.textContent = `${gauge.replica} ${parts.join(' · ')}`;
    item.title = this._trans.__(
      '%1: CPU of its processes (100 is one core), resident memory',
      gauge.replica
    );
    if (gauge.warning !== null) {
      item.dataset.warning = gauge.warning;
      item.title +=
        '\n' +
        (gauge.warning === 'memory'
          ? this._trans.__(
              'near its memory limit: it is killed if it goes over'
            )
          : this._trans.__("its GPU is idle while another replica's is busy"));
    }
    item.append(bar, text);
    return item;
  }
}
