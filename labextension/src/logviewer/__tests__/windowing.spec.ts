import {
  MAX_SPACER_HEIGHT,
  rowAtScroll,
  scrollTopForRow,
  spacerHeight,
  windowAt
} from '../windowing';

const ROW = 20;

describe('spacerHeight', () => {
  it('is every row together while that fits', () => {
    expect(spacerHeight(100, ROW)).toBe(2000);
  });

  it('stops growing at the cap', () => {
    expect(spacerHeight(10_000_000, ROW)).toBe(MAX_SPACER_HEIGHT);
  });
});

describe('windowAt', () => {
  it('renders nothing for no rows', () => {
    expect(windowAt(0, 400, 0, ROW)).toEqual({ first: 0, last: 0, top: 0 });
  });

  it('renders the rows in view and the overscan, at their own offset', () => {
    expect(windowAt(1000, 400, 1000, ROW, 5)).toEqual({
      first: 45,
      last: 75,
      top: 900
    });
  });

  it('clamps the overscan at both ends', () => {
    expect(windowAt(0, 400, 10, ROW, 5)).toEqual({
      first: 0,
      last: 10,
      top: 0
    });
  });

  it('renders a million rows as a window of a few dozen', () => {
    const rows = 1_000_000;
    const viewport = 600;
    const end = spacerHeight(rows, ROW) - viewport;
    const last = windowAt(end, viewport, rows, ROW, 8);
    expect(last.last).toBe(rows);
    expect(last.last - last.first).toBeLessThanOrEqual(
      viewport / ROW + 2 * 8 + 1
    );
  });

  it('maps a capped spacer onto every row', () => {
    const rows = 5_000_000; // 100 million px of rows, ten times the cap
    const viewport = 500;
    const range = MAX_SPACER_HEIGHT - viewport;
    expect(rowAtScroll(0, viewport, rows, ROW)).toBe(0);
    expect(rowAtScroll(range, viewport, rows, ROW)).toBe(rows - viewport / ROW);
    expect(rowAtScroll(range / 2, viewport, rows, ROW)).toBeCloseTo(
      (rows - viewport / ROW) / 2
    );
    // The last row's bottom lands on the viewport's bottom.
    const window = windowAt(range, viewport, rows, ROW, 0);
    const lastRowBottom = window.top + (window.last - window.first) * ROW;
    expect(lastRowBottom).toBeCloseTo(range + viewport);
    // The row drawn at the viewport's top is the row the offset maps to.
    const middle = windowAt(range / 3, viewport, rows, ROW, 0);
    const exact = rowAtScroll(range / 3, viewport, rows, ROW);
    expect(middle.top + (exact - middle.first) * ROW).toBeCloseTo(range / 3);
  });

  it('clamps an offset past the end', () => {
    expect(windowAt(1e9, 400, 100, ROW, 0)).toEqual(
      windowAt(2000 - 400, 400, 100, ROW, 0)
    );
  });
});

describe('scrollTopForRow', () => {
  it('is the row offset while the spacer is not capped', () => {
    expect(scrollTopForRow(30, 400, 1000, ROW)).toBe(600);
  });

  it('clamps to the scroll range', () => {
    expect(scrollTopForRow(-5, 400, 1000, ROW)).toBe(0);
    expect(scrollTopForRow(999, 400, 1000, ROW)).toBe(20000 - 400);
  });

  it('is 0 when every row fits', () => {
    expect(scrollTopForRow(3, 400, 10, ROW)).toBe(0);
  });

  it('inverts rowAtScroll on a capped spacer', () => {
    const rows = 3_000_000;
    const top = scrollTopForRow(1_234_567, 700, rows, ROW);
    expect(rowAtScroll(top, 700, rows, ROW)).toBeCloseTo(1_234_567, 3);
  });
});
