import { expect, test } from '@jupyterlab/galata';
import {
  firstCellJob,
  RUN_BUTTON,
  runFirstCell,
  serverExtensionPresent
} from './helpers';

// One-line loops: the editor auto-indents typed lines, which would break nested blocks.
const TWO_WORKERS = [
  '%framework=generic',
  '%worker=2',
  'for i in range(3): print("hello", i, flush=True)'
].join('\n');

const SLOW_WORKERS = [
  '%framework=generic',
  '%worker=2',
  'import time',
  'for i in range(300): print("tick", i, flush=True); time.sleep(0.1)'
].join('\n');

test.describe('Run distributed', () => {
  test.beforeEach(async ({ page }) => {
    await page.notebook.createNew();
  });

  test('the notebook toolbar has a Run distributed button', async ({
    page
  }) => {
    await expect(page.locator(RUN_BUTTON)).toBeVisible();
  });

  test('the job list is a tab in the left sidebar', async ({ page }) => {
    await page.locator('.jp-SideBar [data-id="distrun-jobs"]').click();
    await expect(page.locator('#distrun-jobs')).toBeVisible();
    await expect(
      page.locator('[data-test-id="distrun-job-list"]')
    ).toHaveAttribute('data-loading', 'false');
  });

  test('a refused job shows the server error as one line in the cell output', async ({
    page
  }) => {
    await runFirstCell(page, '%framework=nope\nprint(1)');
    const stderr = page
      .locator('.jp-Cell')
      .first()
      .locator(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
      );
    await expect(stderr).toHaveText(/^distrun: [^\n]+\n?$/);
  });

  test('Shift Alt Enter runs the active cell distributed', async ({ page }) => {
    await page.notebook.setCell(0, 'code', '%framework=nope\nprint(1)');
    await page.notebook.selectCells(0);
    await page.keyboard.press('Shift+Alt+Enter');
    const stderr = page
      .locator('.jp-Cell')
      .first()
      .locator(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
      );
    await expect(stderr).toHaveText(/^distrun: [^\n]+\n?$/);
  });

  test('a generic job streams both workers into the cell and succeeds', async ({
    page,
    request
  }) => {
    expect(
      await serverExtensionPresent(request),
      'needs the distrun server extension and its local engine'
    ).toBe(true);
    await runFirstCell(page, TWO_WORKERS);
    const job = firstCellJob(page);
    await expect(
      job.locator('[data-test-id="distrun-job-status"]')
    ).toHaveAttribute('data-state', 'succeeded', { timeout: 60_000 });
    const log = job.locator('[data-test-id="distrun-job-log"]');
    for (const worker of ['worker-0', 'worker-1']) {
      for (const i of [0, 1, 2]) {
        await expect(log).toContainText(`${worker} | hello ${i}`);
      }
    }
    await expect(job.locator('[data-test-id="distrun-job-stop"]')).toBeHidden();
  });

  test('running the unchanged cell again replaces its job output with the new job', async ({
    page,
    request
  }) => {
    expect(
      await serverExtensionPresent(request),
      'needs the distrun server extension and its local engine'
    ).toBe(true);
    await runFirstCell(page, TWO_WORKERS);
    const jobs = firstCellJob(page);
    const seen: string[] = [];
    for (const again of ['button', 'key']) {
      await expect(
        jobs.locator('[data-test-id="distrun-job-status"]')
      ).toHaveAttribute('data-state', 'succeeded', { timeout: 60_000 });
      seen.push((await jobs.getAttribute('data-job-id'))!);
      if (again === 'button') {
        await page.locator(RUN_BUTTON).click();
      } else {
        await page.notebook.selectCells(0);
        await page.keyboard.press('Shift+Alt+Enter');
      }
      // One output, the new job's, whatever the order the old one went and the answer came.
      await expect(jobs).toHaveCount(1);
      await expect(jobs).not.toHaveAttribute(
        'data-job-id',
        seen[seen.length - 1]
      );
    }
    await expect(
      jobs.locator('[data-test-id="distrun-job-status"]')
    ).toHaveAttribute('data-state', 'succeeded', { timeout: 60_000 });
    await expect(
      jobs.locator('[data-test-id="distrun-job-log"]')
    ).toContainText('worker-1 | hello 2');
    expect(new Set(seen).size).toBe(2);
  });

  test('after a reload the output reattaches to the job', async ({
    page,
    request,
    tmpPath
  }) => {
    expect(
      await serverExtensionPresent(request),
      'needs the distrun server extension and its local engine'
    ).toBe(true);
    await runFirstCell(page, TWO_WORKERS);
    const status =
      '[data-test-id="distrun-job"] [data-test-id="distrun-job-status"]';
    await expect(page.locator(status)).toHaveAttribute(
      'data-state',
      'succeeded',
      { timeout: 60_000 }
    );
    await page.notebook.save();
    await page.reload({ waitForIsReady: false });
    await page.evaluate(() => (window as any).jupyterapp.restored);
    // The restored layout usually reopens the notebook; open it when it did not.
    if (!(await page.notebook.isOpen('Untitled.ipynb'))) {
      await page.notebook.openByPath(`${tmpPath}/Untitled.ipynb`);
    }
    await expect(page.locator(status)).toHaveAttribute(
      'data-state',
      'succeeded',
      { timeout: 60_000 }
    );
    await expect(
      page.locator('[data-test-id="distrun-job-log"]')
    ).toContainText('worker-1 | hello 2');
  });

  test('the stop button cancels a running job', async ({ page, request }) => {
    expect(
      await serverExtensionPresent(request),
      'needs the distrun server extension and its local engine'
    ).toBe(true);
    await runFirstCell(page, SLOW_WORKERS);
    const job = firstCellJob(page);
    const status = job.locator('[data-test-id="distrun-job-status"]');
    await expect(status).toHaveAttribute('data-state', 'running', {
      timeout: 60_000
    });
    await expect(job.locator('[data-test-id="distrun-job-log"]')).toContainText(
      'worker-1 | tick 0'
    );
    await job.locator('[data-test-id="distrun-job-stop"]').click();
    await expect(status).toHaveAttribute('data-state', 'cancelled', {
      timeout: 60_000
    });
  });

  test('the sidebar lists the job newest first with its state', async ({
    page,
    request
  }) => {
    expect(
      await serverExtensionPresent(request),
      'needs the distrun server extension and its local engine'
    ).toBe(true);
    await runFirstCell(page, TWO_WORKERS);
    const jobId = await page
      .locator('[data-test-id="distrun-job"]')
      .getAttribute('data-job-id');
    await page.locator('.jp-SideBar [data-id="distrun-jobs"]').click();
    const first = page.locator('#distrun-jobs .jp-distrun-JobCard').first();
    await expect(first).toHaveAttribute('data-job-id', jobId!);
    await expect(first).toHaveAttribute('data-state', 'succeeded', {
      timeout: 60_000
    });
    await expect(first).toContainText('generic · 2 replicas');
  });
});
