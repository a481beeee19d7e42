/**
 * "Run distributed" on a sweep cell: the notebook's kernel runs the sweep (distrun's kernel
 * magic, loaded quietly first), so the cell shows the sweep's progress and results table, and
 * interrupting the kernel cancels its trials, as for a sweep run from the magic by hand. The
 * trials are ordinary jobs of this server: the sidebar lists them as one sweep.
 */

import { NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

export const LOAD_MAGIC = '%load_ext distrun.kernel_magic';

/** Runs the selected cells in the kernel; null when it did, else why it could not. */
export async function runSweepInKernel(
  panel: NotebookPanel
): Promise<string | null> {
  const context = panel.sessionContext;
  await context.ready;
  const kernel = context.session?.kernel;
  if (!kernel) {
    return 'the notebook has no kernel to run the sweep: start one, then run the cell again';
  }
  const reply = await kernel.requestExecute({
    code: LOAD_MAGIC,
    silent: true,
    store_history: false
  }).done;
  if (reply.content.status !== 'ok') {
    const reason =
      reply.content.status === 'error'
        ? `${reply.content.ename}: ${reply.content.evalue}`
        : reply.content.status;
    return (
      `the kernel cannot load distrun's magic to run the sweep (${reason}); ` +
      "install distrun in the kernel's environment (pip install distrun)"
    );
  }
  await NotebookActions.run(panel.content, context);
  return null;
}
