/** What the UI specs share. */

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
