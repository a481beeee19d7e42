/**
 * A Run distributed click's way to its first line, as marks in the page's performance
 * timeline (devtools' Performance panel shows them; benchmarks/browser reads them): the
 * submit, its answer, the log stream open, its first lines, their first paint. Each mark's
 * `detail` names its job where the job is known.
 */

export type TraceStage =
  'submit' | 'submitted' | 'stream-open' | 'first-lines' | 'first-paint';

export function traceMark(stage: TraceStage, jobId?: string): void {
  performance.mark(`distrun:${stage}`, { detail: { jobId } });
}
