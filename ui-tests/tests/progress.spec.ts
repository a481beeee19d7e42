import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';
import { serverExtensionPresent } from './helpers';

const RUN_BUTTON =
  '.jp-NotebookPanel-toolbar [data-command="distrun:run-cell"]';
const SCREENSHOTS = path.resolve(__dirname, '..', '..', 'docs', 'screenshots');
const STEPS = 12;

// A real tqdm loop (tqdm from PyPI) on 2 replicas, after one line coloured red, as a logging
// handler would colour it.
const TQDM_CELL = `%framework=generic
%worker=2
import sys, time
from tqdm import tqdm

print("\\x1b[31mERROR\\x1b[0m this word is red", flush=True)
for step in tqdm(range(${STEPS}), desc="train", file=sys.stdout, mininterval=0, ascii=True):
    time.sleep(0.6)
print("done", flush=True)
`;

async function setActiveCellSource(
  page: IJupyterLabPageFixture,
  source: string
): Promise<void> {
  await page.evaluate(text => {
    const app = (window as any).jupyterapp;
    const cell = app.shell.currentWidget.content.activeCell;
    cell.model.sharedModel.setSource(text);
  }, source);
}

/** Every distinct text the replica's live row showed until `ended` held, sampled. */
async function watchLiveRow(
  live: Locator,
  replica: string,
  ended: () => Promise<boolean>
): Promise<string[]> {
  const seen: string[] = [];
  const row = live.locator(`[data-replica="${replica}"]`);
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline && !(await ended())) {
    const text = (await row.allTextContents())[0];
    if (text && text !== seen[seen.length - 1]) {
      seen.push(text);
    }
    await new Promise(resolve => setTimeout(resolve, 100));
  }
  return seen;
}

/** The step counts (`n/12`) in texts, in order. */
function steps(texts: string[]): number[] {
  return texts
    .map(text => new RegExp(`(\\d+)/${STEPS}`).exec(text))
    .filter((match): match is RegExpExecArray => match !== null)
    .map(match => Number(match[1]));
}

test.use({ viewport: { width: 1280, height: 900 } });

test.describe('Output as training code writes it', () => {
  test('a tqdm bar advances in place in the cell output and the viewer; colours render', async ({
    page,
    request
  }) => {
    expect(
      await serverExtensionPresent(request),
      'the distrun server extension and its local engine must be loaded'
    ).toBe(true);
    test.setTimeout(180_000);
    await page.notebook.createNew();
    await page.notebook.selectCells(0);
    await setActiveCellSource(page, TQDM_CELL);
    fs.mkdirSync(SCREENSHOTS, { recursive: true });
    await page.locator(RUN_BUTTON).click();

    const cell = page.locator('.jp-Cell').first();
    const output = cell.locator('[data-test-id="distrun-job"]');
    const status = output.locator('[data-test-id="distrun-job-status"]');
    await expect(status).toHaveAttribute('data-state', /running|succeeded/, {
      timeout: 60_000
    });
    const jobId = (await output.getAttribute('data-job-id'))!;

    // A picture of the bars being drawn, beside a coloured line.
    await expect(
      output.locator('[data-test-id="distrun-job-live"] pre')
    ).toHaveCount(2, { timeout: 30_000 });
    await expect(
      output.locator('[data-test-id="distrun-job-live"] pre').first()
    ).toContainText(new RegExp(` [4-9]/${STEPS}`), { timeout: 30_000 });
    await cell.screenshot({ path: path.join(SCREENSHOTS, 'progress.png') });

    // The viewer follows the same job meanwhile.
    await page.evaluate(id => {
      (window as any).jupyterapp.commands.execute('distrun:open-logs', { id });
    }, jobId);
    const view = page.locator(
      `.jp-MainAreaWidget [data-test-id="distrun-viewer"][data-job-id="${jobId}"]`
    );
    await expect(view).toBeVisible();

    const ended = async () =>
      (await status.getAttribute('data-state')) === 'succeeded';
    const [inCell, inViewer] = await Promise.all([
      watchLiveRow(
        output.locator('[data-test-id="distrun-job-live"]'),
        'worker-0',
        ended
      ),
      watchLiveRow(
        view.locator('[data-test-id="distrun-viewer-live"]'),
        'worker-1',
        ended
      )
    ]);
    // Each bar was seen advancing while the loop ran: at least three states before its end.
    for (const seen of [inCell, inViewer]) {
      const drawn = steps(seen).filter(step => step < STEPS);
      expect(
        new Set(drawn).size,
        `states seen: ${seen}`
      ).toBeGreaterThanOrEqual(3);
      expect(drawn).toEqual([...drawn].sort((a, b) => a - b));
    }

    // Then its final state, once: a line, not the redraws run together.
    const log = output.locator('[data-test-id="distrun-job-log"]');
    for (const replica of ['worker-0', 'worker-1']) {
      const bars = log.locator(
        `.jp-distrun-chunk pre[data-replica="${replica}"]`,
        { hasText: 'train:' }
      );
      await expect(bars).toHaveCount(1);
      await expect(bars).toContainText(`${STEPS}/${STEPS}`);
      await expect(bars).not.toContainText(`0/${STEPS}`);
    }
    await expect(
      output.locator('[data-test-id="distrun-job-live"] pre')
    ).toHaveCount(0);

    // Colours render as JupyterLab's own cell outputs render them; no escape shows.
    const red = log.locator('pre[data-replica="worker-0"] .ansi-red-fg');
    await expect(red).toHaveText('ERROR');
    const colour = await red.evaluate(node => getComputedStyle(node).color);
    const plain = await log
      .locator('pre[data-replica="worker-0"]')
      .first()
      .evaluate(node => getComputedStyle(node).color);
    expect(colour).toBe('rgb(231, 92, 88)');
    expect(colour).not.toBe(plain);
    await expect(log).not.toContainText('\x1b');
    await expect(log).not.toContainText('[31m');

    // The viewer shows the final bar once too, and the search finds the visible text.
    const rows = view.locator('[data-test-id="distrun-viewer-log"]');
    await expect(
      rows.locator('.jp-distrun-VirtualList-row', {
        hasText: `${STEPS}/${STEPS}`
      })
    ).toHaveCount(2);
    await expect(rows.locator('.ansi-red-fg').first()).toHaveText('ERROR');
    const search = view.locator('[data-test-id="distrun-viewer-search"]');
    await search.fill('ERROR this word');
    await expect(
      view.locator('[data-test-id="distrun-viewer-search-count"]')
    ).toHaveAttribute('data-count', '2');
  });
});
