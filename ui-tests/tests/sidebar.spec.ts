import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { runFirstCell, serverExtensionPresent } from './helpers';

const JOB = '.jp-Cell >> nth=0 >> [data-test-id="distrun-job"]';

const THREE_SLOW_WORKERS = [
  '%framework=generic',
  '%worker=3',
  'import time',
  'for i in range(600): print("tick", i, flush=True); time.sleep(0.1)'
].join('\n');

const QUICK = '%framework=generic\n%worker=1\nprint("done", flush=True)';

/** Runs the first cell from the toolbar; returns the job id once the output shows it. */
async function runFirstCellJob(
  page: IJupyterLabPageFixture,
  source: string
): Promise<string> {
  await runFirstCell(page, source);
  const job = page.locator(JOB);
  await expect(job).toHaveAttribute('data-job-id', /.+/);
  return (await job.getAttribute('data-job-id'))!;
}

async function openSidebar(page: IJupyterLabPageFixture): Promise<void> {
  await page.locator('.jp-SideBar [data-id="distrun-jobs"]').click();
  await expect(page.locator('#distrun-jobs')).toBeVisible();
}

function card(page: IJupyterLabPageFixture, jobId: string) {
  return page.locator(
    `#distrun-jobs .jp-distrun-JobCard[data-job-id="${jobId}"]`
  );
}

test.describe('The job sidebar', () => {
  test.beforeEach(async ({ page, request }) => {
    expect(
      await serverExtensionPresent(request),
      'needs the distrun server extension and its local engine'
    ).toBe(true);
    await page.notebook.createNew();
  });

  test('cancel stops every replica of a running 3-replica job', async ({
    page,
    request
  }) => {
    const jobId = await runFirstCellJob(page, THREE_SLOW_WORKERS);
    const log = page.locator(`${JOB} >> [data-test-id="distrun-job-log"]`);
    for (const worker of ['worker-0', 'worker-1', 'worker-2']) {
      await expect(log).toContainText(`${worker} | tick 0`, {
        timeout: 60_000
      });
    }
    await openSidebar(page);
    await expect(card(page, jobId)).toHaveAttribute('data-state', 'running');
    await card(page, jobId).locator('[data-test-id="distrun-cancel"]').click();
    await expect(card(page, jobId)).toHaveAttribute('data-state', 'cancelled', {
      timeout: 60_000
    });

    const job = await (await request.get(`distrun/jobs/${jobId}`)).json();
    expect(job.state).toBe('cancelled');
    expect(job.replicas.map((r: any) => r.name)).toEqual([
      'worker-0',
      'worker-1',
      'worker-2'
    ]);
    for (const replica of job.replicas) {
      expect(['cancelled', 'failed']).toContain(replica.state);
      expect(replica.finished_at).not.toBeNull();
    }
    // Stopped replicas print nothing more.
    const logs = async () =>
      (await request.get(`distrun/jobs/${jobId}/logs`)).text();
    const before = await logs();
    await page.waitForTimeout(1000);
    expect(await logs()).toBe(before);
  });

  test('delete asks first, then removes the job from the list and the server', async ({
    page,
    request
  }) => {
    const jobId = await runFirstCellJob(page, QUICK);
    await expect(
      page.locator(`${JOB} >> [data-test-id="distrun-job-status"]`)
    ).toHaveAttribute('data-state', 'succeeded', { timeout: 60_000 });
    await openSidebar(page);
    const item = card(page, jobId);
    await expect(item).toBeVisible();

    await item.locator('[data-test-id="distrun-delete"]').click();
    await page.locator('.jp-Dialog .jp-mod-reject').click();
    await expect(page.locator('.jp-Dialog')).toHaveCount(0);
    await expect(item).toBeVisible();

    await item.locator('[data-test-id="distrun-delete"]').click();
    await page.locator('.jp-Dialog .jp-mod-warn').click();
    await expect(item).toHaveCount(0);
    expect((await request.get(`distrun/jobs/${jobId}`)).status()).toBe(404);
  });

  test('a stuck pending job says why in words', async ({ page }) => {
    const jobId = await runFirstCellJob(page, QUICK);
    // The local engine never leaves a job stuck, so this one display check rewrites the job
    // in the list GET, in the browser only, into what a cluster engine reports.
    const reason =
      'worker-0: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.';
    await page.route(/\/distrun\/jobs(\?.*)?$/, async route => {
      if (route.request().method() !== 'GET') {
        return route.continue();
      }
      const response = await route.fetch();
      const body = await response.json();
      for (const job of body.jobs) {
        if (job.id === jobId) {
          Object.assign(job, { state: 'pending', reason, started_at: null });
        }
      }
      await route.fulfill({ response, json: body });
    });
    await openSidebar(page);
    const words = card(page, jobId).locator(
      '[data-test-id="distrun-job-reason"]'
    );
    await expect(words).toContainText(
      'no node can take it yet (not enough free CPU, memory or GPUs)'
    );
    await expect(words).toContainText('Insufficient nvidia.com/gpu');
    await expect(card(page, jobId)).toHaveAttribute('data-state', 'pending');
  });
});
