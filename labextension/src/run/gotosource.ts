/**
 * Answers a click on a traceback frame of a job's own code (common/sourceframes.ts), from a
 * cell output or the log viewer: the notebook that shows the job comes to the front with the
 * cursor on the failing line of the cell the job came from, or the shipped file opens there.
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { CodeCell } from '@jupyterlab/cells';
import { PathExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { cellLine, inCell, ISourceFrame } from '../common/sourceframes';
import { jobSourceCells } from './runcell';

/** Brings the job's source to the front, the cursor on the frame's line. */
export async function goToSource(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  frame: ISourceFrame
): Promise<void> {
  const panel = tracker.find(
    candidate => jobSourceCells(candidate, frame.jobId) !== null
  );
  const cells = panel ? jobSourceCells(panel, frame.jobId) : null;
  if (!panel || !cells) {
    throw new Error(
      `no open notebook shows job ${frame.jobId}: open the notebook that ran it`
    );
  }
  if (inCell(frame)) {
    await showCellLine(app, panel, cells, frame.line);
  } else {
    // Shipped files keep their paths relative to the notebook's folder, the job's cwd.
    const path = PathExt.join(PathExt.dirname(panel.context.path), frame.path);
    const opened = await app.commands.execute('docmanager:open', { path });
    putCursor(opened, frame.line);
  }
}

async function showCellLine(
  app: JupyterFrontEnd,
  panel: NotebookPanel,
  cells: CodeCell[],
  line: number
): Promise<void> {
  const sources = cells.map(cell => cell.model.sharedModel.getSource());
  const where = cellLine(sources, line);
  const cell = cells[where.index];
  const notebook = panel.content;
  app.shell.activateById(panel.id);
  notebook.activeCellIndex = notebook.widgets.indexOf(cell);
  notebook.deselectAll();
  await notebook.scrollToCell(cell);
  notebook.mode = 'edit';
  cell.editor?.setCursorPosition({ line: where.line - 1, column: 0 });
  cell.editor?.focus();
}

/** The cursor on `line` of an opened text editor (a file editor's document widget). */
function putCursor(opened: unknown, line: number): void {
  const editor = (
    opened as {
      content?: {
        editor?: {
          setCursorPosition(p: { line: number; column: number }): void;
          focus(): void;
        };
      };
    }
  )?.content?.editor;
  if (editor) {
    const revealed = (opened as { revealed?: Promise<void> }).revealed;
    void Promise.resolve(revealed).then(() => {
      editor.setCursorPosition({ line: line - 1, column: 0 });
      editor.focus();
    });
  }
}
