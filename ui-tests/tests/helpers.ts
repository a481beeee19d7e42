/** What the UI specs share. */

import { IJupyterLabPageFixture } from '@jupyterlab/galata';
import { APIRequestContext, expect, Locator, Page } from '@playwright/test';

/** Whether the server runs the distrun extension (its tests skip, saying why, when not). */
export async function serverExtensionPresent(
  request: APIRequestContext
): Promise<boolean> {
  return (await request.get('distrun/engines')).ok();
}

/** Fails the test, saying why, when the server runs without the distrun extension. */
export async function expectServerExtension(
  request: APIRequestContext
): Promise<void> {
  expect(
    await serverExtensionPresent(request),
    'needs the distrun server extension and its local engine'
  ).toBe(true);
}

/** The job output of the notebook's first cell (the one the specs run). */
export function firstCellJob(page: Page): Locator {
  return page
    .locator('.jp-Cell')
    .first()
    .locator('[data-test-id="distrun-job"]');
}

/** The notebook toolbar's Run distributed button. */
export const RUN_BUTTON =
  '.jp-NotebookPanel-toolbar [data-command="distrun:run-cell"]';

/** Puts `source` in the notebook's first cell and runs it with Run distributed. */
export async function runFirstCell(
  page: IJupyterLabPageFixture,
  source: string
): Promise<void> {
  await page.notebook.setCell(0, 'code', source);
  await page.notebook.selectCells(0);
  await page.locator(RUN_BUTTON).click();
}

/** The log viewer of `jobId` in the main area. */
export function viewer(page: Page, jobId: string): Locator {
  return page.locator(
    `.jp-MainAreaWidget [data-test-id="distrun-viewer"][data-job-id="${jobId}"]`
  );
}

/** Opens the log viewer of `jobId` (its command, as the sidebar does) and returns it. */
export async function openViewer(page: Page, jobId: string): Promise<Locator> {
  await page.evaluate(
    id =>
      (window as any).jupyterapp.commands.execute('distrun:open-logs', { id }),
    jobId
  );
  return viewer(page, jobId);
}

/** Runs `source` in the first cell, waits until its job ends in `state` and opens its viewer. */
export async function runAndOpenViewer(
  page: IJupyterLabPageFixture,
  source: string,
  state = 'succeeded'
): Promise<{ jobId: string; viewer: Locator }> {
  await runFirstCell(page, source);
  const job = firstCellJob(page);
  await expect(
    job.locator('[data-test-id="distrun-job-status"]')
  ).toHaveAttribute('data-state', state, { timeout: 120_000 });
  const jobId = (await job.getAttribute('data-job-id'))!;
  return { jobId, viewer: await openViewer(page, jobId) };
}
