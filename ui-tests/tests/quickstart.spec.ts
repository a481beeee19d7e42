import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { APIRequestContext, Locator } from '@playwright/test';
import * as path from 'path';
import { serverExtensionPresent } from './helpers';

const NOTEBOOK = 'distrun-quickstart.ipynb';
const NOTEBOOK_SOURCE = path.resolve(
  __dirname,
  '..',
  '..',
  'examples',
  NOTEBOOK
);
const RUN_BUTTON =
  '.jp-NotebookPanel-toolbar [data-command="distrun:run-cell"]';
// The example's `%framework=pytorch / %master=1 / %worker=2` DDP cell.
const PYTORCH_CELL = 3;
const REPLICAS = ['master-0', 'worker-0', 'worker-1'];

function byTestId(scope: Locator, id: string): Locator {
  return scope.locator(`[data-test-id="${id}"]`);
}

function cellJob(page: IJupyterLabPageFixture): Locator {
  return page
    .locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')
    .nth(PYTORCH_CELL)
    .locator('[data-test-id="distrun-job"]');
}

async function jobState(
  request: APIRequestContext,
  jobId: string
): Promise<string> {
  return (await (await request.get(`distrun/jobs/${jobId}`)).json()).state;
}

test.use({ viewport: { width: 1280, height: 800 } });

test('the example notebook: a PyTorch DDP cell runs distributed, survives a reload, and is charted', async ({
  page,
  request,
  tmpPath
}) => {
  expect(
    await serverExtensionPresent(request),
    'needs the distrun server extension and its local engine'
  ).toBe(true);
  test.setTimeout(360_000);
  expect(
    await page.contents.uploadFile(NOTEBOOK_SOURCE, `${tmpPath}/${NOTEBOOK}`)
  ).toBe(true);
  expect(await page.notebook.openByPath(`${tmpPath}/${NOTEBOOK}`)).toBe(true);
  await expect(
    page.locator('.jp-Cell').nth(PYTORCH_CELL).locator('.jp-InputArea')
  ).toContainText('%framework=pytorch');
  await page.notebook.selectCells(PYTORCH_CELL);
  await page.locator(RUN_BUTTON).click();

  // The cell carries its header: no form, the job starts.
  const job = cellJob(page);
  await expect(job).toHaveAttribute('data-job-id', /.+/, { timeout: 30_000 });
  const jobId = (await job.getAttribute('data-job-id'))!;
  await expect(byTestId(job, 'distrun-job-status')).toHaveAttribute(
    'data-state',
    'running',
    { timeout: 60_000 }
  );

  // Reload while the replicas are still importing torch / training.
  await page.notebook.save();
  expect(await jobState(request, jobId)).toBe('running');
  await page.reload({ waitForIsReady: false });
  await page.evaluate(() => (window as any).jupyterapp.restored);
  if (!(await page.notebook.isOpen(NOTEBOOK))) {
    await page.notebook.openByPath(`${tmpPath}/${NOTEBOOK}`);
  }

  // The output reattaches to the same job and streams it to the end.
  const reattached = cellJob(page);
  await expect(reattached).toHaveAttribute('data-job-id', jobId, {
    timeout: 60_000
  });
  const status = byTestId(reattached, 'distrun-job-status');
  await expect(status).toHaveAttribute('data-state', 'succeeded', {
    timeout: 240_000
  });
  const log = byTestId(reattached, 'distrun-job-log');
  for (const replica of REPLICAS) {
    await expect(log).toContainText(`${replica} | step 0 loss=`);
    await expect(log).toContainText(`${replica} | weights_sha=`);
  }
  // DDP averaged the gradients: every replica ends with the same weights.
  const shas = new Set(
    ((await log.textContent()) ?? '').match(/weights_sha=[0-9a-f]{64}/g)
  );
  expect(shas.size).toBe(1);

  // The sidebar lists it; selecting it opens the viewer with the same three replicas.
  await page.locator('.jp-SideBar [data-id="distrun-jobs"]').click();
  const card = page.locator(
    `#distrun-jobs .jp-distrun-JobCard[data-job-id="${jobId}"]`
  );
  await expect(card).toHaveAttribute('data-state', 'succeeded', {
    timeout: 30_000
  });
  await card.locator('.jp-distrun-JobCard-name').click();
  const view = page.locator(
    `.jp-MainAreaWidget [data-test-id="distrun-viewer"][data-job-id="${jobId}"]`
  );
  await expect(view).toBeVisible();
  await expect(byTestId(view, 'distrun-viewer-status')).toHaveAttribute(
    'data-state',
    'succeeded',
    { timeout: 60_000 }
  );
  await expect(
    view.locator('[data-test-id="distrun-viewer-replica"]')
  ).toHaveCount(REPLICAS.length);
  const rows = byTestId(view, 'distrun-viewer-log');
  for (const replica of REPLICAS) {
    await expect(
      view.locator(
        `[data-test-id="distrun-viewer-replica"][data-replica="${replica}"]`
      )
    ).toHaveCount(1);
    await expect(
      rows.locator(`.jp-distrun-VirtualList-row[data-replica="${replica}"]`)
    ).not.toHaveCount(0);
  }

  // The Metrics tab plots loss: one point per `step N loss=` line of each replica.
  const text = await (await request.get(`distrun/jobs/${jobId}/logs`)).text();
  await byTestId(view, 'distrun-viewer-tab-metrics').click();
  await expect(byTestId(view, 'distrun-viewer-metric')).toHaveValue('loss');
  const chart = byTestId(view, 'distrun-viewer-chart');
  for (const replica of REPLICAS) {
    const steps = text
      .split('\n')
      .filter(line =>
        new RegExp(`^${replica} *\\| step \\d+ loss=`).test(line)
      );
    expect(steps.length).toBeGreaterThan(1);
    await expect(
      chart.locator(`.u-legend [data-series="${replica}"]`)
    ).toHaveAttribute('data-points', String(steps.length));
  }
});
