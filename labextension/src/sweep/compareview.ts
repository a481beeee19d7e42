/**
 * Jobs side by side (any jobs, not only a sweep's): their metrics on one chart, the final
 * values in a table, and their specs as a diff (the fields that differ, the code line by line
 * against the first job).
 */

import { Panel, Widget } from '@lumino/widgets';
import { ITranslator, TranslationBundle } from '@jupyterlab/translation';

import { getJob, jobsMetrics } from '../common/api';
import { distrunIcon } from '../common/icons';
import { IJob, IJobMetrics } from '../common/model';
import { TRANSLATION_DOMAIN } from '../common/tokens';
import { RunsChart } from './runschart';
import { codeDiff, differingFields } from './specdiff';
import { formatCell } from './sweeptable';

export class CompareView extends Panel {
  constructor(options: { jobIds: string[]; translator: ITranslator }) {
    super();
    this.jobIds = options.jobIds;
    this._trans = options.translator.load(TRANSLATION_DOMAIN);
    this.id = `distrun-compare-${this.jobIds.join('-')}`;
    this.title.label = this._trans.__('Compare %1 jobs', this.jobIds.length);
    this.title.caption = this.jobIds.join(', ');
    this.title.icon = distrunIcon;
    this.title.closable = true;
    this.addClass('jp-distrun-CompareView');
    this.node.dataset.testId = 'distrun-compare-view';
    this._chart = new RunsChart(this._trans, 'loss');
    this._message.className = 'jp-distrun-SweepView-message';
    this._message.setAttribute('role', 'alert');
    this._finals.className = 'jp-distrun-SweepView-table';
    this._finals.dataset.testId = 'distrun-compare-metrics';
    this._fields.className = 'jp-distrun-SweepView-table';
    this._fields.dataset.testId = 'distrun-compare-spec';
    this._code.className = 'jp-distrun-CompareView-code';
    this._code.dataset.testId = 'distrun-compare-code';
    const specTitle = document.createElement('h3');
    specTitle.textContent = this._trans.__('How the specs differ');
    this.addWidget(new Widget({ node: this._message }));
    this.addWidget(this._chart);
    for (const node of [this._finals, specTitle, this._fields, this._code]) {
      this.addWidget(new Widget({ node }));
    }
  }

  readonly jobIds: string[];

  async refresh(): Promise<void> {
    try {
      const [jobs, metrics] = await Promise.all([
        Promise.all(this.jobIds.map(id => getJob(id))),
        jobsMetrics(this.jobIds)
      ]);
      this._render(jobs, metrics);
    } catch (error) {
      this._message.textContent = this._trans.__(
        'Cannot compare the jobs: %1',
        (error as Error).message
      );
    }
  }

  protected onAfterAttach(): void {
    void this.refresh();
  }

  private _render(jobs: IJob[], metrics: IJobMetrics[]): void {
    this._chart.setRuns(
      metrics.map((job, index) => ({
        label: job.id,
        index,
        series: job.series
      }))
    );
    const names = [
      ...new Set(metrics.flatMap(job => Object.keys(job.metrics)))
    ].sort();
    this._finals.replaceChildren(
      this._headRow(this._trans.__('final value')),
      ...names.map(name =>
        this._row(
          name,
          metrics.map(job => formatCell(job.metrics[name] ?? null))
        )
      )
    );
    const specs = jobs.map(job => job.spec);
    const fields = differingFields(specs);
    this._fields.replaceChildren(
      this._headRow(this._trans.__('field')),
      ...fields.map(row =>
        this._row(
          row.field,
          row.values.map(v => v ?? '–')
        )
      )
    );
    if (!fields.length) {
      this._fields.append(this._row(this._trans.__('(no field differs)'), []));
    }
    this._code.replaceChildren(
      ...specs
        .slice(1)
        .map((spec, i) =>
          this._codeBlock(jobs[i + 1].id, codeDiff(specs[0], spec))
        )
    );
  }

  private _headRow(first: string): HTMLElement {
    const row = document.createElement('tr');
    for (const text of [first, ...this.jobIds]) {
      const cell = document.createElement('th');
      cell.textContent = text;
      row.append(cell);
    }
    return row;
  }

  private _row(name: string, values: string[]): HTMLElement {
    const row = document.createElement('tr');
    row.dataset.field = name;
    for (const text of [name, ...values]) {
      const cell = document.createElement('td');
      cell.textContent = text;
      row.append(cell);
    }
    return row;
  }

  private _codeBlock(
    jobId: string,
    changes: ReturnType<typeof codeDiff>
  ): HTMLElement {
    const block = document.createElement('div');
    const title = document.createElement('h4');
    title.textContent = changes.length
      ? this._trans.__('Code of %1 against %2', jobId, this.jobIds[0])
      : this._trans.__('Code of %1: the same as %2', jobId, this.jobIds[0]);
    const pre = document.createElement('pre');
    for (const change of changes) {
      const span = document.createElement('span');
      span.className = `jp-distrun-CompareView-${change.kind}`;
      const mark =
        change.kind === 'added' ? '+' : change.kind === 'removed' ? '-' : ' ';
      span.textContent = change.text
        .replace(/\n$/, '')
        .split('\n')
        .map(line => `${mark} ${line}`)
        .join('\n')
        .concat('\n');
      pre.append(span);
    }
    block.append(title, ...(changes.length ? [pre] : []));
    return block;
  }

  private readonly _trans: TranslationBundle;
  private readonly _chart: RunsChart;
  private readonly _message = document.createElement('div');
  private readonly _finals = document.createElement('table');
  private readonly _fields = document.createElement('table');
  private readonly _code = document.createElement('div');
}
