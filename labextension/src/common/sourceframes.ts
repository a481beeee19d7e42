/**
 * Frames of a job's own code in a replica's traceback, as links back to the source: the
 * cell the job came from (its `main.py`, or `main.ipy` when run with IPython) or a file the
 * job shipped with `%files=`.
 *
 * A frame is the job's own when its file is in the job's code directory: `…/<job id>/code/`
 * on the local engine, `/distrun/code/` in a cluster's pods. Header lines are blank lines in
 * `main.py`, so its line numbers are the cell's. A click dispatches `GOTO_SOURCE_EVENT`
 * (bubbling, composed) with the frame; the extension's notebook plugin answers it, so a
 * view needs no reference to the application.
 */

import { plainText } from './ansi';
import { GOTO_SOURCE_EVENT } from './tokens';

export { GOTO_SOURCE_EVENT };

/** The cell's code, as replicas run it: both names are distrun's own (never a shipped file). */
export const CELL_FILES = new Set(['main.py', 'main.ipy']);

export interface ISourceFrame {
  jobId: string;
  /** Relative to the job's code directory: `main.py` is the cell. */
  path: string;
  /** 1-based, in that file. */
  line: number;
}

/** Where in a line the frame's location (`File "…", line N` or IPython's `File …:N`) is. */
export interface IFrameMatch {
  frame: ISourceFrame;
  start: number;
  end: number;
}

const CPYTHON_FRAME = /File "([^"]+)", line (\d+)/;
const IPYTHON_FRAME = /File (\S+?\.i?py):(\d+)/;
const SUPPORT_DIR = '.distrun/';

/** The frame of the job's own code that `text` (a log line, shown text) names, if any. */
export function sourceFrame(text: string, jobId: string): IFrameMatch | null {
  if (!text.includes('File ')) {
    return null; // the common case, cheap: most lines are not frames
  }
  const found = CPYTHON_FRAME.exec(text) ?? IPYTHON_FRAME.exec(text);
  if (!found) {
    return null;
  }
  const path = codePath(found[1], jobId);
  const line = Number(found[2]);
  if (path === null || !Number.isSafeInteger(line) || line < 1) {
    return null;
  }
  return {
    frame: { jobId, path, line },
    start: found.index,
    end: found.index + found[0].length
  };
}

/** `file` relative to the job's code directory, or null when it is not in it. */
export function codePath(file: string, jobId: string): string | null {
  const parts = file.split(/[\\/]/);
  for (let i = parts.length - 2; i >= 0; i--) {
    const inLocalJob = parts[i] === 'code' && parts[i - 1] === jobId;
    const inPod = parts[i] === 'code' && parts[i - 1] === 'distrun' && i === 2;
    if (inLocalJob || inPod) {
      const relative = parts.slice(i + 1).join('/');
      const ownCode = relative && !relative.startsWith(SUPPORT_DIR);
      return ownCode && !relative.split('/').includes('..') ? relative : null;
    }
  }
  return null;
}

/** Whether the frame is in the cell's code (rather than a shipped file). */
export function inCell(frame: ISourceFrame): boolean {
  return CELL_FILES.has(frame.path);
}

/**
 * The cell and its line that line `line` of several cells' sources joined with newlines
 * (how "Run distributed" sends selected cells) falls in; the last cell when past the end.
 */
export function cellLine(
  sources: string[],
  line: number
): { index: number; line: number } {
  let first = 1;
  for (let index = 0; index < sources.length; index++) {
    const count = sources[index].split('\n').length;
    if (line < first + count || index === sources.length - 1) {
      return { index, line: Math.min(line - first + 1, count) };
    }
    first += count;
  }
  return { index: 0, line };
}

/** A link to the frame: a button (keyboard reachable) that asks for the source. */
export function frameLink(text: string, frame: ISourceFrame): HTMLElement {
  const link = document.createElement('button');
  link.type = 'button';
  link.className = 'jp-distrun-frame-link';
  link.textContent = text;
  link.dataset.path = frame.path;
  link.dataset.line = String(frame.line);
  link.title = inCell(frame)
    ? `Go to line ${frame.line} of the job's cell`
    : `Open ${frame.path} at line ${frame.line}`;
  link.addEventListener('click', event => {
    event.stopPropagation();
    link.dispatchEvent(
      new CustomEvent<ISourceFrame>(GOTO_SOURCE_EVENT, {
        bubbles: true,
        composed: true,
        detail: frame
      })
    );
  });
  return link;
}

/**
 * Appends `raw` (a log line) to `node` with its frame's location as a link, and returns
 * true; false (nothing appended) when the line names no frame of the job's own code.
 * Such a line is shown as plain text: tracebacks carry no colours when not on a terminal.
 */
export function appendFrameLine(
  node: HTMLElement,
  raw: string,
  jobId: string
): boolean {
  if (!raw.includes('File ')) {
    return false;
  }
  const text = plainText(raw);
  const match = sourceFrame(text, jobId);
  if (!match) {
    return false;
  }
  node.append(
    text.slice(0, match.start),
    frameLink(text.slice(match.start, match.end), match.frame),
    text.slice(match.end)
  );
  return true;
}
