/**
 * A job's timeline read for people: its attempts (start, end, why it ended) and its times to
 * the millisecond. Pure functions (the translation bundle passed in), unit-tested.
 */

import { ITimelineEvent } from './model';
import { ITrans } from './trans';

export type AttemptOutcome = 'running' | 'failed' | 'ended';

/** One attempt: from its start to its failure or the job's end (`end` null: still running). */
export interface IAttemptSpan {
  attempt: number;
  start: number;
  end: number | null;
  outcome: AttemptOutcome;
  /** Why it ended, in the engine's words ('' while it runs). */
  reason: string;
}

/** The attempts in order, read from the job's `started`, `failed` and `ended` events. */
export function attemptSpans(
  events: readonly ITimelineEvent[]
): IAttemptSpan[] {
  const spans: IAttemptSpan[] = [];
  for (const event of events) {
    const open = spans.find(s => s.attempt === event.attempt && s.end === null);
    if (event.kind === 'started' && !open) {
      spans.push({
        attempt: event.attempt,
        start: event.time,
        end: null,
        outcome: 'running',
        reason: ''
      });
    } else if (open && (event.kind === 'failed' || event.kind === 'ended')) {
      open.end = event.time;
      open.outcome = event.kind;
      open.reason = event.text;
    }
  }
  return spans;
}

/** `0.000 s`, `12.345 s`, `3 min 05.120 s`: to the millisecond, as the events are. */
export function formatSeconds(seconds: number, trans: ITrans): string {
  const s = Math.max(0, seconds);
  if (s < 60) {
    return trans.__('%1 s', s.toFixed(3));
  }
  const minutes = Math.floor(s / 60);
  const rest = (s - minutes * 60).toFixed(3).padStart(6, '0');
  return trans.__('%1 min %2 s', minutes, rest);
}

/** The wall clock of an event, `14:03:27.412`, in the browser's time zone. */
export function formatClock(time: number): string {
  const at = new Date(time * 1000);
  const two = (n: number) => String(n).padStart(2, '0');
  const millis = String(at.getMilliseconds()).padStart(3, '0');
  return `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}.${millis}`;
}
