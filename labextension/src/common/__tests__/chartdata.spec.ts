import {
  alignSeries,
  drawLimits,
  formatValue,
  IChartSeries,
  ILimitCanvas,
  latest,
  legendValue,
  pointCounts,
  yRange
} from '../chartdata';

const limit = (label: string, y: number) => ({ label, y });

function series(label: string, xs: number[], ys: number[]): IChartSeries {
  return { label, colorClass: 'jp-distrun-c0', xs, ys };
}

describe('alignSeries', () => {
  it('passes series that share their x values through as they are', () => {
    const xs = [1, 2, 3];
    const data = alignSeries([
      series('worker-0', xs, [5, 6, 7]),
      series('worker-1', [1, 2, 3], [8, 9, 10])
    ]);
    expect(data).toEqual([
      [1, 2, 3],
      [5, 6, 7],
      [8, 9, 10]
    ]);
    expect(data[0]).toBe(xs);
  });

  it('merges different x values in order, null where a series has no point', () => {
    expect(
      alignSeries([
        series('worker-0', [0, 10, 20], [1, 2, 3]),
        series('worker-1', [5, 10], [7, 8])
      ])
    ).toEqual([
      [0, 5, 10, 20],
      [1, null, 2, 3],
      [null, 7, 8, null]
    ]);
  });

  it('sorts a series whose steps went back (a restart), keeping the last value of a step', () => {
    expect(alignSeries([series('worker-0', [1, 2, 1], [10, 20, 30])])).toEqual([
      [1, 2],
      [30, 20]
    ]);
  });

  it('is one empty x array without series', () => {
    expect(alignSeries([])).toEqual([[]]);
  });
});

describe('pointCounts', () => {
  it('counts each series own points', () => {
    expect(
      pointCounts([series('a', [1, 2], [1, 2]), series('b', [3], [1])])
    ).toEqual([2, 1]);
  });
});

describe('yRange', () => {
  it('pads the data range a little', () => {
    expect(yRange(0, 100, [])).toEqual([-5, 105]);
  });

  it('takes in every limit', () => {
    const [min, max] = yRange(100, 200, [limit('limit', 1000)]);
    expect(min).toBeLessThan(100);
    expect(max).toBeGreaterThan(1000);
  });

  it('widens a constant around its value', () => {
    expect(yRange(5, 5, [])).toEqual([4.5, 5.5]);
    expect(yRange(0, 0, [])).toEqual([-1, 1]);
  });

  it('is [0, 1] without data or limits', () => {
    expect(yRange(null, null, [])).toEqual([0, 1]);
  });
});

describe('legendValue', () => {
  const column = [1, 2.5, null];

  it('shows the value under the cursor', () => {
    expect(legendValue(column, 1, 0)).toBe('1');
  });

  it('shows the latest value with the cursor away', () => {
    expect(legendValue(column, null, null)).toBe('2.5');
  });

  it('shows a dash where the series has no point', () => {
    expect(legendValue(column, null, 2)).toBe('–');
    expect(legendValue([null], null, null)).toBe('–');
  });
});

describe('formatValue and latest', () => {
  it('keeps four significant digits, exponents at the extremes', () => {
    expect(formatValue(0.123456)).toBe('0.1235');
    expect(formatValue(1234.5678)).toBe('1235');
    expect(formatValue(0)).toBe('0');
    expect(formatValue(2.5e-5)).toBe('2.500e-5');
    expect(formatValue(3e7)).toBe('3.000e+7');
  });

  it('finds the last value that is there', () => {
    expect(latest([1, null, 3, undefined])).toBe(3);
    expect(latest([])).toBeNull();
  });
});

describe('drawLimits', () => {
  function canvas(): { u: ILimitCanvas; calls: string[] } {
    const calls: string[] = [];
    const ctx = {
      strokeStyle: '' as unknown,
      fillStyle: '' as unknown,
      lineWidth: 1,
      font: '',
      textAlign: 'left' as CanvasTextAlign,
      save: () => calls.push('save'),
      restore: () => calls.push('restore'),
      beginPath: () => calls.push('beginPath'),
      moveTo: (x: number, y: number) => calls.push(`moveTo ${x} ${y}`),
      lineTo: (x: number, y: number) => calls.push(`lineTo ${x} ${y}`),
      stroke: () => calls.push('stroke'),
      fillText: (text: string, x: number, y: number) =>
        calls.push(`fillText ${text} ${x} ${y}`),
      setLineDash: (dash: number[]) => calls.push(`dash ${dash.join(',')}`)
    };
    const u: ILimitCanvas = {
      ctx: ctx as unknown as ILimitCanvas['ctx'],
      bbox: { left: 10, top: 0, width: 200, height: 100 },
      valToPos: (value: number) => 100 - value
    };
    return { u, calls };
  }

  it('draws each limit dashed across the plot, labelled at its right end', () => {
    const { u, calls } = canvas();
    drawLimits(u, [limit('worker limit', 60), limit('master limit', 20)], {
      color: 'red',
      font: '11px sans',
      pixelRatio: 2
    });
    expect(calls).toEqual([
      'save',
      'dash 12,8',
      'beginPath',
      'moveTo 10 40',
      'lineTo 210 40',
      'stroke',
      'fillText worker limit 202 32',
      'beginPath',
      'moveTo 10 80',
      'lineTo 210 80',
      'stroke',
      'fillText master limit 202 72',
      'restore'
    ]);
    expect(u.ctx.strokeStyle).toBe('red');
  });

  it('draws nothing without limits', () => {
    const { u, calls } = canvas();
    drawLimits(u, [], { color: 'red', font: '', pixelRatio: 1 });
    expect(calls).toEqual([]);
  });
});
