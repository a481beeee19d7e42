/**
 * The log websocket's runs (each replica's lines in columns, cheap for the server to encode
 * and for the page to parse) as the lines the views show, in capture order.
 */

import { ILineRun, LogTuple } from './model';

/** Every run's lines, merged by capture time; a replica's lines stay in seq order. */
export function linesOfRuns(runs: readonly ILineRun[]): LogTuple[] {
  const lines: LogTuple[] = [];
  for (const run of runs) {
    for (let i = 0; i < run.texts.length; i++) {
      lines.push([
        run.replica,
        run.seq + i,
        run.times_ms[i] / 1000,
        run.texts[i]
      ]);
    }
  }
  if (runs.length > 1) {
    lines.sort((a, b) => a[2] - b[2]); // stable
  }
  return lines;
}
