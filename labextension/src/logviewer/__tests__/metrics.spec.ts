import {
  MetricSeries,
  MetricStore,
  parseMetrics,
  progressFraction
} from '../metrics';
import { plainText } from '../../common/ansi';

/** A case of metric_lines.json, which core/metrics.py reads too, so the parsers cannot drift. */
interface ISharedCase {
  why: string;
  line: string;
  step: number | null;
  metrics: Array<[string, number]>;
}
// Loaded by jest, not imported: tsc's project lists only the .ts sources.
const sharedCases: ISharedCase[] = jest.requireActual('./metric_lines.json');

function metricsOf(text: string): Record<string, number> {
  return Object.fromEntries(parseMetrics(text).metrics);
}

describe('parseMetrics reads the formats training code prints', () => {
  it.each([
    ['loss=0.31', { loss: 0.31 }],
    ['loss: 0.31', { loss: 0.31 }],
    ['loss 0.31', { loss: 0.31 }],
    ['accuracy: 0.92', { accuracy: 0.92 }],
    ['val_loss=1.5e-3 val_acc=0.5', { val_loss: 0.0015, val_acc: 0.5 }],
    ['train/loss=0.25', { 'train/loss': 0.25 }],
    ['loss=-0.5', { loss: -0.5 }],
    ['accuracy: 92.5%', { accuracy: 92.5 }],
    ['LOSS=0.7', { loss: 0.7 }],
    ['done, loss=0.3.', { loss: 0.3 }]
  ])('%s', (text, expected) => {
    expect(metricsOf(text)).toEqual(expected);
  });

  it('reads a Keras 2 progress line', () => {
    const line =
      '938/938 [==============================] - 3s 3ms/step - loss: 0.2950 - accuracy: 0.9148 - val_loss: 0.1400 - val_accuracy: 0.9585';
    expect(parseMetrics(line)).toEqual({
      step: null,
      metrics: [
        ['loss', 0.295],
        ['accuracy', 0.9148],
        ['val_loss', 0.14],
        ['val_accuracy', 0.9585]
      ]
    });
  });

  it('reads a Keras 3 progress line', () => {
    const line =
      '938/938 ━━━━━━━━━━━━━━━━━━━━ 3s 2ms/step - accuracy: 0.8764 - loss: 0.4321';
    expect(metricsOf(line)).toEqual({ accuracy: 0.8764, loss: 0.4321 });
  });

  it('reads the epoch of a Keras epoch header', () => {
    expect(parseMetrics('Epoch 3/10')).toEqual({
      step: null,
      metrics: [['epoch', 3]]
    });
  });

  it('reads the PyTorch MNIST example lines', () => {
    expect(
      parseMetrics('Train Epoch: 1 [640/60000 (1%)]\tLoss: 2.305760')
    ).toEqual({
      step: null,
      metrics: [
        ['epoch', 1],
        ['loss', 2.30576]
      ]
    });
    expect(
      metricsOf('Test set: Average loss: 0.0326, Accuracy: 9890/10000 (99%)')
    ).toEqual({ loss: 0.0326 });
  });

  it('reads the pytorch-tutorial bracketed progress', () => {
    expect(parseMetrics('Epoch [1/5], Step [100/600], Loss: 0.2305')).toEqual({
      step: 100,
      metrics: [
        ['epoch', 1],
        ['loss', 0.2305]
      ]
    });
  });

  it('reads a PyTorch Lightning progress bar', () => {
    const line =
      'Epoch 3: 100%|██████████| 938/938 [00:12<00:00, 75.1it/s, loss=0.123, v_num=0, val_loss=0.2]';
    expect(metricsOf(line)).toEqual({ epoch: 3, loss: 0.123, val_loss: 0.2 });
  });

  it('reads a Hugging Face Trainer dict', () => {
    const line =
      "{'loss': 0.6931, 'grad_norm': 1.25, 'learning_rate': 4.5e-05, 'epoch': 0.5}";
    expect(metricsOf(line)).toEqual({
      loss: 0.6931,
      grad_norm: 1.25,
      learning_rate: 0.000045,
      epoch: 0.5
    });
  });

  it('reads JSON lines', () => {
    expect(parseMetrics('{"step": 7, "loss": 0.5, "acc": 0.75}')).toEqual({
      step: 7,
      metrics: [
        ['loss', 0.5],
        ['acc', 0.75]
      ]
    });
  });

  it('reads fairseq-style pipe-separated columns', () => {
    expect(
      metricsOf('| epoch 001 | loss 4.123 | ppl 17.42 | lr 0.0005 |')
    ).toEqual({ epoch: 1, loss: 4.123, ppl: 17.42, lr: 0.0005 });
  });

  it('reads a tensor repr', () => {
    expect(metricsOf("step 5 loss=tensor(0.3100, device='cuda:0')")).toEqual({
      loss: 0.31
    });
  });

  it('takes the step from step, global_step, iter and iteration', () => {
    expect(parseMetrics('step 120 loss=0.31').step).toBe(120);
    expect(parseMetrics('global_step=9 loss=1').step).toBe(9);
    expect(parseMetrics('iter: 4, loss: 1').step).toBe(4);
    expect(parseMetrics('Iteration 50/1000 loss 2').step).toBe(50);
  });

  it('keeps the step out of the metrics', () => {
    expect(parseMetrics('step 120 loss=0.31').metrics).toEqual([
      ['loss', 0.31]
    ]);
  });
});

describe('the cases shared with the server (core/metrics.py)', () => {
  it.each(sharedCases.map(c => [c.why, c] as const))('%s', (_why, c) => {
    expect(parseMetrics(plainText(c.line))).toEqual({
      step: c.step,
      metrics: c.metrics
    });
  });
});

describe('parseMetrics is not fooled', () => {
  it.each([
    ['a timestamp', '2024-01-05 12:34:56,789 INFO starting training'],
    ['an ISO timestamp', '2024-01-05T12:34:56.789Z started'],
    ['a time value', 'time: 12:34:56'],
    ['a duration', 'elapsed: 0:01:23'],
    ['an IP address', 'addr=10.0.0.1'],
    ['an IP address after a colon', 'connecting to host: 192.168.1.20'],
    ['a host and port', 'master at node-1:29500'],
    ['a version', 'torch version 2.1.0'],
    ['a pinned version', 'jax==0.4.20'],
    ['a version after a colon', 'release: 1.2.3'],
    ['a file and line', 'train.py:45: UserWarning: something'],
    [
      'a traceback line',
      'File "/usr/lib/python3.11/site.py", line 12, in <module>'
    ],
    [
      'a checkpoint path',
      'saved /ckpt/epoch_3.pt and /ckpt/model-epoch=4.ckpt'
    ],
    ['a file name with a metric-looking stem', 'wrote model_epoch=3.ckpt'],
    ['a date', 'date: 2024-01-05'],
    ['a duration with a unit', 'step_time: 3ms'],
    [
      'environment variables',
      'MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=3'
    ],
    ['identity keys', 'rank=0 local_rank=0 world_size=2 pid=4242'],
    ['words followed by counts', 'worker 0 started with 8 threads'],
    ['a count of a total', 'Accuracy: 9890/10000'],
    ['not-a-number values', 'loss=nan accuracy=inf']
  ])('by %s', (_what, text) => {
    expect(parseMetrics(text)).toEqual({ step: null, metrics: [] });
  });

  it('by a timestamp prefix before real metrics', () => {
    expect(
      parseMetrics('2024-01-05 12:34:56,789 INFO step=5 loss=0.3')
    ).toEqual({ step: 5, metrics: [['loss', 0.3]] });
  });

  it('by a very long line (only its start is read)', () => {
    const line = 'loss=0.5 ' + 'x'.repeat(100_000) + ' acc=0.9';
    expect(metricsOf(line)).toEqual({ loss: 0.5 });
  });
});

describe('MetricSeries', () => {
  it('halves its points and doubles its stride when it fills up', () => {
    const series = new MetricSeries('loss', 'worker-0', 'line', 4);
    for (let i = 0; i < 4; i++) {
      series.add(i, i * 10);
    }
    expect(series.xs).toEqual([0, 2]);
    expect(series.stride).toBe(2);
    for (let i = 4; i < 8; i++) {
      series.add(i, i * 10);
    }
    // Every second point from then on: 4 and 6 join, then the series is full again.
    expect(series.xs).toEqual([0, 4]);
    expect(series.ys).toEqual([0, 40]);
    expect(series.stride).toBe(4);
  });
});

describe('MetricStore', () => {
  it('plots against the step when the replica prints one', () => {
    const store = new MetricStore();
    store.addLine('worker-0', 0, 'step 10 loss=0.9');
    store.addLine('worker-0', 1, 'step 20 loss=0.5');
    const [series] = store.series('loss');
    expect(series.xKind).toBe('step');
    expect(series.xs).toEqual([10, 20]);
    expect(series.ys).toEqual([0.9, 0.5]);
  });

  it('uses the last step of the same replica for a line without one', () => {
    const store = new MetricStore();
    store.addLine('worker-0', 0, 'Epoch 1/3 step 100');
    store.addLine('worker-1', 0, 'step 7');
    store.addLine('worker-0', 1, 'loss: 0.4');
    expect(store.series('loss')[0].xs).toEqual([100]);
  });

  it('uses the line number for a series that began before any step', () => {
    const store = new MetricStore();
    store.addLine('master-0', 5, 'loss=1');
    store.addLine('master-0', 6, 'step 3 loss=0.5');
    const [series] = store.series('loss');
    expect(series.xKind).toBe('line');
    expect(series.xs).toEqual([5, 6]);
  });

  it('keeps one series per replica and lists metrics in order of appearance', () => {
    const store = new MetricStore();
    store.addLine('worker-0', 0, 'loss=1 acc=0.1');
    store.addLine('worker-1', 0, 'loss=2');
    store.addLine('worker-1', 1, 'val_loss=3');
    expect(store.metrics()).toEqual(['loss', 'acc', 'val_loss']);
    expect(store.series('loss').map(s => s.replica)).toEqual([
      'worker-0',
      'worker-1'
    ]);
    expect(store.series('missing')).toEqual([]);
  });
});

describe('metrics of lines still being written', () => {
  it('reads a tqdm bar and a Keras bar as they are drawn, placed within their line', () => {
    const store = new MetricStore();
    const tqdm = (n: number, loss: number) =>
      `Epoch 1: ${n}%|${'#'.repeat(n / 10)}| ${n}/100 [00:01<00:09, 9.9it/s, loss=${loss}]`;
    store.addPartial('worker-0', 4, tqdm(30, 0.9));
    store.addPartial('worker-0', 4, tqdm(60, 0.5));
    store.addLine('worker-0', 4, `\r${tqdm(30, 0.9)}\r${tqdm(100, 0.2)}`);
    const [loss] = store.series('loss');
    expect(loss.xs).toEqual([4.3, 4.6, 5]);
    expect(loss.ys).toEqual([0.9, 0.5, 0.2]);
  });

  it('reads what is shown, not the colour codes or the redrawn states', () => {
    const store = new MetricStore();
    const keras =
      '\r\x1b[1m3/10\x1b[0m \x1b[32m━━━━━━\x1b[0m \x1b[1m0s\x1b[0m 150ms/step - loss: 0.5000' +
      '\r\x1b[1m10/10\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m \x1b[1m2s\x1b[0m 150ms/step - loss: 0.2500';
    store.addLine('worker-0', 7, keras);
    expect(store.series('loss')[0].ys).toEqual([0.25]);
    expect(progressFraction(' 3/10 ━━')).toBeCloseTo(0.3);
    expect(progressFraction('version 1/2/3')).toBe(0);
  });
});

describe('MetricStore.setScalars', () => {
  it("plots each TensorBoard tag on the step axis beside the lines' metrics", () => {
    const store = new MetricStore();
    store.addLine('worker-0', 0, 'step 1 loss=0.5');
    const before = store.version;
    store.setScalars({
      'worker-0': {
        'train/loss': [
          [0, 1],
          [1, 0.5]
        ]
      },
      'worker-1': { 'train/loss': [[0, 2]] }
    });
    expect(store.version).toBeGreaterThan(before);
    expect(store.metrics()).toEqual(['loss', 'train/loss (TensorBoard)']);
    const series = store.series('train/loss (TensorBoard)');
    expect(series.map(s => [s.replica, s.xKind, s.xs, s.ys])).toEqual([
      ['worker-0', 'step', [0, 1], [1, 0.5]],
      ['worker-1', 'step', [0], [2]]
    ]);
    // The next answer is the whole series again: it replaces, never doubles.
    store.setScalars({
      'worker-0': {
        'train/loss': [
          [0, 1],
          [1, 0.5],
          [2, 0.25]
        ]
      }
    });
    expect(store.series('train/loss (TensorBoard)')[0].xs).toEqual([0, 1, 2]);
  });
});
