/**
 * @jest-environment jsdom
 */
import { renderTracebacks } from '../tracebacks';
import { ITrans } from '../trans';

const trans: ITrans = {
  __: (msgid: string, ...args: any[]) =>
    msgid.replace(/%(\d+)/g, (_, n) => String(args[Number(n) - 1]))
};

describe('renderTracebacks', () => {
  it('tells each traceback once, its replicas and exception line first', () => {
    const lines = [
      'Traceback (most recent call last):',
      '  File "/job/main.py", line 9, in <module>',
      'ValueError: bad batch 7'
    ];
    const shown = renderTracebacks(
      [
        { replicas: ['worker-0', 'worker-1'], lines },
        { replicas: ['worker-2'], lines: [lines[0], "KeyError: 'x'"] }
      ],
      trans
    );
    expect(
      shown.map(node => node.querySelector('summary')?.textContent)
    ).toEqual([
      'worker-0, worker-1: ValueError: bad batch 7',
      "worker-2: KeyError: 'x'"
    ]);
    expect(shown[0].querySelector('pre')?.textContent).toBe(lines.join('\n'));
    expect(shown[0].dataset.replicas).toBe('worker-0,worker-1');
  });
});
