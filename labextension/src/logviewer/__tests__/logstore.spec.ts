import { ERROR_PATTERN, LogStore, LogView } from '../logstore';
import { LogTuple } from '../../common/model';

function lines(replica: string, texts: string[], firstSeq = 0): LogTuple[] {
  return texts.map((text, i) => [replica, firstSeq + i, 0, text]);
}

function append(view: LogView, batch: LogTuple[]): void {
  const from = view.store.end;
  const dropped = view.store.append(batch);
  view.update(from, dropped);
}

function shown(view: LogView): string[] {
  const rows: string[] = [];
  for (let row = 0; row < view.rows; row++) {
    const line = view.lineAt(row);
    const store = view.store;
    rows.push(`${store.replicas[store.replicaOf(line)]}|${store.text(line)}`);
  }
  return rows;
}

describe('LogStore', () => {
  it('keeps lines in arrival order with their replica', () => {
    const store = new LogStore();
    store.append([
      ['worker-0', 0, 0, 'a'],
      ['master-0', 0, 0, 'b'],
      ['worker-0', 1, 0, 'c']
    ]);
    expect(store.size).toBe(3);
    expect(store.replicas).toEqual(['worker-0', 'master-0']);
    expect([0, 1, 2].map(i => store.text(i))).toEqual(['a', 'b', 'c']);
    expect([0, 1, 2].map(i => store.replicaOf(i))).toEqual([0, 1, 0]);
  });

  it('holds a million lines', () => {
    const store = new LogStore();
    const batch: LogTuple[] = [];
    for (let i = 0; i < 1_000_000; i++) {
      batch.push([`worker-${i % 3}`, Math.floor(i / 3), 0, `line ${i}`]);
    }
    store.append(batch);
    expect(store.size).toBe(1_000_000);
    expect(store.text(999_999)).toBe('line 999999');
    expect(store.replicaOf(999_999)).toBe(0);
  });

  it('drops the oldest quarter when full, keeping absolute line numbers', () => {
    const store = new LogStore(8);
    store.append(lines('w', ['0', '1', '2', '3', '4', '5', '6', '7']));
    expect(store.append(lines('w', ['8'], 8))).toBe(3);
    expect(store.first).toBe(3);
    expect(store.end).toBe(9);
    expect(store.text(3)).toBe('3');
    expect(store.text(8)).toBe('8');
    expect(store.replicaOf(8)).toBe(0);
  });

  it('drops the held lines with the skipped ones, so numbers stay gap-free', () => {
    const store = new LogStore();
    store.append(lines('w', ['a', 'b']));
    store.skip(5);
    expect(store.size).toBe(0);
    store.append(lines('w', ['x'], 7));
    expect(store.first).toBe(7);
    expect(store.text(7)).toBe('x');
    expect(store.replicaOf(7)).toBe(0);
  });

  it('refuses a tiny capacity', () => {
    expect(() => new LogStore(1)).toThrow(RangeError);
  });
});

describe('LogView', () => {
  it('shows every line while no replica is hidden', () => {
    const view = new LogView(new LogStore());
    append(view, [...lines('a', ['1', '2']), ...lines('b', ['3'])]);
    expect(shown(view)).toEqual(['a|1', 'a|2', 'b|3']);
  });

  it('hides and shows a replica, also for lines arriving later', () => {
    const view = new LogView(new LogStore());
    append(view, [
      ['a', 0, 0, '1'],
      ['b', 0, 0, '2'],
      ['a', 1, 0, '3']
    ]);
    view.setHidden('a', true);
    expect(shown(view)).toEqual(['b|2']);
    append(view, [
      ['b', 1, 0, '4'],
      ['a', 2, 0, '5']
    ]);
    expect(shown(view)).toEqual(['b|2', 'b|4']);
    expect(view.rowOf(3)).toBe(1);
    view.setHidden('a', false);
    expect(shown(view)).toEqual(['a|1', 'b|2', 'a|3', 'b|4', 'a|5']);
  });

  it('can hide a replica that has no line yet', () => {
    const view = new LogView(new LogStore());
    view.setHidden('late', true);
    append(view, [...lines('a', ['1']), ...lines('late', ['2'])]);
    expect(shown(view)).toEqual(['a|1']);
  });

  it('finds matches case-insensitively among the shown rows and wraps around', () => {
    const view = new LogView(new LogStore());
    append(view, [
      ['a', 0, 0, 'Loss=1'],
      ['b', 0, 0, 'nothing'],
      ['a', 1, 0, 'loss=2'],
      ['b', 1, 0, 'LOSS=3']
    ]);
    view.setQuery('loss');
    expect(view.matchCount).toBe(3);
    expect([0, 1, 2].map(i => view.matchRow(i))).toEqual([0, 2, 3]);
    expect(view.nextMatch(1)).toBe(1);
    expect(view.nextMatch(3)).toBe(2);
    expect(view.previousMatch(0)).toBe(2);
    expect(view.previousMatch(2)).toBe(0);
    expect(view.nextMatch(view.rows)).toBe(0);
    expect(view.previousMatch(view.rows)).toBe(2);
    view.setHidden('b', true);
    expect(view.matchCount).toBe(2);
    expect(view.matchRow(1)).toBe(1);
    append(view, lines('a', ['more LOSS'], 2));
    expect(view.matchCount).toBe(3);
    view.setQuery('');
    expect(view.matchCount).toBe(0);
    expect(view.nextMatch(0)).toBe(-1);
  });

  it('marks where the search matches in a line', () => {
    const view = new LogView(new LogStore());
    view.setQuery('ab');
    expect(view.highlights('xAbyabab')).toEqual([
      [1, 3],
      [4, 6],
      [6, 8]
    ]);
  });

  it('finds the first error among the shown replicas', () => {
    const view = new LogView(new LogStore());
    append(view, [
      ['a', 0, 0, 'ok'],
      ['b', 0, 0, 'Traceback (most recent call last):'],
      ['a', 1, 0, 'RuntimeError: boom']
    ]);
    expect(view.firstErrorRow()).toBe(1);
    view.setHidden('b', true);
    expect(view.firstErrorRow()).toBe(1);
    expect(shown(view)[1]).toBe('a|RuntimeError: boom');
    view.setHidden('a', true);
    expect(view.firstErrorRow()).toBe(-1);
  });

  it('forgets rows and matches of dropped lines', () => {
    const view = new LogView(new LogStore(8));
    append(view, lines('a', ['x0', 'x1', 'x2', 'x3', 'x4', 'x5', 'x6', 'x7']));
    view.setHidden('b', true);
    view.setQuery('x');
    expect(view.matchCount).toBe(8);
    append(view, lines('a', ['Error: late', 'x9'], 8));
    expect(view.store.first).toBe(4);
    expect(view.rows).toBe(6);
    expect(view.lineAt(0)).toBe(4);
    expect(view.matchCount).toBe(5);
    expect(view.firstErrorRow()).toBe(4);
  });
});

describe('ERROR_PATTERN', () => {
  it.each([
    'Traceback (most recent call last):',
    'RuntimeError: NCCL error',
    'ValueError',
    'torch.distributed.DistBackendError: oops',
    'Error: something',
    'raise Exception("x")',
    'FAILED test_x.py::test_y'
  ])('matches %s', line => {
    expect(ERROR_PATTERN.test(line)).toBe(true);
  });

  it.each([
    'error_rate=0.1',
    'finished with 0 errors',
    'failed=0',
    'ErrorHandler registered',
    'no exceptions raised'
  ])('does not match %s', line => {
    expect(ERROR_PATTERN.test(line)).toBe(false);
  });
});
