import {
  choiceFromSpec,
  choiceToOverrides,
  hasMagicHeader,
  hasSweepHeader
} from '../header';

describe('hasMagicHeader', () => {
  it.each([
    '%framework=generic\n%worker=2\nprint(1)',
    '%%distrun --framework pytorch --workers 2\nprint(1)',
    '%%distrun\nprint(1)',
    '\n# train\n%worker = 2\nprint(1)',
    '% framework=pytorch'
  ])('sees a header in %p', cell => {
    expect(hasMagicHeader(cell)).toBe(true);
  });

  it.each([
    'print(1)',
    '',
    '%env X=1\nprint(1)',
    '%time f()',
    '%%time\nf()',
    '%%distrunner\nf()',
    'x = 1\n%framework=pytorch'
  ])('sees no header in %p', cell => {
    expect(hasMagicHeader(cell)).toBe(false);
  });
});

describe('choiceToOverrides', () => {
  it('sends the framework and each role count', () => {
    expect(
      choiceToOverrides({
        framework: 'pytorch',
        replicas: { master: 1, worker: 3 }
      })
    ).toEqual({
      framework: 'pytorch',
      roles: { master: { replicas: 1 }, worker: { replicas: 3 } }
    });
  });

  it('leaves roles to the server defaults when none are chosen', () => {
    expect(choiceToOverrides({ framework: 'generic', replicas: {} })).toEqual({
      framework: 'generic'
    });
  });

  it('drops counts that are not whole non-negative numbers', () => {
    expect(
      choiceToOverrides({
        framework: 'generic',
        replicas: { worker: 1.5, ps: -1 }
      })
    ).toEqual({
      framework: 'generic'
    });
  });
});

describe('choiceFromSpec', () => {
  it('reads the framework and replica counts back from a job spec', () => {
    expect(
      choiceFromSpec({
        framework: 'tensorflow',
        roles: { worker: { replicas: 2 }, ps: { replicas: 1 } }
      })
    ).toEqual({ framework: 'tensorflow', replicas: { worker: 2, ps: 1 } });
  });
});

describe('hasSweepHeader', () => {
  it.each([
    '%framework=pytorch\n%sweep.lr=0.1,0.01\n%objective=loss:min\nprint(1)',
    '# sweep\n%sweep.lr = uniform(0,1)\nprint(1)',
    '%%distrun --framework pytorch --sweep lr=0.1,0.01\nprint(1)',
    '%%distrun --sweep=lr=0.1,0.01\nprint(1)'
  ])('sees a sweep in %p', cell => {
    expect(hasSweepHeader(cell)).toBe(true);
  });

  it.each([
    '%framework=pytorch\n%worker=2\nprint(1)',
    '%%distrun --framework pytorch\n%sweep.lr=0.1\nprint(1)',
    'print(1)\n%sweep.lr=0.1',
    '%env X=1\n%sweep.lr=0.1'
  ])('sees no sweep in %p', cell => {
    expect(hasSweepHeader(cell)).toBe(false);
  });
});
