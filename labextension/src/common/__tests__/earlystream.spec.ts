/**
 * @jest-environment jsdom
 */
import {
  EarlyStream,
  earlyStreamForRun,
  openNextEarlyStream
} from '../earlystream';
import { EARLY_SILENCE_MS, IStreamHandlers, JobStream } from '../stream';

/** A socket that connects to nothing: the test delivers its messages and its close. */
class FakeSocket {
  static made: FakeSocket[] = [];
  onopen: ((event: Event) => void) | null = null;
  onmessage: ((event: MessageEvent) => void) | null = null;
  onclose: ((event: CloseEvent) => void) | null = null;
  closed = false;
  constructor(
    readonly url: string,
    readonly protocols: string[]
  ) {
    FakeSocket.made.push(this);
  }
  receive(message: unknown): void {
    this.onmessage?.({ data: JSON.stringify(message) } as MessageEvent);
  }
  refuse(code = 1006): void {
    this.onclose?.({ code, reason: '' } as CloseEvent);
  }
  close(): void {
    this.closed = true;
  }
}

const JOB = { id: 'job-1', state: 'running' };
const RUNS = {
  type: 'runs',
  runs: [{ replica: 'worker-0', seq: 0, times_ms: [1000], texts: ['first'] }]
};

function recorder(): { seen: string[]; handlers: IStreamHandlers } {
  const seen: string[] = [];
  const handlers: IStreamHandlers = {
    lines: lines => seen.push(...lines.map(line => `line ${line[3]}`)),
    partial: () => undefined,
    status: job => seen.push(`status ${job.id}`),
    end: () => seen.push('end'),
    error: message => seen.push(`error ${message}`),
    disconnected: seconds => seen.push(`disconnected ${seconds}`)
  };
  return { seen, handlers };
}

beforeEach(() => {
  // jsdom has no fetch; the connection settings only need one to exist.
  const page = globalThis as unknown as Record<string, unknown>;
  page.fetch ??= () => Promise.reject(new Error('no network in this test'));
  page.Request ??= class {};
  page.Headers ??= class {};
  (performance as unknown as Record<string, unknown>).mark ??= () => undefined;
  FakeSocket.made = [];
  (window as unknown as { WebSocket: unknown }).WebSocket = FakeSocket;
});

describe('EarlyStream', () => {
  it('opens a stream named by its ticket, which the job view takes over with what it held', () => {
    const early = new EarlyStream();
    early.open();
    const [socket] = FakeSocket.made;
    expect(socket.url).toContain(`distrun/streams/${early.ticket}`);
    expect(early.ticket).toMatch(/^[0-9a-f]{32}$/);
    socket.receive({ type: 'status', job: JOB });
    socket.receive(RUNS);
    early.claim('job-1');
    const { seen, handlers } = recorder();
    new JobStream('job-1', handlers, () => '').connect();
    expect(FakeSocket.made).toHaveLength(1); // no second socket
    socket.receive({ type: 'end' });
    expect(seen).toEqual(['status job-1', 'line first', 'end']);
  });

  it("is not another job's: that job's view opens its own stream", () => {
    const early = new EarlyStream();
    early.open();
    early.claim('job-1');
    new JobStream('job-2', recorder().handlers, () => '').connect();
    expect(FakeSocket.made[1].url).toContain('distrun/jobs/job-2/logs/stream');
  });

  it('refused by a server without tickets, the view opens the job stream at once', () => {
    const early = new EarlyStream();
    early.open();
    early.claim('job-1');
    const { seen, handlers } = recorder();
    new JobStream('job-1', handlers, () => '').connect();
    FakeSocket.made[0].refuse(); // after the view took it: a 404 handshake
    expect(FakeSocket.made).toHaveLength(2);
    expect(FakeSocket.made[1].url).toContain('distrun/jobs/job-1/logs/stream');
    expect(seen).toEqual([]); // no "connection lost" notice

    const before = new EarlyStream();
    before.open();
    FakeSocket.made[2].refuse(); // before the view came
    before.claim('job-3');
    new JobStream('job-3', handlers, () => '').connect();
    expect(FakeSocket.made[2].closed).toBe(true);
    expect(FakeSocket.made[3].url).toContain('distrun/jobs/job-3/logs/stream');
  });

  it('silent once its job exists (another server took the submission), the view opens the job stream', () => {
    jest.useFakeTimers({ doNotFake: ['performance'] });
    try {
      const early = new EarlyStream();
      early.open();
      early.claim('job-1');
      const { seen, handlers } = recorder();
      new JobStream('job-1', handlers, () => '').connect();
      expect(FakeSocket.made).toHaveLength(1);
      jest.advanceTimersByTime(EARLY_SILENCE_MS - 1);
      expect(FakeSocket.made).toHaveLength(1);
      jest.advanceTimersByTime(1);
      const [ticketed, own] = FakeSocket.made;
      expect(ticketed.closed).toBe(true);
      expect(own.url).toContain('distrun/jobs/job-1/logs/stream');
      ticketed.receive(RUNS); // a late message on the socket left: not read
      own.receive({ type: 'status', job: JOB });
      own.receive(RUNS);
      expect(seen).toEqual(['status job-1', 'line first']);
    } finally {
      jest.useRealTimers();
    }
  });

  it('told the ticket is unknown there, the view opens the job stream and shows no error', () => {
    const early = new EarlyStream();
    early.open();
    const [ticketed] = FakeSocket.made;
    early.claim('job-1');
    const { seen, handlers } = recorder();
    new JobStream('job-1', handlers, () => '').connect();
    ticketed.receive({
      type: 'error',
      message: 'no job of yours was submitted with stream ticket'
    });
    ticketed.refuse(4404);
    expect(FakeSocket.made).toHaveLength(2);
    FakeSocket.made[1].receive({ type: 'status', job: JOB });
    expect(seen).toEqual(['status job-1']);
  });

  it('disposed (the submission failed), its socket closes', () => {
    const early = new EarlyStream();
    early.open();
    early.dispose();
    expect(FakeSocket.made[0].closed).toBe(true);
  });

  it("opened ahead after a run, it is the next run's while it is open", () => {
    jest.useFakeTimers({ doNotFake: ['performance'] });
    try {
      openNextEarlyStream();
      jest.advanceTimersByTime(2_000);
      expect(FakeSocket.made).toHaveLength(1);
      const next = earlyStreamForRun();
      next.open(); // already open: no second socket
      expect(FakeSocket.made).toHaveLength(1);
      expect(FakeSocket.made[0].url).toContain(next.ticket);

      openNextEarlyStream();
      jest.advanceTimersByTime(2_000);
      FakeSocket.made[1].refuse(4404); // the server's wait ended
      const fresh = earlyStreamForRun();
      expect(FakeSocket.made[1].closed).toBe(true);
      fresh.open();
      expect(FakeSocket.made).toHaveLength(3);
      expect(FakeSocket.made[2].url).toContain(fresh.ticket);
    } finally {
      jest.useRealTimers();
    }
  });
});
