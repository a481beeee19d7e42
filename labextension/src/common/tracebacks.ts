/**
 * A failed job's tracebacks, each told once with the replicas that printed it (the server
 * groups them: core/tracebacks.py), for the cell under its status line.
 */

import { ITracebackGroup } from './model';
import { ITrans } from './trans';

/** One `<details>` per traceback: its replicas and exception line as the summary. */
export function renderTracebacks(
  groups: ITracebackGroup[],
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
    const body = document.createElement('pre');
    body.textContent = group.lines.join('\n');
    details.append(summary, body);
    return details;
  });
}
