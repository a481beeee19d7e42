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
      'myjob-abcde',
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

  it("links the frames of the job's own code, the innermost from the summary", () => {
    const lines = [
      'Traceback (most recent call last):',
      '  File "/state/jobs/myjob-abcde/code/main.py", line 4, in <module>',
      '    train()',
      '  File "/state/jobs/myjob-abcde/code/lib/model.py", line 12, in train',
      '    step()',
      '  File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", line 5, in step',
      'ValueError: bad batch 7'
    ];
    const [shown] = renderTracebacks(
      [{ replicas: ['worker-0'], lines }],
      'myjob-abcde',
      trans
    );
    const links = [...shown.querySelectorAll('pre .jp-distrun-frame-link')];
    expect(
      links.map(l => [(l as HTMLElement).dataset.path, l.textContent])
    ).toEqual([
      ['main.py', 'File "/state/jobs/myjob-abcde/code/main.py", line 4'],
      [
        'lib/model.py',
        'File "/state/jobs/myjob-abcde/code/lib/model.py", line 12'
      ]
    ]);
    expect(shown.querySelector('pre')?.textContent).toBe(lines.join('\n'));
    const summaryLink = shown.querySelector('summary .jp-distrun-frame-link');
    expect(summaryLink?.textContent).toBe('lib/model.py, line 12');
    expect(shown.querySelector('summary')?.textContent).toBe(
      'worker-0: ValueError: bad batch 7 (lib/model.py, line 12)'
    );
  });
});
