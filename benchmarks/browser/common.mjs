/**
 * What the browser benchmarks share: Debian's Chromium launched headless the same way, and
 * the median of their samples.
 */

/** A headless Chromium at `executablePath`, through playwright-core's `chromium`. */
export function launchChromium(chromium, executablePath) {
  return chromium.launch({
    executablePath,
    args: [
      '--no-sandbox',
      '--headless',
      '--disable-gpu',
      '--no-first-run',
      '--disable-sync'
    ]
  });
}

export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2
    ? sorted[middle]
    : (sorted[middle - 1] + sorted[middle]) / 2;
}
