/**
 * "Run distributed": submit the active cell (the selected code cells, joined) as a job and
 * put a live job output into the active cell, or the server's error as one readable line.
 */

import * as nbformat from '@jupyterlab/nbformat';
import { PathExt } from '@jupyterlab/coreutils';
import { CodeCell } from '@jupyterlab/cells';
import { NotebookPanel } from '@jupyterlab/notebook';

import { submitCell } from './api';
import { hasMagicHeader, choiceToOverrides, IRunChoice } from './header';
import { IJob, ISubmitCell } from './model';
import { JOB_MIME_TYPE } from './tokens';

function activeCodeCell(panel: NotebookPanel): CodeCell | null {
  const cell = panel.content.activeCell;
  return cell instanceof CodeCell ? cell : null;
}

/** The source to run: every selected code cell (or just the active one), joined. */
export function selectedSource(panel: NotebookPanel): string {
  const notebook = panel.content;
  return notebook.widgets
    .filter(
      cell => cell instanceof CodeCell && notebook.isSelectedOrActive(cell)
    )
    .map(cell => cell.model.sharedModel.getSource())
    .join('\n');
}

export function jobOutput(job: IJob): nbformat.IDisplayData {
  return {
    output_type: 'display_data',
    data: {
      [JOB_MIME_TYPE]: { job_id: job.id },
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

/**
 * Submits and shows the job in the active cell's output. Returns the job, or null when the
 * server refused it (the reason is then in the output). `choice` is used only when the cell
 * has no header.
 */
export async function runCellDistributed(
  panel: NotebookPanel,
  choice: IRunChoice
): Promise<IJob | null> {
  const target = activeCodeCell(panel);
  if (!target) {
    return null;
  }
  const cell = selectedSource(panel);
  const body: ISubmitCell = {
    cell,
    cwd: PathExt.dirname(panel.context.localPath)
  };
  if (!hasMagicHeader(cell)) {
    body.overrides = choiceToOverrides(choice);
  }
  const outputs = target.model.outputs;
  outputs.clear();
  try {
    const job = await submitCell(body);
    outputs.add(jobOutput(job));
    return job;
  } catch (error) {
    outputs.add(errorOutput((error as Error).message));
    return null;
  }
}
