import { EndAfterLines } from '../endstatus';
import { IJob, JobState } from '../model';

function job(state: JobState): IJob {
  return { id: 'j', state } as unknown as IJob;
}

describe('EndAfterLines', () => {
  it('shows a running status at once', () => {
    const shown = new EndAfterLines();
    expect(shown.status(job('running'))?.state).toBe('running');
  });

  it('holds the end until the stream ends, then gives it once', () => {
    const shown = new EndAfterLines();
    expect(shown.status(job('running'))?.state).toBe('running');
    expect(shown.status(job('succeeded'))).toBeNull();
    expect(shown.end()?.state).toBe('succeeded');
    expect(shown.end()).toBeNull();
  });

  it('keeps the latest end held (a cancel answered before the stream said so)', () => {
    const shown = new EndAfterLines();
    expect(shown.status(job('cancelled'))).toBeNull();
    expect(shown.status(job('failed'))).toBeNull();
    expect(shown.end()?.state).toBe('failed');
  });

  it('shows an end that comes after the stream ended at once', () => {
    const shown = new EndAfterLines();
    expect(shown.end()).toBeNull();
    expect(shown.status(job('succeeded'))?.state).toBe('succeeded');
  });
});
