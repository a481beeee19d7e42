/**
 * @jest-environment jsdom
 */
import {
  appendFrameLine,
  cellLine,
  codePath,
  GOTO_SOURCE_EVENT,
  ISourceFrame,
  sourceFrame
} from '../sourceframes';

const JOB = 'train-x1y2z';

describe('sourceFrame', () => {
  it("finds CPython's frame of the cell on the local engine and in a pod", () => {
    const local = `  File "/home/a/.local/share/distrun/jobs/${JOB}/code/main.py", line 12, in <module>`;
    expect(sourceFrame(local, JOB)).toEqual({
      frame: { jobId: JOB, path: 'main.py', line: 12 },
      start: 2,
      end: local.indexOf(', in')
    });
    const pod = '  File "/distrun/code/main.py", line 3, in <module>';
    expect(sourceFrame(pod, JOB)?.frame).toEqual({
      jobId: JOB,
      path: 'main.py',
      line: 3
    });
  });

  it("finds IPython's frame of a main.ipy and a shipped file's frame", () => {
    const ipython = `File /s/jobs/${JOB}/code/main.ipy:7`;
    expect(sourceFrame(ipython, JOB)?.frame.line).toBe(7);
    const shipped = `  File "/distrun/code/pkg/util.py", line 40, in f`;
    expect(sourceFrame(shipped, JOB)?.frame.path).toBe('pkg/util.py');
  });

  it('ignores frames outside the job: libraries, other jobs, distrun support files', () => {
    for (const line of [
      '  File "/usr/lib/python3.11/site-packages/torch/main.py", line 1, in f',
      '  File "/s/jobs/other-abcde/code/main.py", line 1, in <module>',
      '  File "/distrun/code/.distrun/launch.py", line 9, in <module>',
      '  File "/x/distrun/code/main.py", line 2, in <module>',
      'File is missing',
      '    print("File")'
    ]) {
      expect(sourceFrame(line, JOB)).toBeNull();
    }
  });

  it('never yields a path that leaves the code directory', () => {
    expect(codePath(`/s/jobs/${JOB}/code/../../etc/passwd`, JOB)).toBeNull();
  });
});

describe('cellLine', () => {
  it('maps a line of selected cells joined by newlines to its cell', () => {
    const sources = [
      '%framework=generic\n%worker=2',
      'import os',
      'x = 1\ny = 0\nx / y'
    ];
    expect(cellLine(sources, 1)).toEqual({ index: 0, line: 1 });
    expect(cellLine(sources, 2)).toEqual({ index: 0, line: 2 });
    expect(cellLine(sources, 3)).toEqual({ index: 1, line: 1 });
    expect(cellLine(sources, 6)).toEqual({ index: 2, line: 3 });
    expect(cellLine(sources, 60)).toEqual({ index: 2, line: 3 });
  });
});

describe('appendFrameLine', () => {
  it("links the frame's location and asks for the source when clicked", () => {
    const node = document.createElement('pre');
    const line = `  File "/distrun/code/main.py", line 5, in <module>`;
    expect(appendFrameLine(node, line, JOB)).toBe(true);
    expect(node.textContent).toBe(line);
    const asked: ISourceFrame[] = [];
    document.body.append(node);
    document.addEventListener(GOTO_SOURCE_EVENT, event =>
      asked.push((event as CustomEvent<ISourceFrame>).detail)
    );
    (node.querySelector('.jp-distrun-frame-link') as HTMLElement).click();
    expect(asked).toEqual([{ jobId: JOB, path: 'main.py', line: 5 }]);
  });

  it('appends nothing for a line that is not a frame of the job', () => {
    const node = document.createElement('pre');
    expect(appendFrameLine(node, 'step 3 loss=0.5', JOB)).toBe(false);
    expect(node.childNodes.length).toBe(0);
  });
});
