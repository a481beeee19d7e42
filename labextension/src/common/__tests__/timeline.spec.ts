import { attemptSpans, formatClock, formatSeconds } from '../timeline';
import { ITimelineEvent } from '../model';

const trans = {
  __: (msgid: string, ...args: unknown[]) =>
    args.reduce<string>(
      (text, arg, i) => text.replace(`%${i + 1}`, String(arg)),
      msgid
    )
};

function event(
  time: number,
  kind: string,
  attempt: number,
  text = kind
): ITimelineEvent {
  return {
    time,
    kind,
    attempt,
    text,
    replica: null,
    exit_code: null,
    signal: null,
    oom: false,
    step: null
  };
}

describe('attemptSpans', () => {
  it('gives each attempt its start, its end and why it ended', () => {
    const events = [
      event(100, 'submitted', 1),
      event(100.5, 'started', 1),
      event(110, 'failed', 1, 'worker-1 killed by SIGKILL'),
      event(110.01, 'restarting', 1),
      event(110.3, 'started', 2),
      event(111, 'resumed', 2, 'resumed from step 40'),
      event(130, 'ended', 2, 'the job succeeded')
    ];
    expect(attemptSpans(events)).toEqual([
      {
        attempt: 1,
        start: 100.5,
        end: 110,
        outcome: 'failed',
        reason: 'worker-1 killed by SIGKILL'
      },
      {
        attempt: 2,
        start: 110.3,
        end: 130,
        outcome: 'ended',
        reason: 'the job succeeded'
      }
    ]);
  });

  it('leaves the running attempt open and the last failure before the end counts', () => {
    expect(
      attemptSpans([event(1, 'started', 1), event(2, 'failed', 1)]).map(
        s => s.outcome
      )
    ).toEqual(['failed']);
    const running = attemptSpans([
      event(1, 'submitted', 1),
      event(2, 'started', 1)
    ]);
    expect(running).toEqual([
      { attempt: 1, start: 2, end: null, outcome: 'running', reason: '' }
    ]);
    const failedThenEnded = attemptSpans([
      event(1, 'started', 1),
      event(2, 'failed', 1, 'exit code 3'),
      event(2.1, 'ended', 1, 'the job failed')
    ]);
    expect(failedThenEnded[0]).toMatchObject({
      outcome: 'failed',
      reason: 'exit code 3'
    });
  });

  it('has no attempt before one started', () => {
    expect(attemptSpans([event(1, 'submitted', 1)])).toEqual([]);
  });
});

describe('formatting', () => {
  it('gives seconds to the millisecond', () => {
    expect(formatSeconds(0, trans)).toBe('0.000 s');
    expect(formatSeconds(12.3456, trans)).toBe('12.346 s');
    expect(formatSeconds(185.12, trans)).toBe('3 min 05.120 s');
    expect(formatSeconds(-1, trans)).toBe('0.000 s');
  });

  it('gives the wall clock with milliseconds', () => {
    expect(
      formatClock(new Date(2026, 10, 27, 9, 5, 7, 42).getTime() / 1000)
    ).toBe('09:05:07.042');
  });
});
