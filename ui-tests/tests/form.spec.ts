import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { serverExtensionPresent } from './helpers';

const FORM = '[data-test-id="distrun-form"]';
const JOB = '.jp-Cell >> nth=0 >> [data-test-id="distrun-job"]';

// One-line loops: the editor auto-indents typed lines, which would break nested blocks.
// Every replica waits before exiting: a PyTorch job ends when its master does.
const PLAIN_CELL = [
  'import time',
  'for i in range(3): print("hello", i, flush=True)',
  'time.sleep(5)'
].join('\n');

/** Opens the distrun sidebar with the form drawn from GET /distrun/engines. */
async function openForm(page: IJupyterLabPageFixture): Promise<void> {
  await page.locator('.jp-SideBar [data-id="distrun-jobs"]').click();
  await expect(page.locator(FORM)).toHaveAttribute('data-ready', 'true');
}

function field(page: IJupyterLabPageFixture, name: string) {
  return page.locator(`${FORM} [data-test-id="distrun-form-${name}"]`);
}

test.describe('The Run distributed form', () => {
  test.beforeEach(async ({ page, request }) => {
    expect(
      await serverExtensionPresent(request),
      'needs the distrun server extension and its local engine'
    ).toBe(true);
    await page.notebook.createNew();
  });

  test('offers the frameworks and roles the server lists', async ({
    page,
    request
  }) => {
    const engines = await (await request.get('distrun/engines')).json();
    await page.notebook.setCell(0, 'code', PLAIN_CELL);
    await openForm(page);
    const offered = await field(page, 'framework')
      .locator('option')
      .evaluateAll(options => options.map(o => (o as HTMLOptionElement).value));
    expect(offered).toEqual(engines.frameworks.map((f: any) => f.name));
    await field(page, 'framework').selectOption('tensorflow');
    const tf = engines.frameworks.find((f: any) => f.name === 'tensorflow');
    const rows = page.locator(`${FORM} .jp-distrun-RunForm-roles tbody th`);
    await expect(rows).toHaveText(tf.roles.map((r: any) => r.name));
    for (const role of tf.roles) {
      const replicas = field(page, `roles.${role.name}.replicas`);
      await expect(replicas).toHaveAttribute('min', String(role.min_replicas));
      await expect(replicas).toHaveAttribute(
        'max',
        String(role.max_replicas ?? engines.limits.max_replicas)
      );
    }
  });

  test('runs a header-less cell as pytorch with two workers and remembers it in the notebook', async ({
    page,
    request,
    tmpPath
  }) => {
    await page.notebook.setCell(0, 'code', PLAIN_CELL);
    await page.notebook.selectCells(0);
    await openForm(page);
    await expect(
      page.locator(`${FORM} [data-test-id="distrun-form-source"]`)
    ).toHaveAttribute('data-source', 'notebook');
    await field(page, 'framework').selectOption('pytorch');
    await field(page, 'roles.worker.replicas').fill('2');
    await page.locator('[data-test-id="distrun-form-run"]').click();

    const job = page.locator(JOB);
    await expect(
      job.locator('[data-test-id="distrun-job-status"]')
    ).toHaveAttribute('data-state', 'succeeded', { timeout: 90_000 });
    const log = job.locator('[data-test-id="distrun-job-log"]');
    for (const replica of ['master-0', 'worker-0', 'worker-1']) {
      await expect(log).toContainText(`${replica} | hello 2`);
    }

    await page.notebook.save();
    const saved = await request.get(`api/contents/${tmpPath}/Untitled.ipynb`);
    const notebook = (await saved.json()).content;
    expect(notebook.metadata.distrun.run.framework).toBe('pytorch');
    expect(notebook.metadata.distrun.run.roles.worker.replicas).toBe(2);
  });

  test("pre-fills from the active cell's header", async ({ page }) => {
    await page.notebook.setCell(
      0,
      'code',
      '%framework=tensorflow\n%ps=1;%cpu=2\n%worker=3\nprint(1)'
    );
    await page.notebook.selectCells(0);
    await openForm(page);
    await expect(
      page.locator(`${FORM} [data-test-id="distrun-form-source"]`)
    ).toHaveAttribute('data-source', 'header');
    await expect(field(page, 'framework')).toHaveValue('tensorflow');
    await expect(field(page, 'roles.ps.replicas')).toHaveValue('1');
    await expect(field(page, 'roles.ps.cpu')).toHaveValue('2');
    await expect(field(page, 'roles.worker.replicas')).toHaveValue('3');
    await expect(field(page, 'roles.chief.replicas')).toHaveValue('0');
  });

  test("shows the server's 400 next to the field that caused it", async ({
    page
  }) => {
    await page.notebook.setCell(0, 'code', PLAIN_CELL);
    await page.notebook.selectCells(0);
    await openForm(page);
    await field(page, 'framework').selectOption('pytorch');
    await field(page, 'roles.master.replicas').fill('2');
    await page.locator('[data-test-id="distrun-form-run"]').click();

    const error = page.locator(
      `${FORM} [data-test-id="distrun-form-error-roles.master"]`
    );
    await expect(error).toBeVisible();
    await expect(error).toContainText('at most 1 master');
    await expect(field(page, 'roles.master.replicas')).toHaveAttribute(
      'aria-invalid',
      'true'
    );
    // The cell says it too, in one line.
    await expect(
      page
        .locator('.jp-Cell')
        .first()
        .locator(
          '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
        )
    ).toContainText('at most 1 master');
  });

  test('interrupting the kernel cancels the running job of the cell', async ({
    page,
    request
  }) => {
    await page.notebook.setCell(
      0,
      'code',
      [
        '%framework=generic',
        '%worker=2',
        'import time',
        'for i in range(600): print("tick", i, flush=True); time.sleep(0.1)'
      ].join('\n')
    );
    await page.notebook.selectCells(0);
    await page
      .locator('.jp-NotebookPanel-toolbar [data-command="distrun:run-cell"]')
      .click();
    const job = page.locator(JOB);
    const status = job.locator('[data-test-id="distrun-job-status"]');
    await expect(status).toHaveAttribute('data-state', 'running', {
      timeout: 60_000
    });
    await expect(job.locator('[data-test-id="distrun-job-log"]')).toContainText(
      'worker-1 | tick 0'
    );
    const jobId = await job.getAttribute('data-job-id');

    // galata's kernel bookkeeping route parses every kernel POST reply as JSON and fails on
    // the interrupt's empty 204; send the interrupt straight to the server.
    await page.route(/\/api\/kernels\/[^/]+\/interrupt/, route =>
      route.continue()
    );
    await page
      .locator(
        '.jp-NotebookPanel-toolbar [data-command="notebook:interrupt-kernel"]'
      )
      .click();
    await expect(status).toHaveAttribute('data-state', 'cancelled', {
      timeout: 60_000
    });
    // The outcome is recorded at once; the replicas stop within the grace period after it.
    await expect
      .poll(
        async () => {
          const after = await (
            await request.get(`distrun/jobs/${jobId}`)
          ).json();
          const running = after.replicas.filter(
            (replica: { state: string }) => replica.state === 'running'
          );
          return `${after.state}, ${running.length} running`;
        },
        { timeout: 30_000 }
      )
      .toBe('cancelled, 0 running');
  });
});
