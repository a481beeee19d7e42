import { expect, test } from '@jupyterlab/galata';
import {
  expectServerExtension,
  firstCellJob,
  openViewer,
  runAndOpenViewer,
  runFirstCell
} from './helpers';

// Line 4 of the cell fails (its header lines count: they are blank lines in main.py).
const FAILING = [
  '%framework=generic',
  '%worker=2',
  'batch = 7',
  'raise ValueError(f"bad batch {batch}")'
].join('\n');

// One-line loop: the editor auto-indents typed lines. 16 MiB more every 0.2 s for 8 s, under a
// requested limit of 2 GiB, drawn on the memory chart.
const GROWING = [
  '%framework=generic',
  '%worker=1;%memory=2Gi',
  'import time',
  'kept = []',
  'for i in range(40): kept.append(bytearray(16 << 20)); print("step", i, flush=True); time.sleep(0.2)'
].join('\n');

// torch's SummaryWriter, as training code writes it. TensorBoard's switch to its TensorFlow
// stub first: TensorFlow is installed here too, and it aborts beside torch (observability.md).
const SUMMARY_WRITER = [
  '%framework=pytorch',
  '%worker=1',
  'import os, sys, types',
  'sys.modules["tensorboard.compat.notf"] = types.ModuleType("notf")',
  'from torch.utils.tensorboard import SummaryWriter',
  'writer = SummaryWriter(os.environ["DISTRUN_TENSORBOARD_DIR"])',
  'for step in range(6): writer.add_scalar("train/loss", 1.0 / (step + 1), step)',
  'writer.close()',
  'print("written", flush=True)'
].join('\n');

// 175 MiB held (bytes written, so resident) for 20 s under a 200 MiB limit: past 90 % of it.
const NEAR_LIMIT = [
  '%framework=generic',
  '%worker=1;%memory=200Mi',
  'import time',
  'held = b"x" * (175 << 20)',
  'print("holding", flush=True)',
  'time.sleep(20)'
].join('\n');

// Every replica fails on the first run of the job (DISTRUN_RESTART 0), and succeeds on the next,
// saving a checkpoint of step 5; a job that resumes from it says where it started.
const FAILS_ONCE = [
  '%framework=generic',
  '%worker=2',
  '%restart=job',
  '%maxRestarts=2',
  'import os, sys',
  'from distrun import checkpoint',
  'if os.environ["DISTRUN_RESTART"] == "0": sys.exit(3)',
  'print("starts at", (checkpoint.load() or {"step": 0})["step"], flush=True)',
  'checkpoint.save({"step": 5}, step=5)'
].join('\n');

test.describe('Seeing what replicas do', () => {
  test.beforeEach(async ({ page, request }) => {
    await expectServerExtension(request);
    await page.notebook.createNew();
  });

  test("a traceback frame puts the cursor on the cell's failing line", async ({
    page
  }) => {
    await runFirstCell(page, FAILING);
    await page.notebook.addCell('code', 'print("another cell")');
    const job = firstCellJob(page);
    await expect(
      job.locator('[data-test-id="distrun-job-status"]')
    ).toHaveAttribute('data-state', 'failed', { timeout: 60_000 });
    const link = job.locator(
      '[data-test-id="distrun-job-tracebacks"] summary .jp-distrun-frame-link'
    );
    await expect(link).toHaveText('line 4');
    const cursor = () =>
      page.evaluate(() => {
        const notebook = (window as any).jupyterapp.shell.currentWidget.content;
        return {
          cell: notebook.activeCellIndex,
          line: notebook.activeCell.editor.getCursorPosition().line,
          mode: notebook.mode
        };
      });
    const failingLine = { cell: 0, line: 3, mode: 'edit' };
    // Elsewhere first, so the click has somewhere to go from.
    await page.notebook.selectCells(1);
    await link.click();
    await expect.poll(cursor).toEqual(failingLine);

    // The same frame in the log viewer's lines brings the notebook back to that line.
    await page.notebook.selectCells(1);
    const jobId = await job.getAttribute('data-job-id');
    const viewer = await openViewer(page, jobId!);
    await viewer
      .locator('.jp-distrun-frame-link', { hasText: 'line 4' })
      .first()
      .click();
    await expect.poll(cursor).toEqual(failingLine);
  });

  test('the usage gauges move while a job runs', async ({ page }) => {
    await runFirstCell(page, GROWING);
    const job = firstCellJob(page);
    const gauge = job.locator(
      '[data-test-id="distrun-job-usage"] .jp-distrun-usage-gauge[data-replica="worker-0"]'
    );
    const seen = new Set<string>();
    await expect
      .poll(
        async () => {
          // "worker-0 12% · 85.3 MiB": the memory it holds
          const text = await gauge
            .textContent({ timeout: 1000 })
            .catch(() => '');
          seen.add(text?.split('·')[1] ?? '');
          seen.delete('');
          return seen.size;
        },
        { timeout: 60_000, intervals: [500] }
      )
      .toBeGreaterThanOrEqual(3);
    // The log viewer's Usage tab plots the same samples, memory per replica over time.
    const jobId = await job.getAttribute('data-job-id');
    const viewer = await openViewer(page, jobId!);
    await viewer.locator('[data-test-id="distrun-viewer-tab-usage"]').click();
    // One chart per measure, one above the other: CPU and memory at least (GPU where NVML is).
    const charts = viewer.locator(
      '[data-test-id="distrun-viewer-usage-chart"]'
    );
    await expect
      .poll(() => charts.count(), { timeout: 30_000 })
      .toBeGreaterThanOrEqual(2);
    await expect(
      viewer.locator(
        '[data-test-id="distrun-viewer-usage-chart"][data-measure="CPU (%, 100 = one core)"] .uplot canvas'
      )
    ).toHaveCount(1);
    const usageChart = viewer.locator(
      '[data-test-id="distrun-viewer-usage-chart"][data-measure="memory (MiB, resident)"]'
    );
    const row = usageChart.locator('.u-legend [data-series="worker-0"]');
    await expect
      .poll(async () => Number(await row.getAttribute('data-points')), {
        timeout: 30_000
      })
      .toBeGreaterThanOrEqual(3);
    // Its latest resident memory in MiB, and the role's limit drawn across the chart.
    await expect(row.locator('.u-value')).toHaveText(/^\d+(\.\d+)?$/);
    await expect(usageChart).toHaveAttribute('data-limits', 'worker limit');
    await expect(
      job.locator('[data-test-id="distrun-job-status"]')
    ).toHaveAttribute('data-state', 'succeeded', { timeout: 60_000 });
  });

  test('a replica near its memory limit is marked in the cell', async ({
    page
  }) => {
    await runFirstCell(page, NEAR_LIMIT);
    const gauge = firstCellJob(page).locator(
      '[data-test-id="distrun-job-usage"] .jp-distrun-usage-gauge[data-replica="worker-0"]'
    );
    await expect(gauge).toHaveAttribute('data-warning', 'memory', {
      timeout: 60_000
    });
    await expect(gauge).toContainText('of 200 MiB');
  });

  test("a real SummaryWriter's scalars are plotted in the Metrics tab", async ({
    page
  }) => {
    // A job, then TensorBoard's start through the proxy (up to 90 s on a loaded machine).
    test.setTimeout(180_000);
    const { viewer } = await runAndOpenViewer(page, SUMMARY_WRITER);
    await viewer.locator('[data-test-id="distrun-viewer-tab-metrics"]').click();
    const metric = viewer.locator('[data-test-id="distrun-viewer-metric"]');
    await expect(metric.locator('option')).toContainText([
      'train/loss (TensorBoard)'
    ]);
    await metric.selectOption('train/loss (TensorBoard)');
    const chart = viewer.locator('[data-test-id="distrun-viewer-chart"]');
    for (const replica of ['master-0', 'worker-0']) {
      await expect(
        chart.locator(`.u-legend [data-series="${replica}"]`)
      ).toHaveAttribute('data-points', '6');
    }

    // TensorBoard itself on the same scalars, through the server's proxy, in a new tab.
    const popup = page.waitForEvent('popup');
    await viewer.locator('[data-test-id="distrun-viewer-tensorboard"]').click();
    const board = await popup;
    await board.waitForURL(/\/proxy\/\d+\/$/, { timeout: 90_000 });
    await expect(board).toHaveTitle('TensorBoard', { timeout: 30_000 });
    await board.close();
  });

  test('the Timeline tab shows each attempt and why the first one ended', async ({
    page
  }) => {
    const { jobId, viewer } = await runAndOpenViewer(page, FAILS_ONCE);
    await viewer
      .locator('[data-test-id="distrun-viewer-tab-timeline"]')
      .click();
    const timeline = viewer.locator('[data-test-id="distrun-viewer-timeline"]');
    const attempts = timeline.locator('.jp-distrun-Timeline-attempt');
    await expect(attempts).toHaveCount(2);
    await expect(attempts.nth(0)).toHaveAttribute('data-outcome', 'failed');
    await expect(attempts.nth(1)).toHaveAttribute('data-outcome', 'succeeded');
    const events = timeline.locator(
      '[data-test-id="distrun-viewer-timeline-event"]'
    );
    const kinds = await events.evaluateAll(rows =>
      rows.map(row => (row as HTMLElement).dataset.kind)
    );
    expect(kinds).toEqual([
      'submitted',
      'started',
      'failed',
      'restarting',
      'started',
      'ended'
    ]);
    await expect(events.nth(2)).toContainText(/worker-\d .*exit code 3/);
    await expect(events.nth(4)).toContainText('attempt 2');

    // Run again, resuming: a new job whose checkpoints start as this one's ended.
    await viewer.locator('[data-test-id="distrun-viewer-resume"]').click();
    const resumed = page.locator(
      `.jp-MainAreaWidget [data-test-id="distrun-viewer"]:not([data-job-id="${jobId}"])`
    );
    await expect(resumed).toBeVisible({ timeout: 30_000 });
    await expect(
      resumed.locator('[data-test-id="distrun-viewer-status"]')
    ).toHaveAttribute('data-state', 'succeeded', { timeout: 90_000 });
    await expect(
      resumed.locator('[data-test-id="distrun-viewer-log"]')
    ).toContainText('starts at 5');
    await resumed.locator('[data-test-id="distrun-viewer-tab-spec"]').click();
    await expect(
      resumed.locator('[data-test-id="distrun-viewer-spec"]')
    ).toContainText(`%resumeFrom=${jobId}`);
  });
});
