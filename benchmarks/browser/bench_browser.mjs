#!/usr/bin/env node
/**
 * Browser figures for distrun's JupyterLab extension, in Debian's Chromium, against a real
 * JupyterLab with the real server extension and the local engine (started here):
 *
 * 1. Click on "Run distributed" to the first log line on screen for a 3-replica job (1 master,
 *    2 workers, each printing its rank): the first run after the server started (cold), then
 *    the median of N more (warm), beside the same notebook's plain cell (`print(...)`, run with
 *    Ctrl+Enter in its own kernel) to its output on screen, median of N.
 * 2. Frame times (requestAnimationFrame deltas recorded in the page: p50/p95/max) while a job
 *    prints 100k lines/s into the cell output, side by side with plain JupyterLab printing the
 *    same lines at the same pace from the notebook's own kernel.
 *
 * Prints figures; asserts nothing. See README.md.
 */

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { launchChromium, median } from './common.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = join(HERE, '..', '..');
const require = createRequire(join(REPO, 'ui-tests', 'package.json'));

const { values: opts } = parseArgs({
  options: {
    runs: { type: 'string', default: '5' },
    seconds: { type: 'string', default: '3' },
    rate: { type: 'string', default: '100000' },
    // Default: a free loopback port (never a fixed one another checkout's server may hold).
    port: { type: 'string', default: '' },
    'first-line-only': { type: 'boolean', default: false },
    // The local engine's niceness for jobs (default: the engine's, 10).
    nice: { type: 'string', default: '' },
    // How many replica interpreters the engine starts ahead (default: the engine's, 1).
    'waiting-interpreters': { type: 'string', default: '' },
    // CPU-bound processes (nice 0) running through the click-to-first-line runs: a busy machine.
    busy: { type: 'string', default: '0' },
    // Each round's runs twice: with the log stream opened with a ticket (ahead of the run,
    // or beside its submission) and without (opened once the POST answers, as before
    // 2026-11-27).
    'compare-early': { type: 'boolean', default: false },
    chromium: {
      type: 'string',
      default: process.env.CHROMIUM_PATH || '/usr/bin/chromium'
    }
  }
});
const RUNS = Number(opts.runs);
const SECONDS = Number(opts.seconds);
const RATE = Number(opts.rate);
/** A loopback port free now: the kernel picks one for a listener on port 0. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(String(port)));
    });
  });
}
if (!opts.port) {
  opts.port = await freePort();
}
// A fresh token: nothing but the server this run starts answers to it.
const TOKEN = randomBytes(16).toString('hex');
const BASE = `http://127.0.0.1:${opts.port}`;
// After the printing stops, how long frames are still recorded (the output catching up).
const SETTLE_SECONDS = 5;
// The longest either side may take to show its lines before it is reported unfinished.
const RUN_LIMIT_SECONDS = 40;

let chromium;
try {
  ({ chromium } = require('playwright-core'));
} catch {
  console.log(
    'SKIPPED: playwright-core is missing; run `jlpm install` in ui-tests/ first'
  );
  process.exit(0);
}

/** The printing loop, the same for both sides: RATE lines/s in 10 ms batches. */
function printer(rate, seconds) {
  return [
    'import sys, time',
    `rate, seconds, batch = ${rate}, ${seconds}, ${Math.max(1, Math.round(rate / 100))}`,
    'start, n = time.time(), 0',
    'while n < rate * seconds:',
    '    sys.stdout.write("".join(f"line {n + i:09d} loss=0.{(n + i) % 997:03d}\\n" for i in range(batch)))',
    '    sys.stdout.flush()',
    '    n += batch',
    '    ahead = n / rate - (time.time() - start)',
    '    if ahead > 0:',
    '        time.sleep(ahead)',
    'print(f"printed {n} lines in {time.time() - start:.2f} s", flush=True)'
  ].join('\n');
}

const FIRST_LINE_CELL =
  '%framework=pytorch\n%worker=2\nimport os\nprint("rank", os.environ["RANK"], flush=True)';
const PAUSE_MS = 1000;
// Each run of the distrun cell is one of these: its first run (no output yet) or a run again
// over the previous run's output, by the toolbar button or by Shift+Alt+Enter.
const runKind = (way, again) =>
  `${again ? 'again' : 'first'} by ${way === 'button' ? 'button' : 'key'}`;
const RUN_KINDS = [
  runKind('button', false),
  runKind('key', false),
  runKind('button', true),
  runKind('key', true)
];
const NO_EARLY = ', stream after the answer';
const PLAIN_FIRST_LINE_CELL = 'print("rank", 0, flush=True)';
const FLOOD_CELL = `%framework=generic\n%worker=1\n${printer(RATE, SECONDS)}`;
const PLAIN_CELL = printer(RATE, SECONDS);

function percentile(sorted, p) {
  if (!sorted.length) {
    return NaN;
  }
  return sorted[
    Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))
  ];
}

const ms = value => (Number.isFinite(value) ? `${value.toFixed(1)} ms` : 'n/a');

async function startLab() {
  const env = {
    ...process.env,
    PYTHONPATH: [join(REPO, 'server_ext'), process.env.PYTHONPATH]
      .filter(Boolean)
      .join(':'),
    DISTRUN_UI_PORT: opts.port,
    DISTRUN_UI_TOKEN: TOKEN,
    DISTRUN_BENCH_NICE: opts.nice,
    DISTRUN_BENCH_WAITING_INTERPRETERS: opts['waiting-interpreters']
  };
  const lab = spawn(
    'jupyter',
    [
      'lab',
      '--allow-root',
      '--config',
      join(REPO, 'ui-tests', 'jupyter_server_test_config.py')
    ],
    { env, stdio: ['ignore', 'ignore', 'pipe'], detached: true }
  );
  let log = '';
  lab.stderr.on('data', chunk => (log = (log + chunk).slice(-4000)));
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    if (lab.exitCode !== null) {
      throw new Error(`jupyter lab exited:\n${log}`);
    }
    try {
      const response = await fetch(`${BASE}/distrun/engines?token=${TOKEN}`);
      if (response.ok) {
        return lab;
      }
      if (response.status === 404) {
        console.log('SKIPPED: the distrun server extension did not load');
        process.kill(-lab.pid);
        process.exit(0);
      }
    } catch {
      // not listening yet
    }
    await new Promise(resolve => setTimeout(resolve, 500));
  }
  throw new Error(`jupyter lab did not start in 120 s:\n${log}`);
}

/** Counts the log lines the page receives on distrun's websockets (for the achieved rate). */
function countStreamLines() {
  const Native = window.WebSocket;
  window.__distrunLines = 0;
  window.__distrunNoEarly = false;
  window.__distrunEarlySockets = [];
  // The early stream (a ticket's) refused at once, without reaching the server: the
  // extension then opens the job's own stream once the POST answers (the path before).
  const early = url => String(url).includes('/distrun/streams/');
  window.WebSocket = class extends Native {
    constructor(url, protocols) {
      const refused = window.__distrunNoEarly && early(url);
      super(refused ? 'ws://127.0.0.1:65535/' : url, protocols);
      if (early(url)) {
        window.__distrunEarlySockets.push(this);
      }
      if (String(url).includes('/logs/stream') || early(url)) {
        this.addEventListener('message', event => {
          const message = JSON.parse(event.data);
          if (message.type === 'runs') {
            for (const run of message.runs) {
              window.__distrunLines += run.texts.length;
            }
          }
        });
      }
    }
  };
}

async function newNotebook(page) {
  await page.goto(`${BASE}/lab?token=${TOKEN}`);
  await page.waitForFunction(() => window.jupyterapp?.shell, null, {
    timeout: 120_000
  });
  await page.evaluate(() => window.jupyterapp.restored);
  await page.evaluate(() =>
    window.jupyterapp.commands.execute('notebook:create-new', {
      kernelName: 'python3'
    })
  );
  await page.waitForSelector('.jp-NotebookPanel .jp-Cell', { timeout: 60_000 });
  await page.waitForFunction(
    () => {
      const panel = window.jupyterapp.shell.currentWidget;
      return panel?.sessionContext?.session?.kernel?.status === 'idle';
    },
    null,
    { timeout: 60_000 }
  );
}

async function setCell(page, source, index = 0) {
  await page.evaluate(
    ({ text, index }) => {
      const notebook = window.jupyterapp.shell.currentWidget.content;
      if (notebook.widgets.length <= index) {
        notebook.model.sharedModel.insertCell(index, {
          cell_type: 'code',
          source: ''
        });
      }
      notebook.activeCellIndex = index;
      notebook.activeCell.model.outputs.clear();
      notebook.activeCell.model.sharedModel.setSource(text);
    },
    { text: source, index }
  );
}

/**
 * Runs the distrun cell (the notebook's first) by `way` -> the first `.jp-distrun-line` of the
 * new job painted, in ms from the input event: 'button' (a mousedown on the toolbar's Run
 * distributed, which acts on mousedown) or 'key' (Shift+Alt+Enter). The cell is left as it is:
 * unchanged, with the previous run's output still shown (`clearOutputs` takes it down first,
 * for a run on a cell without output).
 */
/**
 * Takes the first cell's output down, as a person clearing it would, some time before the next
 * run: its view closes its log stream, and the server's end of it closes with it (not during the
 * run, which a first run on a cell without output never competes with).
 */
async function clearOutputs(page) {
  await page.evaluate(() => {
    const notebook = window.jupyterapp.shell.currentWidget.content;
    notebook.widgets[0].model.outputs.clear();
  });
}

async function runToFirstLine(page, way) {
  await page.evaluate(
    ({ way }) => {
      const notebook = window.jupyterapp.shell.currentWidget.content;
      notebook.activeCellIndex = 0;
      notebook.mode = 'command';
      notebook.node.focus();
      const cell = notebook.activeCell;
      const previous = cell.node.querySelector('[data-test-id="distrun-job"]')
        ?.dataset.jobId;
      window.__firstLine = new Promise(resolve => {
        let input = 0;
        const target =
          way === 'button'
            ? document.querySelector(
                '.jp-NotebookPanel-toolbar [data-command="distrun:run-cell"]'
              )
            : document;
        const onInput = event => {
          if (
            way === 'button' ||
            (event.key === 'Enter' && event.shiftKey && event.altKey)
          ) {
            input = performance.now();
            target.removeEventListener(event.type, onInput, { capture: true });
          }
        };
        target.addEventListener(
          way === 'button' ? 'mousedown' : 'keydown',
          onInput,
          {
            capture: true
          }
        );
        const observer = new MutationObserver(() => {
          const view = [
            ...cell.node.querySelectorAll('[data-test-id="distrun-job"]')
          ].find(node => node.dataset.jobId !== previous);
          if (input && view?.querySelector('.jp-distrun-line')) {
            // The frame the line is painted in.
            requestAnimationFrame(() =>
              resolve({
                painted: performance.now(),
                input,
                jobId: view.dataset.jobId
              })
            );
            observer.disconnect();
          }
        });
        observer.observe(cell.node, { childList: true, subtree: true });
      });
    },
    { way }
  );
  await page.evaluate(() => performance.clearResourceTimings());
  if (way === 'button') {
    await page
      .locator('.jp-NotebookPanel-toolbar [data-command="distrun:run-cell"]')
      .click();
  } else {
    await page.keyboard.press('Shift+Alt+Enter');
  }
  const { painted, input, jobId } = await page.evaluate(
    () => window.__firstLine
  );
  await page.waitForSelector(
    `[data-job-id="${jobId}"] [data-test-id="distrun-job-status"][data-state="succeeded"]`,
    { timeout: 60_000 }
  );
  return {
    total: painted - input,
    stages: await stagesOf(page, input, painted)
  };
}

/**
 * Where one run's time went, in ms from its input event: the extension's marks (common/trace.ts),
 * the POST's Server-Timing, and the job's own records on the server (the supervisor's start,
 * the first line's capture time), all on this machine's clock.
 */
async function stagesOf(page, input, painted) {
  const seen = await page.evaluate(() => {
    const mark = name => {
      const entries = performance.getEntriesByName(`distrun:${name}`);
      return entries[entries.length - 1];
    };
    const post = performance
      .getEntriesByType('resource')
      .filter(e => e.serverTiming.some(timing => timing.name === 'submit'))
      .pop();
    return {
      origin: performance.timeOrigin,
      jobId: mark('submitted').detail.jobId,
      submit: mark('submit').startTime,
      submitted: mark('submitted').startTime,
      open: mark('stream-open').startTime,
      lines: mark('first-lines').startTime,
      server: post
        ? Object.fromEntries(post.serverTiming.map(t => [t.name, t.duration]))
        : {}
    };
  });
  const api = async (path, query = '') =>
    (
      await fetch(
        `${BASE}/distrun/jobs/${seen.jobId}${path}?token=${TOKEN}${query}`
      )
    ).json();
  const job = await api('');
  const logs = await api('/logs', '&format=json');
  // Epoch seconds on the server -> ms after the input on the page's clock.
  const fromInput = epochSeconds => epochSeconds * 1000 - seen.origin - input;
  return {
    'input -> POST sent': seen.submit - input,
    'POST -> answer': seen.submitted - seen.submit,
    '  of it: server, the cell to a spec': seen.server.spec,
    '  of it: server, engine submit': seen.server.submit,
    'answer -> log stream open (< 0: before it)': seen.open - seen.submitted,
    'log stream open (after the input)': seen.open - input,
    'job created by the engine (after the input)': fromInput(job.created_at),
    'supervisor started the replicas (after the input)': fromInput(
      job.started_at
    ),
    'first replica handed over (after the input)': fromInput(
      Math.min(...job.replicas.map(replica => replica.started_at ?? Infinity))
    ),
    'first line captured (after the input)': fromInput(
      Math.min(...logs.lines.map(line => line[2]))
    ),
    'stream open -> first lines received': seen.lines - seen.open,
    'first lines received -> painted': painted - seen.lines
  };
}

/** Medians of each stage across runs, one line each. */
function printStages(title, runs) {
  console.log(title);
  if (runs.length === 0) {
    console.log('  (no run of this kind: more --runs give every kind one)');
    return;
  }
  for (const name of Object.keys(runs[0])) {
    const values = runs.map(run => run[name]).filter(Number.isFinite);
    console.log(`  ${name.padEnd(52)} ${ms(median(values))}`);
  }
}

/** Ctrl+Enter on a plain cell -> its first output line painted, in ms. */
async function plainCellToOutput(page) {
  // The notebook's second cell: the first, the distrun cell, stays as it is.
  await setCell(page, PLAIN_FIRST_LINE_CELL, 1);
  await page.evaluate(() => {
    window.__plainLine = new Promise(resolve => {
      const cell =
        window.jupyterapp.shell.currentWidget.content.activeCell.node;
      let pressed = 0;
      const onKey = event => {
        if (event.key === 'Enter' && event.ctrlKey) {
          pressed = performance.now();
          document.removeEventListener('keydown', onKey, { capture: true });
        }
      };
      document.addEventListener('keydown', onKey, { capture: true });
      const observer = new MutationObserver(() => {
        const output = cell.querySelector('.jp-OutputArea-output');
        if (pressed && output && output.textContent.includes('rank')) {
          requestAnimationFrame(() =>
            resolve({ painted: performance.now(), pressed })
          );
          observer.disconnect();
        }
      });
      observer.observe(cell, {
        childList: true,
        subtree: true,
        characterData: true
      });
    });
  });
  // Into the cell's editor, as a person would, then run the cell in place.
  await page.locator('.jp-Cell.jp-mod-active .jp-InputArea-editor').click();
  await page.keyboard.press('Control+Enter');
  const { painted, pressed } = await page.evaluate(() => window.__plainLine);
  return painted - pressed;
}

function startFrames() {
  window.__frames = [];
  window.__recording = true;
  let last = performance.now();
  const tick = now => {
    window.__frames.push(now - last);
    last = now;
    if (window.__recording) {
      requestAnimationFrame(tick);
    }
  };
  requestAnimationFrame(tick);
}

function stopFrames() {
  window.__recording = false;
  return window.__frames;
}

function frameFigures(frames) {
  const sorted = [...frames].sort((a, b) => a - b);
  return {
    frames: frames.length,
    p50: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    max: sorted[sorted.length - 1] ?? NaN,
    long: frames.filter(f => f > 50).length
  };
}

/** Runs the active cell with `run` and records frames until done + settle (or the window ends). */
async function floodFrames(page, source, run, done) {
  await setCell(page, source);
  await page.evaluate(() => (window.__distrunLines = 0));
  await page.evaluate(startFrames);
  const started = Date.now();
  await run();
  const limit = RUN_LIMIT_SECONDS * 1000;
  let finished = false;
  try {
    await page.waitForFunction(done, null, { timeout: limit, polling: 250 });
    finished = true;
  } catch {
    // reported below
  }
  const runSeconds = (Date.now() - started) / 1000;
  await page.waitForTimeout(SETTLE_SECONDS * 1000);
  const frames = await Promise.race([
    page.evaluate(stopFrames),
    new Promise(resolve => setTimeout(() => resolve(null), 30_000))
  ]);
  const received = await page
    .evaluate(() => window.__distrunLines)
    .catch(() => NaN);
  return { frames, finished, runSeconds, received };
}

function report(label, result) {
  if (!result.frames) {
    console.log(
      `${label}: the page did not answer within 30 s after the run (frozen)`
    );
    return;
  }
  const f = frameFigures(result.frames);
  console.log(
    `${label.padEnd(34)} p50 ${ms(f.p50).padStart(9)}  p95 ${ms(f.p95).padStart(9)}  ` +
      `max ${ms(f.max).padStart(10)}  frames>50ms ${String(f.long).padStart(4)} / ${f.frames}  ` +
      `run ${result.runSeconds.toFixed(1)} s${result.finished ? '' : ' (not finished)'}`
  );
}

async function main() {
  const lab = await startLab();
  const browser = await launchChromium(chromium, opts.chromium);
  try {
    const context = await browser.newContext({
      viewport: { width: 1400, height: 900 }
    });
    await context.addInitScript(countStreamLines);
    const page = await context.newPage();
    await newNotebook(page);

    console.log(
      `Chromium ${browser.version()}, ${RUNS} runs, ${RATE} lines/s for ${SECONDS} s, ` +
        `jobs at nice ${opts.nice || '10 (the default)'}`
    );
    const burners = Array.from({ length: Number(opts.busy) }, () =>
      spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' })
    );
    if (burners.length) {
      console.log(
        `a busy machine: ${burners.length} CPU-bound processes at nice 0`
      );
    }
    await setCell(page, FIRST_LINE_CELL);
    const coldRun = await runToFirstLine(page, 'button');
    const plainRuns = [];
    const variants = opts['compare-early'] ? ['', NO_EARLY] : [''];
    const kinds = variants.flatMap(variant =>
      RUN_KINDS.map(kind => kind + variant)
    );
    const runs = Object.fromEntries(kinds.map(kind => [kind, []]));
    for (let round = 0; round < RUNS; round++) {
      plainRuns.push(await plainCellToOutput(page));
      // The same cell, unchanged, run three times in a row: first on a cell without output,
      // then again over the previous run's output; by button then key, or key then button.
      const [one, other] = round % 2 ? ['key', 'button'] : ['button', 'key'];
      const order = round % 2 ? [...variants].reverse() : variants;
      for (const variant of order) {
        await page.evaluate(off => {
          window.__distrunNoEarly = off;
          // The stream opened ahead for the next run, closed: it is opened again as asked.
          window.__distrunEarlySockets.forEach(socket => socket.close());
          window.__distrunEarlySockets = [];
        }, !!variant);
        for (const [way, again] of [
          [one, false],
          [one, true],
          [other, true]
        ]) {
          if (!again) {
            await clearOutputs(page);
          }
          // A person's pause before each run (the server prepares the next job meanwhile).
          await page.waitForTimeout(PAUSE_MS);
          const run = await runToFirstLine(page, way);
          runs[runKind(way, again) + variant].push(run);
        }
      }
    }
    await page.evaluate(() => (window.__distrunNoEarly = false));
    const spread = values => {
      const sorted = [...values].sort((a, b) => a - b);
      return `median ${ms(median(values))}, min ${ms(sorted[0])}, max ${ms(sorted[sorted.length - 1])}`;
    };
    const plainMedian = median(plainRuns);
    console.log(
      `plain cell, Ctrl+Enter -> output painted: ${spread(plainRuns)} (${RUNS} runs)`
    );
    console.log(
      `Run distributed (3 replicas), the same unchanged cell -> first log line painted, from the input event:`
    );
    for (const kind of kinds) {
      const totals = runs[kind].map(run => run.total);
      if (totals.length === 0) {
        console.log(
          `  ${kind.padEnd(62)} no run (more --runs give every kind one)`
        );
        continue;
      }
      console.log(
        `  ${kind.padEnd(62)} ${spread(totals)} (${totals.length} runs): ` +
          `${(median(totals) / plainMedian).toFixed(2)}x the plain cell`
      );
    }
    console.log(
      `  cold (the server's first job, by button) ${ms(coldRun.total)}: ` +
        `${(coldRun.total / plainMedian).toFixed(2)}x the plain cell`
    );
    for (const kind of kinds) {
      printStages(
        `where the time of a run ${kind} went (medians of ${runs[kind].length}):`,
        runs[kind].map(run => run.stages)
      );
    }
    printStages("where the cold run's time went:", [coldRun.stages]);
    burners.forEach(burner => burner.kill());
    if (opts['first-line-only']) {
      return;
    }

    const distrun = await floodFrames(
      page,
      FLOOD_CELL,
      () =>
        page
          .locator(
            '.jp-NotebookPanel-toolbar [data-command="distrun:run-cell"]'
          )
          .click(),
      () =>
        !!document.querySelector(
          '.jp-Cell.jp-mod-active [data-test-id="distrun-job"][data-ended="true"]'
        )
    );
    const idle = await floodFrames(
      page,
      'pass',
      async () => undefined,
      () => true
    );

    // Plain JupyterLab last, in a fresh page: its output may leave the tab unusable.
    const plainPage = await context.newPage();
    await newNotebook(plainPage);
    // `notebook:run-cell` resolves when the kernel has finished the cell.
    const plain = await floodFrames(
      plainPage,
      PLAIN_CELL,
      () =>
        Promise.race([
          plainPage.evaluate(() =>
            window.jupyterapp.commands.execute('notebook:run-cell')
          ),
          new Promise(resolve => setTimeout(resolve, RUN_LIMIT_SECONDS * 1000))
        ]),
      () => true
    );

    console.log(
      `\nframe times (requestAnimationFrame deltas, ${SETTLE_SECONDS} s settle included):`
    );
    report('idle notebook (floor)', idle);
    report('distrun job output, 1 replica', distrun);
    console.log(
      `  lines received on the websocket: ${distrun.received} of ${RATE * SECONDS}` +
        ` (${(distrun.received / distrun.runSeconds).toFixed(0)} lines/s over the run)`
    );
    report('plain JupyterLab print() output', plain);
    await plainPage.close().catch(() => undefined);
  } finally {
    await browser.close();
    process.kill(-lab.pid, 'SIGTERM');
  }
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
