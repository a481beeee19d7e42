/**
 * A real sweep through the browser: six trials of a PyTorch DDP job (a master and a worker
 * each, gloo) on the local engine, two at a time, started with Run distributed; the cell shows
 * the sweep's progress and results, the sidebar one sweep entry, the sweep view the best
 * trial; the best runs again on its own, and two trials compare side by side.
 */

import * as fs from 'fs';
import * as path from 'path';

import { expect, test } from '@jupyterlab/galata';
import { expectServerExtension } from './helpers';

const RUN_BUTTON =
  '.jp-NotebookPanel-toolbar [data-command="distrun:run-cell"]';
const NOTEBOOK = 'sweep-ui.ipynb';

// The same cell as the training tier's sweep test and the example users copy.
const SWEEP_CELL = fs.readFileSync(
  path.join(__dirname, '..', '..', 'examples', 'sweep_lr.ipy'),
  'utf-8'
);

test.describe('Sweeps', () => {
  test.setTimeout(600_000);

  test('a DDP sweep runs from the cell, finds the best trial, runs it again and compares', async ({
    page,
    request,
    tmpPath
  }) => {
    await expectServerExtension(request);
    const put = await request.put(`api/contents/${tmpPath}/${NOTEBOOK}`, {
      data: {
        type: 'notebook',
        format: 'json',
        content: {
          nbformat: 4,
          nbformat_minor: 5,
          metadata: {
            kernelspec: {
              name: 'python3',
              display_name: 'Python 3',
              language: 'python'
            }
          },
          cells: [
            {
              cell_type: 'code',
              id: 'sweep',
              source: SWEEP_CELL,
              metadata: {},
              outputs: [],
              execution_count: null
            }
          ]
        }
      }
    });
    expect(put.ok()).toBe(true);
    await page.notebook.open(NOTEBOOK);
    await page.notebook.selectCells(0);
    await page.locator(RUN_BUTTON).click();

    // The cell: the sweep's progress, then its table with the best trial marked.
    const output = page.locator('.jp-Cell').first().locator('.jp-OutputArea');
    await expect(output).toContainText('[distrun] sweep', { timeout: 120_000 });
    await expect(output).toContainText('6/6 done', { timeout: 480_000 });
    await expect(output).toContainText(/\*\s+#0\s+0\.3\s+succeeded/);

    // The sidebar: one entry for the sweep, expanding to its six trials.
    await page.sidebar.openTab('distrun-jobs');
    const card = page.locator('#distrun-jobs .jp-distrun-SweepCard').first();
    await expect(card).toContainText('6 trials');
    const sweepId = await card.getAttribute('data-sweep-id');
    await card.locator('[data-test-id="distrun-sweep-toggle"]').click();
    const trials = card.locator(
      '.jp-distrun-SweepCard-trials .jp-distrun-JobCard'
    );
    await expect(trials).toHaveCount(6);

    // The sweep view: every trial, the best marked, stopped ones said, every trial charted.
    await card.locator('.jp-distrun-JobCard-name').first().click();
    const view = page.locator(`#distrun-sweep-${sweepId}`);
    await expect(view).toHaveAttribute('data-ended', 'true', {
      timeout: 30_000
    });
    const rows = view.locator('[data-test-id="distrun-sweep-table"] tbody tr');
    await expect(rows).toHaveCount(6);
    await expect(view.locator('tr[data-best="true"]')).toHaveAttribute(
      'data-trial',
      '0'
    );
    await expect(
      view.locator('tr [data-state="stopped"]').first()
    ).toBeVisible();
    await expect(
      view.locator('[data-test-id="distrun-runs-chart"]')
    ).toHaveAttribute('data-series', '6');
    await expect(
      view.locator('[data-test-id="distrun-sweep-progress"]')
    ).toContainText('best #0 loss=');
    // Sorted by the objective, highest first: the best trial comes last.
    const sortByLoss = view.locator('button[data-column="objective"]');
    await sortByLoss.click();
    await expect(rows.first()).toHaveAttribute('data-trial', '0');
    await sortByLoss.click();
    await expect(rows.last()).toHaveAttribute('data-trial', '0');

    // A trial's row opens its logs.
    const bestJob = await view
      .locator('tr[data-best="true"]')
      .getAttribute('data-job-id');
    await view.locator('tr[data-best="true"]').click();
    await expect(
      page.locator(`[id="distrun-logs-${bestJob}"]`).first()
    ).toBeVisible();

    // Run the best again: a job of its own with the best parameters, not a trial.
    await page
      .locator('.lm-TabBar-tab', { hasText: `Sweep ${sweepId}` })
      .click();
    const alone = async (): Promise<string[]> => {
      const { jobs } = await (await request.get('distrun/jobs')).json();
      return jobs
        .filter(
          (job: any) =>
            !job.spec.env.DISTRUN_SWEEP &&
            job.spec.env.DISTRUN_PARAMS === '{"lr":0.3}'
        )
        .map((job: any) => job.id);
    };
    const before = await alone();
    await view.locator('[data-test-id="distrun-sweep-rerun-best"]').click();
    await expect
      .poll(async () => (await alone()).length, { timeout: 30_000 })
      .toBe(before.length + 1);

    // Two trials side by side: their losses on one chart, the rate as the spec's difference.
    await page.sidebar.openTab('distrun-jobs');
    const boxes = page.locator(
      '#distrun-jobs .jp-distrun-SweepCard-trials [data-test-id="distrun-select"]'
    );
    await boxes.nth(0).check();
    await boxes.nth(1).check();
    await page.locator('[data-test-id="distrun-compare"]').click();
    const compare = page.locator('[data-test-id="distrun-compare-view"]');
    await expect(
      compare.locator('[data-test-id="distrun-runs-chart"]')
    ).toHaveAttribute('data-series', '2');
    await expect(
      compare.locator(
        '[data-test-id="distrun-compare-spec"] tr[data-field="env.DISTRUN_PARAM_LR"]'
      )
    ).toBeVisible();
  });
});
