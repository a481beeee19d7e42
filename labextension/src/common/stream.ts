/**
 * A job's live log stream over the websocket, reconnecting with `since` until the server
 * says the job ended, so a dropped connection loses and repeats nothing.
 */

import { IDisposable } from '@lumino/disposable';

import { logStreamUrl } from './api';
import { IEarlySocket, takeEarlyStream } from './earlystream';
import { LogBuffer } from './logbuffer';
import { linesOfRuns } from './runs';
import { traceMark } from './trace';
import {
  IJob,
  IUsageSample,
  LogTuple,
  STREAM_PROTOCOLS,
  StreamMessage
} from './model';
import { ITrans } from './trans';

export interface IStreamHandlers {
  lines(lines: LogTuple[]): void;
  /** Unfinished lines: each replaced by the line of its seq; an empty text takes one back. */
  partial(lines: LogTuple[]): void;
  status(job: IJob): void;
  /** New usage samples (version 3), each once across reconnects. */
  usage?(samples: IUsageSample[]): void;
  /** The job is terminal and every line was delivered. */
  end(): void;
  /** The server refused the stream (unknown job, bad request); no reconnect follows. */
  error(message: string): void;
  /** The connection dropped; `retryInSeconds` until the next attempt. */
  disconnected(retryInSeconds: number): void;
}

const MAX_BACKOFF_SECONDS = 15;
/** How long an early socket may stay silent once its job exists before the job's own opens. */
export const EARLY_SILENCE_MS = 3000;

export class JobStream implements IDisposable {
  /** `since` is asked for on every (re)connect: the consumer owns the cursor. */
  constructor(
    readonly jobId: string,
    private readonly _handlers: IStreamHandlers,
    private readonly _since: () => string
  ) {}

  get isDisposed(): boolean {
    return this._disposed;
  }

  connect(): void {
    if (this._disposed || this._finished) {
      return;
    }
    const early = this._opened ? null : takeEarlyStream(this.jobId);
    if (early) {
      this._adopt(early);
      return;
    }
    const socket = new WebSocket(
      logStreamUrl(this.jobId, this._since(), this._usageNext),
      STREAM_PROTOCOLS
    );
    if (!this._opened) {
      socket.onopen = () => traceMark('stream-open', this.jobId);
      this._opened = true;
    }
    this._listen(socket);
  }

  /** Takes over the socket opened before the job existed, and what it received meanwhile. */
  private _adopt({ socket, held, closed }: IEarlySocket): void {
    this._opened = true;
    this._early = true;
    this._listen(socket);
    // A ticket is known only to the server that took the submission: behind a front that
    // spreads requests over several servers, the socket may have reached another one, which
    // never hears of the job. The server that made it says so at once (the job's status).
    this._earlyTimer = window.setTimeout(
      () => this._leaveEarly(),
      EARLY_SILENCE_MS
    );
    for (const event of held) {
      this._onMessage(event);
    }
    if (closed) {
      this._onClose(closed);
    }
  }

  private _listen(socket: WebSocket): void {
    socket.onmessage = event => this._onMessage(event);
    socket.onclose = event => this._onClose(event);
    this._socket = socket;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    window.clearTimeout(this._retryTimer);
    window.clearTimeout(this._earlyTimer);
    if (this._socket) {
      this._socket.onclose = null;
      this._socket.onmessage = null;
      this._socket.close();
      this._socket = null;
    }
  }

  private _onMessage(event: MessageEvent): void {
    let message: StreamMessage;
    try {
      message = JSON.parse(event.data as string) as StreamMessage;
    } catch {
      return;
    }
    if (this._early && message.type === 'error') {
      return; // the ticket unknown where the socket went: its close falls back to the job's own
    }
    this._attempts = 0;
    this._early = false;
    window.clearTimeout(this._earlyTimer);
    switch (message.type) {
      case 'runs':
        if (!this._linesSeen) {
          traceMark('first-lines', this.jobId);
          this._linesSeen = true;
        }
        this._handlers.lines(linesOfRuns(message.runs));
        break;
      case 'lines':
        this._handlers.lines(message.lines);
        break;
      case 'partial':
        this._handlers.partial(message.lines);
        break;
      case 'status':
        this._handlers.status(message.job);
        break;
      case 'usage': {
        const fresh = message.samples.filter(s => s.seq >= this._usageNext);
        if (fresh.length) {
          this._usageNext = fresh[fresh.length - 1].seq + 1;
          this._handlers.usage?.(fresh);
        }
        break;
      }
      case 'end':
        this._finished = true;
        this._handlers.end();
        break;
      case 'error':
        this._finished = true;
        this._handlers.error(message.message);
        break;
    }
  }

  private _onClose(event: CloseEvent): void {
    this._socket = null;
    if (this._disposed || this._finished) {
      return;
    }
    if (this._early) {
      // Refused before its first message (a server without stream tickets, or one that never
      // heard of the ticket): the job's own.
      this._leaveEarly();
      return;
    }
    if (event.code === 4404 || event.code === 4400) {
      this._finished = true;
      this._handlers.error(event.reason || `log stream closed (${event.code})`);
      return;
    }
    const delay = Math.min(2 ** this._attempts, MAX_BACKOFF_SECONDS);
    this._attempts++;
    this._handlers.disconnected(delay);
    this._retryTimer = window.setTimeout(() => this.connect(), delay * 1000);
  }

  /** Leaves the early socket that said nothing for the job's own stream (nothing was read). */
  private _leaveEarly(): void {
    window.clearTimeout(this._earlyTimer);
    if (!this._early || this._disposed || this._finished) {
      return;
    }
    this._early = false;
    if (this._socket) {
      this._socket.onclose = this._socket.onmessage = null;
      this._socket.close();
      this._socket = null;
    }
    this.connect();
  }

  private _socket: WebSocket | null = null;
  private _earlyTimer = 0;
  private _opened = false; // traced: the first connect only
  private _early = false; // on the socket opened before the job existed, no message yet
  private _linesSeen = false;
  private _usageNext = 0; // the usage sample to resume from
  private _attempts = 0;
  private _retryTimer = 0;
  private _finished = false;
  private _disposed = false;
}

/** What a view of a job's stream handles: its lines, status and end, and notices to show. */
export interface IJobStreamView extends Pick<
  IStreamHandlers,
  'lines' | 'partial' | 'status' | 'end' | 'usage'
> {
  notice(message: string, isError: boolean): void;
}

/**
 * Opens the job's stream for a view (the cell output, the log viewer): it resumes from the
 * view's buffer cursor on every reconnect, and refusals and lost connections become notices.
 */
export function connectJobStream(
  jobId: string,
  buffer: LogBuffer,
  trans: ITrans,
  view: IJobStreamView
): JobStream {
  const stream = new JobStream(
    jobId,
    {
      lines: lines => view.lines(lines),
      partial: lines => view.partial(lines),
      status: job => view.status(job),
      usage: samples => view.usage?.(samples),
      end: () => view.end(),
      error: message => view.notice(message, true),
      disconnected: seconds =>
        view.notice(
          trans.__('connection lost; reconnecting in %1 s', seconds),
          false
        )
    },
    () => buffer.sinceParam()
  );
  stream.connect();
  return stream;
}
