import { formatStatus } from '../format';
import { ITrans } from '../trans';
import { IJob } from '../model';
import { describeWaiting, stuckWords } from '../stuck';

const trans: ITrans = {
  __: (msgid: string, ...args: any[]) =>
    msgid.replace(/%(\d)/g, (_, n) => String(args[Number(n) - 1]))
};

describe('stuckWords', () => {
  it.each([
    ['worker-0: ErrImagePull: pull access denied', 'cannot pull the image'],
    [
      'worker-1: ImagePullBackOff: Back-off pulling image',
      'cannot pull the image'
    ],
    [
      'master-0: Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.',
      'no node can take it yet'
    ],
    ['FailedScheduling: 0/1 nodes are available', 'no node can take it yet'],
    [
      'waiting for gang resources: 2/3 tasks in gang unschedulable',
      'gang scheduling'
    ],
    ['worker-0: ContainerCreating', 'starting the containers'],
    [
      'master-0: Unschedulable: 0/6 nodes are available: 6 Insufficient ' +
        'nvidia.com/gpumem. [short of GPU resource nvidia.com/gpumem: no node has ' +
        'enough of it free]',
      'no node has enough free GPU resource nvidia.com/gpumem'
    ]
  ])('puts %p in words', (reason, words) => {
    expect(stuckWords(reason, trans)).toContain(words);
  });

  it('has no words for a reason it does not know', () => {
    expect(stuckWords('starting the replicas', trans)).toBeNull();
    expect(describeWaiting('starting the replicas', trans)).toBe(
      'starting the replicas'
    );
  });
});

describe('formatStatus of a stuck job', () => {
  it('says why in words and keeps the engine text', () => {
    const job = {
      state: 'pending',
      reason: 'worker-1: Unschedulable: 0/3 nodes are available',
      replicas: []
    } as unknown as IJob;
    expect(formatStatus(job, trans)).toBe(
      'pending: no node can take it yet (not enough free CPU, memory or GPUs) ' +
        '(worker-1: Unschedulable: 0/3 nodes are available)'
    );
  });
});
