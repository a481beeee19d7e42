/**
 * galata / Playwright configuration: Debian's Chromium (never Playwright's own download),
 * no video (it needs Playwright's ffmpeg), and a JupyterLab of its own: started on a free
 * loopback port with a fresh token every run, never one found already there (a server left
 * by another checkout would otherwise be the one tested).
 */
const { execFileSync } = require('node:child_process');
const { randomBytes } = require('node:crypto');

const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

/** A loopback port free now: the kernel picks one for a listener on port 0. */
function freePort() {
  const script =
    "const s = require('node:net').createServer();" +
    "s.listen(0, '127.0.0.1', () => { process.stdout.write(String(s.address().port)); s.close(); });";
  return execFileSync(process.execPath, ['-e', script], {
    encoding: 'utf8'
  }).trim();
}

// Playwright loads this file in the runner and again in each worker: the runner chooses, and
// the workers inherit its choice through the environment.
process.env.DISTRUN_UI_PORT ||= freePort();
process.env.DISTRUN_UI_TOKEN ||= randomBytes(16).toString('hex');
const port = process.env.DISTRUN_UI_PORT;
const token = process.env.DISTRUN_UI_TOKEN;

module.exports = {
  ...baseConfig,
  reporter: [['list']],
  retries: 0,
  workers: 1,
  use: {
    ...baseConfig.use,
    baseURL: `http://127.0.0.1:${port}`,
    extraHTTPHeaders: { Authorization: `token ${token}` },
    trace: 'off',
    video: 'off',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--headless',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run'
      ]
    }
  },
  webServer: {
    command: 'jlpm start',
    url: `http://127.0.0.1:${port}/api/status?token=${token}`,
    timeout: 120 * 1000,
    // Never another's server: Playwright fails if something already answers at `url`.
    reuseExistingServer: false,
    // The server's log drowns the results; DISTRUN_UI_SERVER_LOG=1 shows it.
    stderr: process.env.DISTRUN_UI_SERVER_LOG ? 'pipe' : 'ignore',
    env: { ...process.env, DISTRUN_UI_PORT: port, DISTRUN_UI_TOKEN: token }
  }
};
