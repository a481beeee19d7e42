/**
 * A failed job's tracebacks, each told once with the replicas that printed it (the server
 * groups them: core/tracebacks.py), for the cell under its status line. Frames of the job's
 * own code are links to the cell's line (common/sourceframes.ts); the summary links the
 * innermost of them, where the error is in the cell.
 */

import { ITracebackGroup } from './model';
import {
  appendFrameLine,
  frameLink,
  inCell,
  ISourceFrame,
  sourceFrame
} from './sourceframes';
import { ITrans } from './trans';

/** One `<details>` per traceback: its replicas and exception line as the summary. */
export function renderTracebacks(
  groups: ITracebackGroup[],
  jobId: string,
  trans: ITrans
): HTMLElement[] {
  return groups.map(group => {
    const details = document.createElement('details');
    details.className = 'jp-distrun-traceback';
    details.dataset.replicas = group.replicas.join(',');
    const summary = document.createElement('summary');
    summary.textContent = trans.__(
      '%1: %2',
      group.replicas.join(', '),
      group.lines[group.lines.length - 1] ?? ''
    );
    const innermost = innermostFrame(group.lines, jobId);
    if (innermost) {
      const where = inCell(innermost)
        ? trans.__('line %1', innermost.line)
        : trans.__('%1, line %2', innermost.path, innermost.line);
      summary.append(' (', frameLink(where, innermost), ')');
    }
    const body = document.createElement('pre');
    group.lines.forEach((line, index) => {
      if (index) {
        body.append('\n');
      }
      if (!appendFrameLine(body, line, jobId)) {
        body.append(line);
      }
    });
    details.append(summary, body);
    return details;
  });
}

function innermostFrame(lines: string[], jobId: string): ISourceFrame | null {
  for (let i = lines.length - 1; i >= 0; i--) {
    const match = sourceFrame(lines[i], jobId);
    if (match) {
      return match.frame;
    }
  }
  return null;
}
