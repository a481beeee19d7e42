/**
 * "Run distributed": submit the active cell (the selected code cells, joined) as a job and
 * put a live job output into the active cell, or the server's error as one readable line.
 */

import * as nbformat from '@jupyterlab/nbformat';
import { PathExt } from '@jupyterlab/coreutils';
import { CodeCell } from '@jupyterlab/cells';
import { NotebookPanel } from '@jupyterlab/notebook';

import {
  cancelJob,
  DistrunAPIError,
  listJobs,
  submitCell
} from '../common/api';
import {
  IJob,
  IJobSpec,
  isJobId,
  isTerminal,
  ISubmitCell
} from '../common/model';
import { earlyStreamForRun, openNextEarlyStream } from '../common/earlystream';
import { JOB_MIME_TYPE } from '../common/tokens';
import { traceMark } from '../common/trace';

function activeCodeCell(panel: NotebookPanel): CodeCell | null {
  const cell = panel.content.activeCell;
  return cell instanceof CodeCell ? cell : null;
}

/** The code cells to run: every selected one (or just the active one), in order. */
function selectedCodeCells(panel: NotebookPanel): CodeCell[] {
  const notebook = panel.content;
  return notebook.widgets.filter(
    (cell): cell is CodeCell =>
      cell instanceof CodeCell && notebook.isSelectedOrActive(cell)
  );
}

/** The source to run: every selected code cell (or just the active one), joined. */
export function selectedSource(panel: NotebookPanel): string {
  return selectedCodeCells(panel)
    .map(cell => cell.model.sharedModel.getSource())
    .join('\n');
}

/**
 * The cell output of a job. `cells`: the ids of the cells whose sources were joined to make
 * it, when more than one (a traceback's line of the joined code is found in them).
 */
export function jobOutput(
  job: IJob,
  cells: string[] = []
): nbformat.IDisplayData {
  const data: IJobOutputData = { job_id: job.id };
  if (cells.length > 1) {
    data.cells = cells;
  }
  return {
    output_type: 'display_data',
    data: {
      [JOB_MIME_TYPE]: { ...data },
      'text/plain': `distrun job ${job.id} (${job.framework}, ${job.replicas.length} replicas)`
    },
    metadata: {}
  };
}

export function errorOutput(message: string): nbformat.IStream {
  return {
    output_type: 'stream',
    name: 'stderr',
    text: `distrun: ${message}\n`
  };
}

/** What a submission came to: the job, or the server's refusal (also shown in the output). */
export type RunResult = { job: IJob } | { error: DistrunAPIError };

/**
 * Submits and shows the job in the active cell's output, or the server's error as one line
 * there. `overrides` (the form's values) go with the cell as they are; null sends none.
 */
export async function runCellDistributed(
  panel: NotebookPanel,
  overrides: Partial<IJobSpec> | null
): Promise<RunResult | null> {
  const target = activeCodeCell(panel);
  if (!target) {
    return null;
  }
  const sources = selectedCodeCells(panel);
  const body: ISubmitCell = {
    cell: sources.map(cell => cell.model.sharedModel.getSource()).join('\n'),
    cwd: PathExt.dirname(panel.context.localPath)
  };
  if (overrides && Object.keys(overrides).length) {
    body.overrides = overrides;
  }
  const outputs = target.model.outputs;
  // The job's log stream is open already (opened after the previous run), or opens beside
  // the submission (just after it), not after its answer.
  const early = earlyStreamForRun();
  traceMark('submit');
  // The request is on its way before the previous run's output is taken down (its view
  // disposed, the cell laid out again): run again, that work overlaps the round trip.
  const submitted = submitCell(body, early.ticket);
  early.open();
  outputs.clear();
  try {
    const job = await submitted;
    traceMark('submitted', job.id);
    early.claim(job.id);
    openNextEarlyStream();
    outputs.add(
      jobOutput(
        job,
        sources.map(cell => cell.model.id)
      )
    );
    return { job };
  } catch (error) {
    early.dispose();
    outputs.add(errorOutput((error as Error).message));
    const refusal =
      error instanceof DistrunAPIError
        ? error
        : new DistrunAPIError(0, String(error));
    return { error: refusal };
  }
}

/** What a job's cell output holds (its MIME data). */
export interface IJobOutputData {
  job_id: string;
  cells?: string[];
}

/** Each code cell's job outputs, in notebook order. */
function* jobOutputs(
  panel: NotebookPanel
): Generator<{ cell: CodeCell; data: IJobOutputData }> {
  for (const cell of panel.content.widgets) {
    if (!(cell instanceof CodeCell)) {
      continue;
    }
    const outputs = cell.model.outputs;
    for (let i = 0; i < outputs.length; i++) {
      const data = outputs.get(i).data[JOB_MIME_TYPE] as
        Partial<IJobOutputData> | undefined;
      if (isJobId(data?.job_id)) {
        yield { cell, data: data as IJobOutputData };
      }
    }
  }
}

/** The ids of the jobs whose live output is in one of the notebook's cells. */
export function jobIdsInNotebook(panel: NotebookPanel): Set<string> {
  const ids = new Set<string>();
  for (const { data } of jobOutputs(panel)) {
    ids.add(data.job_id);
  }
  return ids;
}

/**
 * The cells a job's code came from, in order: those whose ids its output recorded (the ones
 * still there), else the cell showing its output; null when no cell of the notebook shows it.
 */
export function jobSourceCells(
  panel: NotebookPanel,
  jobId: string
): CodeCell[] | null {
  for (const { cell, data } of jobOutputs(panel)) {
    if (data.job_id !== jobId) {
      continue;
    }
    const ids = new Set(Array.isArray(data.cells) ? data.cells : []);
    const joined = panel.content.widgets.filter(
      (other): other is CodeCell =>
        other instanceof CodeCell && ids.has(other.model.id)
    );
    return joined.length ? joined : [cell];
  }
  return null;
}

/**
 * Cancels every job started from the notebook's cells that has not finished (what
 * interrupting the notebook's kernel means for them). Returns the ids it cancelled.
 */
export async function cancelNotebookJobs(
  panel: NotebookPanel
): Promise<string[]> {
  const ids = jobIdsInNotebook(panel);
  if (!ids.size) {
    return [];
  }
  const { jobs } = await listJobs();
  const running = jobs
    .filter(job => ids.has(job.id) && !isTerminal(job.state))
    .map(job => job.id);
  await Promise.all(running.map(id => cancelJob(id)));
  return running;
}
