import {
  applyHeader,
  defaultValues,
  formField,
  gpuExample,
  gpuOffer,
  gpuValue,
  IEngines,
  readHeader,
  reconcile,
  roleNames,
  shellWords,
  switchFramework,
  toOverrides
} from '../formmodel';

// The shape GET /distrun/engines returns (two of its frameworks).
const ENGINES: IEngines = {
  default_engine: 'local',
  engines: [
    {
      name: 'local',
      description: 'processes',
      available: true,
      reason: null,
      namespaces: []
    },
    {
      name: 'kubeflow',
      description: 'cluster',
      available: false,
      reason: 'no cluster',
      namespaces: ['team-a']
    }
  ],
  frameworks: [
    {
      name: 'pytorch',
      kubeflow_kind: 'PyTorchJob',
      default_image: 'pytorch/pytorch',
      roles: [
        {
          name: 'master',
          min_replicas: 1,
          max_replicas: 1,
          default_replicas: 1
        },
        {
          name: 'worker',
          min_replicas: 0,
          max_replicas: null,
          default_replicas: 1
        }
      ],
      completion_roles: ['master']
    },
    {
      name: 'tensorflow',
      kubeflow_kind: 'TFJob',
      default_image: 'tensorflow/tensorflow',
      roles: [
        {
          name: 'chief',
          min_replicas: 0,
          max_replicas: 1,
          default_replicas: 0
        },
        {
          name: 'ps',
          min_replicas: 0,
          max_replicas: null,
          default_replicas: 0
        },
        {
          name: 'worker',
          min_replicas: 0,
          max_replicas: null,
          default_replicas: 2
        }
      ],
      completion_roles: ['chief', 'worker']
    }
  ],
  limits: { max_replicas: 64, max_gpus_per_replica: 16 }
};
const ROLES = roleNames(ENGINES);

describe('defaultValues', () => {
  it("takes the framework's roles and default counts from the server", () => {
    const values = defaultValues(ENGINES, 'tensorflow');
    expect(Object.keys(values.roles)).toEqual(['chief', 'ps', 'worker']);
    expect(values.roles.worker.replicas).toBe(2);
    expect(values.engine).toBe('local');
  });

  it('lets the settings replicas win over the defaults', () => {
    expect(
      defaultValues(ENGINES, 'pytorch', { worker: 3 }).roles.worker.replicas
    ).toBe(3);
  });

  it('falls back to the first framework for an unknown one', () => {
    expect(defaultValues(ENGINES, 'nope').framework).toBe('pytorch');
  });
});

describe('switchFramework', () => {
  it('keeps the values of the roles both frameworks have', () => {
    const values = defaultValues(ENGINES, 'pytorch');
    values.roles.worker = {
      replicas: 5,
      cpu: '2',
      memory: '',
      gpu: '',
      gpuMemory: ''
    };
    const next = switchFramework(ENGINES, values, 'tensorflow');
    expect(next.roles.worker).toEqual({
      replicas: 5,
      cpu: '2',
      memory: '',
      gpu: '',
      gpuMemory: ''
    });
    expect(next.roles.master).toBeUndefined();
    expect(next.roles.ps.replicas).toBe(0);
  });
});

describe('toOverrides', () => {
  it('sends every field of a header-less cell', () => {
    const values = defaultValues(ENGINES, 'pytorch');
    values.roles.worker = {
      replicas: 2,
      cpu: '500m',
      memory: '1Gi',
      gpu: '1',
      gpuMemory: ''
    };
    values.image = 'python:3.11';
    expect(toOverrides(values)).toEqual({
      framework: 'pytorch',
      roles: {
        master: { replicas: 1 },
        worker: {
          replicas: 2,
          resources: { cpu: '500m', memory: '1Gi', gpu: 1 }
        }
      },
      image: 'python:3.11',
      engine: 'local'
    });
  });

  it('sends nothing for a header cell the user did not edit', () => {
    const header = readHeader('%framework=pytorch\n%worker=2\nx', ROLES)!;
    const values = applyHeader(ENGINES, header, 'tensorflow');
    expect(toOverrides(values, applyHeader(ENGINES, header, 'x'))).toEqual({});
  });

  it('sends only the edited role of a header cell, with its count', () => {
    const header = readHeader('%framework=pytorch\n%worker=2\nx', ROLES)!;
    const baseline = applyHeader(ENGINES, header, 'pytorch');
    const edited = applyHeader(ENGINES, header, 'pytorch');
    edited.roles.worker.memory = '4Gi';
    expect(toOverrides(edited, baseline)).toEqual({
      roles: { worker: { replicas: 2, resources: { memory: '4Gi' } } }
    });
  });
});

describe('readHeader', () => {
  it('sees no header in plain code or behind an IPython magic', () => {
    expect(readHeader('print(1)\n%framework=pytorch', ROLES)).toBeNull();
    expect(readHeader('%env X=1\nprint(1)', ROLES)).toBeNull();
  });

  it("reads ciao's lines, per-role resources and shared resources", () => {
    const header = readHeader(
      [
        '# training',
        '%framework = TensorFlow',
        '%worker=3;%cpu=2;%memory=4Gi',
        '%ps.gpu=1',
        '%CPU=1',
        '%clean_policy=all',
        '%image=python:3.11',
        'import os'
      ].join('\n'),
      ROLES
    );
    expect(header).toEqual({
      framework: 'tensorflow',
      image: 'python:3.11',
      counts: { worker: 3 },
      resources: {
        worker: { cpu: '2', memory: '4Gi' },
        ps: { gpu: '1' },
        '': { cpu: '1' }
      }
    });
  });

  it('reads a %%distrun line with flags, = forms and quotes', () => {
    const header = readHeader(
      '%%distrun --framework pytorch --workers 2 --namespace=team-a ' +
        "--role-resources 'worker:cpu=2,gpu=1' --env 'A=b c'\n%image=x:1\nrun()",
      ROLES
    );
    expect(header).toEqual({
      framework: 'pytorch',
      namespace: 'team-a',
      image: 'x:1',
      counts: { worker: 2 },
      resources: { worker: { cpu: '2', gpu: '1' } }
    });
  });

  it('pre-fills the roles the server runs: only the named ones', () => {
    const header = readHeader('%framework=tensorflow\n%ps=1;%cpu=3\nx', ROLES)!;
    const values = applyHeader(ENGINES, header, 'pytorch');
    expect(values.framework).toBe('tensorflow');
    expect(values.roles.ps).toEqual({
      replicas: 1,
      cpu: '3',
      memory: '',
      gpu: '',
      gpuMemory: ''
    });
    expect(values.roles.worker.replicas).toBe(0);
  });

  it('pre-fills required roles, and default counts when no role is named', () => {
    const named = applyHeader(
      ENGINES,
      readHeader('%worker=3\nx', ROLES)!,
      'pytorch'
    );
    expect(named.roles.master.replicas).toBe(1);
    expect(named.roles.worker.replicas).toBe(3);
    const none = applyHeader(
      ENGINES,
      readHeader('%cpu=2\nx', ROLES)!,
      'tensorflow'
    );
    expect(none.roles.worker).toEqual({
      replicas: 2,
      cpu: '2',
      memory: '',
      gpu: '',
      gpuMemory: ''
    });
  });
});

describe('shellWords', () => {
  it('splits like shlex.split', () => {
    expect(shellWords(`a "b c" 'd e' f\\ g "h\\"i" ''`)).toEqual([
      'a',
      'b c',
      'd e',
      'f g',
      'h"i',
      ''
    ]);
  });
});

describe('reconcile', () => {
  it('restores a stored choice and drops what the server no longer has', () => {
    const values = reconcile(ENGINES, {
      framework: 'pytorch',
      roles: { worker: { replicas: 4, cpu: '1', memory: '', gpu: '' }, ps: {} },
      engine: 'gone',
      image: 'x:1',
      namespace: ''
    })!;
    expect(values.roles.worker.replicas).toBe(4);
    expect(values.roles.master.replicas).toBe(1);
    expect(values.roles.ps).toBeUndefined();
    expect(values.engine).toBe('local');
    expect(values.image).toBe('x:1');
  });

  it('ignores what is not a stored choice', () => {
    expect(reconcile(ENGINES, undefined)).toBeNull();
    expect(reconcile(ENGINES, { framework: 'cobol' })).toBeNull();
    expect(reconcile(ENGINES, 'pytorch')).toBeNull();
  });
});

describe('formField', () => {
  it.each([
    ['framework', 'framework'],
    ['image', 'image'],
    ['roles', 'roles'],
    ['roles.master', 'roles.master.replicas'],
    ['roles.worker.replicas', 'roles.worker.replicas'],
    ['roles.worker.resources.gpu', 'roles.worker.gpu'],
    ['roles.worker.cpu', 'roles.worker.cpu'],
    ['env', null],
    [null, null]
  ])('puts a server error on %p next to %p', (server, form) => {
    expect(formField(server)).toBe(form);
  });
});

describe('GPUs', () => {
  it('sends a share as a number and a MIG profile as text', () => {
    expect(gpuValue('2')).toBe(2);
    expect(gpuValue('0.5')).toBe(0.5);
    expect(gpuValue('mig-1g.5gb')).toBe('mig-1g.5gb');
    const values = defaultValues(ENGINES, 'pytorch');
    values.roles.worker = {
      replicas: 2,
      cpu: '',
      memory: '',
      gpu: '0.5',
      gpuMemory: ''
    };
    expect(toOverrides(values).roles?.worker).toEqual({
      replicas: 2,
      resources: { gpu: 0.5 }
    });
  });

  it('reads, sends and places errors of GPU memory under its spec name', () => {
    const header = readHeader(
      '%framework=pytorch\n%worker=2;%gpu=0.5;%gpuMemory=10Gi\nx',
      ROLES
    )!;
    const values = applyHeader(ENGINES, header, 'pytorch');
    expect(values.roles.worker.gpuMemory).toBe('10Gi');
    const magic = readHeader(
      '%%distrun --framework pytorch --workers 2 --gpu-memory 4Gi\nx',
      ROLES
    )!;
    expect(magic.resources['']).toEqual({ gpuMemory: '4Gi' });
    const fresh = defaultValues(ENGINES, 'pytorch');
    fresh.roles.worker = {
      replicas: 1,
      cpu: '',
      memory: '',
      gpu: '0.25',
      gpuMemory: '2Gi'
    };
    expect(toOverrides(fresh).roles?.worker).toEqual({
      replicas: 1,
      resources: { gpu: 0.25, gpu_memory: '2Gi' }
    });
    expect(formField('roles.worker.resources.gpu_memory')).toBe(
      'roles.worker.gpuMemory'
    );
  });

  it("offers what the chosen engine's GPU mode can give", () => {
    const mig = {
      mode: 'mig',
      offers: 'whole GPUs (%gpu=1) or a MIG slice (%gpu=mig-1g.5gb)',
      fractions: false,
      memory: false,
      mig_profiles: ['mig-1g.5gb'],
      resources: ['nvidia.com/gpu', 'nvidia.com/mig-<profile>']
    };
    const engines: IEngines = {
      ...ENGINES,
      engines: [
        ENGINES.engines[0],
        { ...ENGINES.engines[1], options: { gpus: mig } }
      ]
    };
    expect(gpuOffer(engines, 'kubeflow')).toBe(mig);
    expect(gpuOffer(engines, '')).toBeUndefined();
    expect(gpuExample(mig)).toBe('mig-1g.5gb');
    expect(gpuExample({ ...mig, mig_profiles: [], fractions: true })).toBe(
      '0.5'
    );
    expect(gpuExample(undefined)).toBe('0');
  });
});
