#!/usr/bin/env node
/**
 * The labextension's line chart (`labextension/src/common/linechart.ts`: the product's
 * `LineChart` on uPlot, as the log viewer's Metrics and Usage tabs and the sweep views use it)
 * beside the hand-drawn SVG chart it replaced (`svgchart.ts` here, kept only as the
 * baseline), drawing the same data in Debian's Chromium:
 *
 * 1. first paint: 8 and 32 series x 1k and 10k points, from the call to the frame after it
 *    (wall time and the renderer's main-thread task time), then the JS heap and DOM nodes;
 * 2. live: from 10k points a series, one new point per series per update (every second, as a
 *    long job's usage arrives), the whole chart redrawn as the Metrics/Usage panels do: main-
 *    thread time per update, long tasks (> 50 ms), heap and nodes at the end.
 *
 * Each case runs in a fresh page; medians over --runs. Prints figures, asserts nothing.
 * See README.md.
 */

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { launchChromium, median } from './common.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = join(HERE, '..', '..');
const requireUi = createRequire(join(REPO, 'ui-tests', 'package.json'));
const requireRoot = createRequire(join(REPO, 'package.json'));

const { values: opts } = parseArgs({
  options: {
    runs: { type: 'string', default: '5' },
    'live-seconds': { type: 'string', default: '60' },
    'live-runs': { type: 'string', default: '1' },
    'interval-ms': { type: 'string', default: '1000' },
    chromium: {
      type: 'string',
      default: process.env.CHROMIUM_PATH || '/usr/bin/chromium'
    }
  }
});
const RUNS = Number(opts.runs);
const LIVE_UPDATES = Number(opts['live-seconds']);
const LIVE_RUNS = Number(opts['live-runs']);
const INTERVAL_MS = Number(opts['interval-ms']);
const WIDTH = 900;
const HEIGHT = 300;

let chromium;
let typescript;
try {
  ({ chromium } = requireUi('playwright-core'));
  typescript = requireRoot('typescript');
  requireRoot.resolve('uplot/dist/uPlot.iife.min.js');
} catch (error) {
  console.log(
    `SKIPPED: ${error.message.split('\n')[0]}; run \`jlpm install\` at the root and in ui-tests/`
  );
  process.exit(0);
}

/**
 * A TypeScript module as the browser runs it: transpiled to CommonJS, its exports put on
 * window.benchModules[name]; `require` gives uPlot's page global for 'uplot' and the modules
 * loaded before it for the others.
 */
function moduleScript(name, path) {
  const { outputText } = typescript.transpileModule(readFileSync(path, 'utf8'), {
    compilerOptions: {
      target: typescript.ScriptTarget.ES2020,
      module: typescript.ModuleKind.CommonJS,
      esModuleInterop: true
    }
  });
  return (
    '(function () { var modules = (window.benchModules ??= {});' +
    " var require = n => (n === 'uplot' ? window.uPlot : modules[n]);" +
    ` var module = { exports: {} }; var exports = module.exports; ${outputText};` +
    ` modules[${JSON.stringify(name)}] = module.exports; })();`
  );
}

const COMMON = join(REPO, 'labextension', 'src', 'common');
/** The modules the page loads, in order: the baseline, then the product's chart. */
const MODULES = [
  ['svgchart', join(HERE, 'svgchart.ts')],
  ['./chartdata', join(COMMON, 'chartdata.ts')],
  ['linechart', join(COMMON, 'linechart.ts')]
];

/** In the page: both charts behind one interface, the data, and the timing helpers. */
function pageSetup({ width, height }) {
  const frame = () =>
    new Promise(resolve => requestAnimationFrame(() => setTimeout(resolve, 0)));
  const data = (nSeries, nPoints) => {
    const xs = Array.from({ length: nPoints }, (_, i) => i);
    const ys = Array.from({ length: nSeries }, (_, s) =>
      xs.map(i => 50 + 40 * Math.sin(i / 50 + s) + ((i * 7919 + s) % 13))
    );
    return { xs, ys };
  };
  const next = (d, s) =>
    50 + 40 * Math.sin(d.xs.length / 50 + s) + ((d.xs.length * 7919 + s) % 13);
  const limits = [{ label: 'limit 120', y: 120 }];

  const svg = {
    create(host, d) {
      const node = document.createElementNS(
        'http://www.w3.org/2000/svg',
        'svg'
      );
      node.classList.add('jp-distrun-Chart');
      host.append(node);
      const draw = () =>
        window.benchModules.svgchart.renderChart(
          node,
          d.ys.map((ys, s) => ({
            label: `worker-${s}`,
            colorClass: `jp-distrun-c${s % 8}`,
            xs: d.xs,
            ys
          })),
          { width, height, xLabel: 'step', yLabel: 'cpu', limits }
        );
      draw();
      return { update: draw };
    }
  };

  const uplot = {
    create(host, d) {
      const node = document.createElement('div');
      node.className = 'jp-distrun-Chart';
      host.append(node);
      const { LineChart } = window.benchModules.linechart;
      const chart = new LineChart(node, host, () => ({ width, height }));
      const series = () =>
        d.ys.map((ys, s) => ({
          label: `worker-${s}`,
          colorClass: `jp-distrun-c${s % 8}`,
          xs: d.xs,
          ys
        }));
      const spec = { xLabel: 'step', yLabel: 'cpu', limits };
      chart.update(series(), spec);
      return { update: () => chart.update(series(), spec) };
    }
  };

  const impls = { svg, uplot };
  window.bench = {
    async firstPaint(impl, nSeries, nPoints) {
      const d = data(nSeries, nPoints);
      const host = document.getElementById('host');
      await frame();
      const start = performance.now();
      impls[impl].create(host, d);
      const call = performance.now() - start;
      await frame();
      return { call, painted: performance.now() - start };
    },
    async startLive(impl, nSeries, nPoints) {
      const d = data(nSeries, nPoints);
      window.live = {
        d,
        chart: impls[impl].create(document.getElementById('host'), d)
      };
      await frame();
      await new Promise(resolve => setTimeout(resolve, 200));
    },
    /** Updates from the page's own timers (as the panels do), each timed to its frame. */
    async runLive(updates, intervalMs) {
      const { d, chart } = window.live;
      const calls = [];
      const painted = [];
      for (let n = 0; n < updates; n++) {
        await new Promise(resolve => setTimeout(resolve, intervalMs));
        d.xs.push(d.xs.length);
        d.ys.forEach((ys, s) => ys.push(next(d, s)));
        const start = performance.now();
        chart.update();
        calls.push(performance.now() - start);
        await frame();
        painted.push(performance.now() - start);
      }
      return { calls, painted };
    }
  };
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

/** A fresh browser per case, so that its one renderer process holds only that chart. */
async function openPage() {
  const browser = await launchChromium(chromium, opts.chromium);
  const context = await browser.newContext({
    viewport: { width: 1200, height: 600 }
  });
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  const browserCdp = await browser.newBrowserCDPSession();
  await cdp.send('Performance.enable'); // JSHeapUsedSize and Nodes
  await page.setContent(
    `<html><head><style>${readFileSync(join(REPO, 'labextension', 'style', 'base.css'), 'utf8')}</style>` +
      `<style>${readFileSync(requireRoot.resolve('uplot/dist/uPlot.min.css'), 'utf8')}</style></head>` +
      '<body><div id="host"></div></body></html>'
  );
  await page.addScriptTag({
    content: readFileSync(
      requireRoot.resolve('uplot/dist/uPlot.iife.min.js'),
      'utf8'
    )
  });
  for (const [name, path] of MODULES) {
    await page.addScriptTag({ content: moduleScript(name, path) });
  }
  await page.evaluate(pageSetup, { width: WIDTH, height: HEIGHT });
  return { browser, page, cdp, browserCdp };
}

const TRACE_CATEGORIES = ['toplevel', 'devtools.timeline', '__metadata'];

const TASK_EVENTS = new Set(['ThreadControllerImpl::RunTask', 'RunTask']);

/**
 * The durations (ms) of the renderer main thread's top-level tasks in a Chromium trace (on
 * CrRendererMain, nested ones counted in their parent): every bit of the page's work,
 * script, style, layout and paint alike.
 */
function mainThreadTasks(trace) {
  const { traceEvents } = JSON.parse(trace.toString('utf8'));
  const main = new Set(
    traceEvents
      .filter(
        e => e.name === 'thread_name' && e.args?.name === 'CrRendererMain'
      )
      .map(e => `${e.pid}:${e.tid}`)
  );
  const tasks = traceEvents
    .filter(
      e =>
        TASK_EVENTS.has(e.name) && e.ph === 'X' && main.has(`${e.pid}:${e.tid}`)
    )
    .sort((a, b) => a.ts - b.ts);
  const durations = [];
  let end = -Infinity;
  for (const task of tasks) {
    if (task.ts >= end) {
      durations.push(task.dur / 1000);
      end = task.ts + task.dur;
    }
  }
  return durations;
}

const sum = values => values.reduce((a, b) => a + b, 0);

async function metrics(cdp) {
  const { metrics: list } = await cdp.send('Performance.getMetrics');
  return Object.fromEntries(list.map(m => [m.name, m.value]));
}

/** The renderer processes' proportional set size (Linux /proc), in MB. */
async function rendererPss(browserCdp) {
  const { processInfo } = await browserCdp.send('SystemInfo.getProcessInfo');
  let kb = 0;
  for (const { type, id } of processInfo) {
    if (type === 'renderer') {
      const rollup = readFileSync(`/proc/${id}/smaps_rollup`, 'utf8');
      kb += Number(/^Pss:\s+(\d+)/m.exec(rollup)[1]);
    }
  }
  return kb / 1024;
}

/**
 * What the chart keeps, after a full collection: the JS heap, DOM nodes, and the renderer's
 * whole memory (PSS: Blink's SVG geometry and the canvas' pixels are outside the JS heap).
 */
async function memory(cdp, browserCdp) {
  await cdp.send('HeapProfiler.collectGarbage');
  const m = await metrics(cdp);
  return {
    heapMB: m.JSHeapUsedSize / 2 ** 20,
    nodes: m.Nodes,
    pssMB: await rendererPss(browserCdp)
  };
}

async function firstPaint(impl, nSeries, nPoints) {
  const { browser, page, cdp, browserCdp } = await openPage();
  try {
    const empty = await memory(cdp, browserCdp);
    await browser.startTracing(page, { categories: TRACE_CATEGORIES });
    const timing = await page.evaluate(
      ([i, s, p]) => window.bench.firstPaint(i, s, p),
      [impl, nSeries, nPoints]
    );
    const tasks = mainThreadTasks(await browser.stopTracing());
    const drawn = await memory(cdp, browserCdp);
    return {
      ...timing,
      task: sum(tasks),
      heapMB: drawn.heapMB - empty.heapMB,
      pssMB: drawn.pssMB - empty.pssMB,
      nodes: drawn.nodes - empty.nodes
    };
  } finally {
    await browser.close();
  }
}

async function live(impl, nSeries, nPoints) {
  const { browser, page, cdp, browserCdp } = await openPage();
  try {
    const empty = await memory(cdp, browserCdp);
    await page.evaluate(
      ([i, s, p]) => window.bench.startLive(i, s, p),
      [impl, nSeries, nPoints]
    );
    const start = await memory(cdp, browserCdp);
    await browser.startTracing(page, { categories: TRACE_CATEGORIES });
    const { calls, painted } = await page.evaluate(
      ([updates, interval]) => window.bench.runLive(updates, interval),
      [LIVE_UPDATES, INTERVAL_MS]
    );
    const tasks = mainThreadTasks(await browser.stopTracing());
    const end = await memory(cdp, browserCdp);
    return {
      call: median(calls),
      callMax: Math.max(...calls),
      task: sum(tasks) / LIVE_UPDATES,
      taskMax: Math.max(...tasks),
      painted: median(painted),
      longTasks: tasks.filter(ms => ms > 50).length,
      heapMB: end.heapMB - empty.heapMB,
      pssMB: end.pssMB - empty.pssMB,
      pssGrowthMB: end.pssMB - start.pssMB
    };
  } finally {
    await browser.close();
  }
}

const fmt = (value, digits = 1) => value.toFixed(digits).padStart(8);

function row(label, svg, uplot, keys) {
  const cells = keys.map(
    ([key, digits]) =>
      `${key} ${fmt(svg[key], digits)} | ${fmt(uplot[key], digits)}  (x${(svg[key] / uplot[key]).toFixed(1)})`
  );
  console.log(`${label.padEnd(22)} ${cells.join('   ')}`);
}

function medians(results) {
  return Object.fromEntries(
    Object.keys(results[0]).map(key => [key, median(results.map(r => r[key]))])
  );
}

async function main() {
  const uplotVersion = JSON.parse(
    readFileSync(requireRoot.resolve('uplot/package.json'), 'utf8')
  ).version;
  const probe = await chromium.launch({
    executablePath: opts.chromium,
    args: ['--no-sandbox', '--headless']
  });
  const chromiumVersion = probe.version();
  await probe.close();
  console.log(
    `Chromium ${chromiumVersion}, uPlot ${uplotVersion}, ${WIDTH}x${HEIGHT} px, ` +
      `${RUNS} runs (first paint), ${LIVE_RUNS} run(s) of ${LIVE_UPDATES} updates every ` +
      `${INTERVAL_MS} ms (live); figures are "svg | uplot (svg/uplot)", uplot = the product's LineChart, ms and MB, medians`
  );
  console.log(
    '\nFirst paint (call = the drawing call, painted = to the next frame, task = main-thread ' +
      'time; heap, renderer PSS and DOM nodes added by the chart)'
  );
  for (const nSeries of [8, 32]) {
    for (const nPoints of [1000, 10000]) {
      const results = { svg: [], uplot: [] };
      for (let run = 0; run < RUNS; run++) {
        for (const impl of ['svg', 'uplot']) {
          results[impl].push(await firstPaint(impl, nSeries, nPoints));
        }
      }
      row(
        `${nSeries} x ${nPoints}`,
        medians(results.svg),
        medians(results.uplot),
        [
          ['call', 1],
          ['painted', 1],
          ['task', 1],
          ['heapMB', 1],
          ['pssMB', 1],
          ['nodes', 0]
        ]
      );
    }
  }
  console.log(
    `\nLive: one point per series per update from 10k points, ${LIVE_UPDATES} updates ` +
      '(call = the redraw call, median and max; task = main-thread time per update, mean, and the longest task; painted = to the next frame; ' +
      'longTasks = tasks over 50 ms; memory at the end, and PSS growth over the updates)'
  );
  for (const nSeries of [8, 32]) {
    const results = { svg: [], uplot: [] };
    for (let run = 0; run < LIVE_RUNS; run++) {
      for (const impl of ['svg', 'uplot']) {
        results[impl].push(await live(impl, nSeries, 10000));
      }
    }
    row(
      `${nSeries} x 10000 live`,
      medians(results.svg),
      medians(results.uplot),
      [
        ['call', 1],
        ['callMax', 1],
        ['task', 1],
        ['taskMax', 1],
        ['painted', 1],
        ['longTasks', 0],
        ['heapMB', 1],
        ['pssMB', 1],
        ['pssGrowthMB', 1]
      ]
    );
  }
}

await main();
