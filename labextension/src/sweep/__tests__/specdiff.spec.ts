import { IJobSpec } from '../../common/model';
import { codeDiff, differingFields, flatten } from '../specdiff';

const BASE: IJobSpec = {
  framework: 'pytorch',
  name: 'fit',
  code: 'import torch\nlr = 0.1\nprint(lr)\n',
  roles: { master: { replicas: 1 }, worker: { replicas: 1 } },
  env: { DISTRUN_PARAM_LR: '0.1' }
};

describe('the spec diff', () => {
  it('flattens nested fields into dotted paths', () => {
    expect([...flatten(BASE.roles, 'roles')]).toEqual([
      ['roles.master.replicas', '1'],
      ['roles.worker.replicas', '1']
    ]);
  });

  it('lists only the fields that differ, a missing one as null', () => {
    const other = {
      ...BASE,
      roles: { master: { replicas: 1 }, worker: { replicas: 3 } },
      env: { DISTRUN_PARAM_LR: '0.3', EXTRA: 'x' }
    };
    expect(differingFields([BASE, other])).toEqual([
      { field: 'env.DISTRUN_PARAM_LR', values: ['0.1', '0.3'] },
      { field: 'env.EXTRA', values: [null, 'x'] },
      { field: 'roles.worker.replicas', values: ['1', '3'] }
    ]);
    expect(differingFields([BASE, { ...BASE }])).toEqual([]);
  });

  it('compares shipped files by size, not content', () => {
    const a = { ...BASE, files: { 'data.csv': 'AAAA' } };
    const b = { ...BASE, files: { 'data.csv': 'AAAAAAAA' } };
    expect(differingFields([a, b])).toEqual([
      { field: 'files.data.csv', values: ['3 bytes', '6 bytes'] }
    ]);
  });

  it('diffs the code line by line, nothing when it is the same', () => {
    const other = { ...BASE, code: 'import torch\nlr = 0.3\nprint(lr)\n' };
    expect(codeDiff(BASE, other)).toEqual([
      { kind: 'same', text: 'import torch\n' },
      { kind: 'removed', text: 'lr = 0.1\n' },
      { kind: 'added', text: 'lr = 0.3\n' },
      { kind: 'same', text: 'print(lr)\n' }
    ]);
    expect(codeDiff(BASE, { ...BASE })).toEqual([]);
  });
});
