import {
  extentOf,
  formatTick,
  linearScale,
  niceTicks,
  padExtent,
  polylinePoints,
  tickStep
} from '../chart';

describe('extentOf', () => {
  it('spans every array', () => {
    expect(extentOf([[3, 1], [], [7, -2]])).toEqual({ min: -2, max: 7 });
  });

  it('is null when there is no value', () => {
    expect(extentOf([[], []])).toBeNull();
  });
});

describe('padExtent', () => {
  it('leaves a real range alone', () => {
    expect(padExtent({ min: 1, max: 2 })).toEqual({ min: 1, max: 2 });
  });

  it('widens a constant around its value', () => {
    expect(padExtent({ min: 5, max: 5 })).toEqual({ min: 4.5, max: 5.5 });
    expect(padExtent({ min: 0, max: 0 })).toEqual({ min: -1, max: 1 });
  });
});

describe('ticks', () => {
  it('steps by 1, 2 or 5 times a power of ten', () => {
    expect(tickStep(0, 1, 5)).toBe(0.2);
    expect(tickStep(0, 100, 5)).toBe(20);
    expect(tickStep(0, 7, 5)).toBe(2);
    expect(tickStep(0, 0.03, 3)).toBe(0.01);
  });

  it('lists round values inside the range without float drift', () => {
    expect(niceTicks(0, 1, 5)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks(0.13, 0.71, 5)).toEqual([0.2, 0.4, 0.6]);
    expect(niceTicks(0.13, 0.71, 10)).toEqual([0.2, 0.3, 0.4, 0.5, 0.6, 0.7]);
    expect(niceTicks(-15, 42, 4)).toEqual([0, 20, 40]);
  });

  it('gives one tick for an empty range', () => {
    expect(niceTicks(3, 3)).toEqual([3]);
  });

  it('labels with the decimals the step needs', () => {
    expect(formatTick(0.3, 0.1)).toBe('0.3');
    expect(formatTick(120, 20)).toBe('120');
    expect(formatTick(0.25, 0.05)).toBe('0.25');
    expect(formatTick(0, 0.1)).toBe('0');
    expect(formatTick(2_500_000, 500_000)).toBe('2.5e+6');
    expect(formatTick(0.00002, 0.00001)).toBe('2.0e-5');
  });
});

describe('linearScale', () => {
  it('maps the domain onto the range, inverted for y', () => {
    const y = linearScale({ min: 0, max: 10 }, 100, 0);
    expect(y(0)).toBe(100);
    expect(y(10)).toBe(0);
    expect(y(2.5)).toBe(75);
  });

  it('puts everything mid-range for an empty domain', () => {
    expect(linearScale({ min: 1, max: 1 }, 0, 10)(1)).toBe(5);
  });
});

describe('polylinePoints', () => {
  it('joins the scaled points', () => {
    const x = linearScale({ min: 0, max: 2 }, 0, 100);
    const y = linearScale({ min: 0, max: 1 }, 50, 0);
    expect(polylinePoints([0, 1, 2], [0, 0.5, 1], x, y)).toBe(
      '0.0,50.0 50.0,25.0 100.0,0.0'
    );
  });
});
