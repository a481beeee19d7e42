import { IJobSpec } from '../model';
import { cellFromSpec } from '../specheader';

function spec(fields: Partial<IJobSpec>): IJobSpec {
  return {
    framework: 'pytorch',
    roles: { master: { replicas: 1 }, worker: { replicas: 2 } },
    code: 'print(1)\n',
    name: 'job',
    image: null,
    env: {},
    files: {},
    engine: null,
    namespace: null,
    restart_policy: 'Never',
    backoff_limit: 0,
    active_deadline_seconds: null,
    clean_pod_policy: 'Running',
    ttl_seconds_after_finished: null,
    queue: null,
    priority_class: null,
    ...fields
  };
}

describe('cellFromSpec', () => {
  it('writes a default spec as framework and roles only', () => {
    expect(cellFromSpec(spec({}))).toEqual({
      cell: '%framework=pytorch\n%master=1\n%worker=2\nprint(1)\n',
      overrides: {}
    });
  });

  it('writes the roles leaders first, whatever order the JSON has', () => {
    const { cell } = cellFromSpec(
      spec({
        framework: 'tensorflow',
        roles: {
          worker: { replicas: 2 },
          ps: { replicas: 1 },
          chief: { replicas: 1 }
        }
      })
    );
    expect(cell).toBe(
      '%framework=tensorflow\n%chief=1\n%ps=1\n%worker=2\nprint(1)\n'
    );
  });

  it('drops the blank lines the server left where the old header was', () => {
    const { cell } = cellFromSpec(
      spec({ code: '\n\n\nimport os\n\nprint(2)\n' })
    );
    expect(cell).toBe(
      '%framework=pytorch\n%master=1\n%worker=2\nimport os\n\nprint(2)\n'
    );
  });

  it('writes every setting that differs from its default with the header keys', () => {
    const { cell } = cellFromSpec(
      spec({
        name: 'mnist',
        engine: 'local',
        namespace: 'team-a',
        image: 'python:3.11',
        roles: {
          master: {
            replicas: 1,
            resources: { cpu: '2', memory: '4Gi', gpu: 1 }
          },
          worker: {
            replicas: 3,
            resources: { cpu: null, memory: '2Gi', gpu: 0 }
          }
        },
        restart_policy: 'OnFailure',
        backoff_limit: 2,
        active_deadline_seconds: 600,
        clean_pod_policy: 'All',
        ttl_seconds_after_finished: 3600,
        queue: 'default',
        priority_class: 'high',
        env: { A: '1', B: 'x y' }
      })
    );
    expect(cell.split('\n')).toEqual([
      '%framework=pytorch',
      '%name=mnist',
      '%engine=local',
      '%namespace=team-a',
      '%image=python:3.11',
      '%master=1;%cpu=2;%memory=4Gi;%gpu=1',
      '%worker=3;%memory=2Gi',
      '%restartPolicy=OnFailure',
      '%backoffLimit=2',
      '%deadline=600',
      '%cleanPolicy=all',
      '%ttl=3600',
      '%queue=default',
      '%priorityClass=high',
      '%env=A=1',
      '%env=B=x y',
      'print(1)',
      ''
    ]);
  });

  it('sends what a header cannot carry as overrides', () => {
    const files = { 'data.csv': 'YSxiCg==' };
    const result = cellFromSpec(
      spec({ env: { PAD: ' x ', OK: 'y', NL: 'a\nb' }, files })
    );
    expect(result.overrides).toEqual({
      env: { PAD: ' x ', NL: 'a\nb' },
      files
    });
    expect(result.cell).toContain('%env=OK=y\n');
    expect(result.cell).not.toContain('PAD');
  });
});
