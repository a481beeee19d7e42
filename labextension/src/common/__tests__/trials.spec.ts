import { IJob, IJobSpec, trialOf, withoutTrialEnv } from '../model';

function job(env: Record<string, string>): IJob {
  return {
    id: 'fit-t1-aaaaa',
    spec: { framework: 'pytorch', roles: {}, env }
  } as unknown as IJob;
}

describe('sweep trials among jobs', () => {
  it('reads the sweep and trial number from the environment', () => {
    expect(trialOf(job({ DISTRUN_SWEEP: 'sweep-abc123/4' }))).toEqual([
      'sweep-abc123',
      4
    ]);
    expect(trialOf(job({}))).toBeNull();
    expect(trialOf(job({ DISTRUN_SWEEP: 'sweep-abc123' }))).toBeNull();
  });

  it('runs a trial again on its own: its parameters stay, its sweep goes', () => {
    const spec: IJobSpec = {
      framework: 'pytorch',
      roles: {},
      env: {
        DISTRUN_SWEEP: 's/1',
        DISTRUN_SWEEP_SPEC: '{}',
        DISTRUN_PARAMS: '{"lr":0.1}',
        OTHER: 'x'
      }
    };
    expect(withoutTrialEnv(spec).env).toEqual({
      DISTRUN_PARAMS: '{"lr":0.1}',
      OTHER: 'x'
    });
    expect(spec.env).toHaveProperty('DISTRUN_SWEEP');
  });
});
