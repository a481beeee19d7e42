/**
 * The arithmetic of a virtualised list: which rows to render for a scroll offset, and where.
 *
 * Rows have one fixed height. A spacer as tall as every row together gives the scrollbar its
 * range; the visible rows sit in one absolutely positioned block moved to the scroll offset.
 * Browsers cap an element's height (Firefox near 17.9 million px, Chrome near 33.5 million),
 * so past MAX_SPACER_HEIGHT the spacer stops growing and the scroll offset is mapped onto the
 * rows proportionally: scrolling still reaches every row, one pixel then being several rows.
 */

/** The tallest spacer we make, well under every browser's limit. */
export const MAX_SPACER_HEIGHT = 10_000_000;

/** Rows rendered beyond each edge of the viewport, so fast scrolling shows no gaps. */
export const OVERSCAN_ROWS = 8;

export interface IWindow {
  /** The first row to render. */
  first: number;
  /** One past the last row to render. */
  last: number;
  /** Where the first row's top goes, in spacer pixels. */
  top: number;
}

/** The spacer height for `rows` rows of `rowHeight` px. */
export function spacerHeight(rows: number, rowHeight: number): number {
  return Math.min(rows * rowHeight, MAX_SPACER_HEIGHT);
}

/** The scroll range: how far the viewport's top can go. */
function scrollRange(
  rows: number,
  rowHeight: number,
  viewport: number
): number {
  return Math.max(0, spacerHeight(rows, rowHeight) - viewport);
}

/** The row at the viewport's top for a scroll offset, with its fraction. */
export function rowAtScroll(
  scrollTop: number,
  viewport: number,
  rows: number,
  rowHeight: number
): number {
  const range = scrollRange(rows, rowHeight, viewport);
  const rowRange = Math.max(0, rows - viewport / rowHeight);
  if (range === 0) {
    return 0;
  }
  const clamped = Math.min(Math.max(scrollTop, 0), range);
  return (clamped / range) * rowRange;
}

/** The rows to render at a scroll offset, and where they go. */
export function windowAt(
  scrollTop: number,
  viewport: number,
  rows: number,
  rowHeight: number,
  overscan: number = OVERSCAN_ROWS
): IWindow {
  if (rows === 0) {
    return { first: 0, last: 0, top: 0 };
  }
  const top = Math.min(
    Math.max(scrollTop, 0),
    scrollRange(rows, rowHeight, viewport)
  );
  const exact = rowAtScroll(top, viewport, rows, rowHeight);
  const first = Math.max(0, Math.floor(exact) - overscan);
  const last = Math.min(
    rows,
    Math.ceil(exact + viewport / rowHeight) + overscan
  );
  return { first, last, top: top - (exact - first) * rowHeight };
}

/** The scroll offset that puts `row` at the viewport's top (clamped to the range). */
export function scrollTopForRow(
  row: number,
  viewport: number,
  rows: number,
  rowHeight: number
): number {
  const range = scrollRange(rows, rowHeight, viewport);
  const rowRange = Math.max(0, rows - viewport / rowHeight);
  if (range === 0 || rowRange === 0) {
    return 0;
  }
  const clamped = Math.min(Math.max(row, 0), rowRange);
  return (clamped / rowRange) * range;
}
