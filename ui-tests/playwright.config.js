/**
 * galata / Playwright configuration: Debian's Chromium (never Playwright's own download),
 * no video (it needs Playwright's ffmpeg), and a JupyterLab started with a token.
 */
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

const port = process.env.DISTRUN_UI_PORT || '18888';
const token = process.env.DISTRUN_UI_TOKEN || 'distrun-ui-tests';

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
    reuseExistingServer: !process.env.CI,
    // The server's log drowns the results; DISTRUN_UI_SERVER_LOG=1 shows it.
    stderr: process.env.DISTRUN_UI_SERVER_LOG ? 'pipe' : 'ignore',
    env: { ...process.env, DISTRUN_UI_PORT: port, DISTRUN_UI_TOKEN: token }
  }
};
