/**
 * A job's log stream opened before the job exists: Run distributed opens it with a ticket of
 * its own choosing at the input, beside the submission, so the websocket's handshake and the
 * server's follower overlap the submission instead of waiting for its answer
 * (server_ext/distrun/server/stream_tickets.py); after a run, the next run's is opened ahead. Once the answer names the job, the job's
 * view takes the socket over (`takeEarlyStream`) with the messages it held meanwhile. A
 * server without tickets refuses the socket; the view then opens the job's own stream.
 */

import { ticketStreamUrl } from './api';
import { STREAM_PROTOCOLS } from './model';
import { traceMark } from './trace';

/** How long a claimed stream waits for its view before it closes. */
const UNCLAIMED_MS = 10_000;

/** What a view takes over: the socket, the messages it held, its close if it has closed. */
export interface IEarlySocket {
  socket: WebSocket;
  held: MessageEvent[];
  closed: CloseEvent | null;
}

/** A random ticket (crypto.getRandomValues: unlike randomUUID, also on plain http). */
export function newTicket(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, byte => byte.toString(16).padStart(2, '0')).join('');
}

export class EarlyStream {
  readonly ticket = newTicket();

  /** Whether its socket is open or opening, and nobody took it. */
  get isOpen(): boolean {
    return this._socket !== null && this._closed === null;
  }

  /**
   * Opens the socket (once): ahead of the next run, or after the submission has left, which
   * the replicas' start waits for.
   */
  open(ahead = false): void {
    if (this._socket || this._closed) {
      return;
    }
    const socket = new WebSocket(
      ticketStreamUrl(this.ticket),
      STREAM_PROTOCOLS
    );
    // Opened ahead, it is traced when a run takes it (earlyStreamForRun).
    socket.onopen = ahead ? null : () => traceMark('stream-open');
    socket.onmessage = event => this._held.push(event);
    socket.onclose = event => (this._closed = event);
    this._socket = socket;
  }

  /** The submission made `jobId`: its view may take the socket over. */
  claim(jobId: string): void {
    claimed.set(jobId, this);
    this._timer = window.setTimeout(() => {
      if (claimed.get(jobId) === this) {
        claimed.delete(jobId);
      }
      this.dispose();
    }, UNCLAIMED_MS);
  }

  /** The socket for a view, or null when there is none to take (refused, or taken). */
  adopt(): IEarlySocket | null {
    const socket = this._socket;
    window.clearTimeout(this._timer);
    this._socket = null;
    if (!socket || (this._closed && !this._held.length)) {
      socket?.close();
      return null;
    }
    socket.onmessage = socket.onclose = null; // onopen stays: it traces the open
    return { socket, held: this._held, closed: this._closed };
  }

  dispose(): void {
    window.clearTimeout(this._timer);
    if (this._socket) {
      this._socket.onopen =
        this._socket.onmessage =
        this._socket.onclose =
          null;
      this._socket.close();
      this._socket = null;
    }
  }

  private _socket: WebSocket | null = null;
  private _held: MessageEvent[] = [];
  private _closed: CloseEvent | null = null;
  private _timer = 0;
}

const claimed = new Map<string, EarlyStream>();

/**
 * A stream opened ahead for the next run, so that no handshake competes with its submission
 * on the server; it waits there for its ticket at most 10 minutes (TICKET_SECONDS).
 */
let ahead: { stream: EarlyStream; since: number } | null = null;
const AHEAD_MS = 9 * 60_000;
/** After a run, when its start is over. */
const AHEAD_DELAY_MS = 2_000;

/**
 * The stream for a submission about to leave: the one opened ahead while it is open and
 * young enough, else a new one (opened by the caller once the submission has left).
 */
export function earlyStreamForRun(): EarlyStream {
  const taken = ahead;
  ahead = null;
  if (taken?.stream.isOpen && Date.now() - taken.since < AHEAD_MS) {
    traceMark('stream-open'); // open (or opening) since before the input
    return taken.stream;
  }
  taken?.stream.dispose();
  return new EarlyStream();
}

/** After a run: a stream for the next one, opened once this run's start is over. */
export function openNextEarlyStream(): void {
  window.setTimeout(() => {
    if (!ahead?.stream.isOpen) {
      ahead?.stream.dispose();
      const stream = new EarlyStream();
      stream.open(true);
      ahead = { stream, since: Date.now() };
    }
  }, AHEAD_DELAY_MS);
}

/** The socket opened for `jobId` before it existed, if one waits; taken once. */
export function takeEarlyStream(jobId: string): IEarlySocket | null {
  const early = claimed.get(jobId);
  claimed.delete(jobId);
  return early ? early.adopt() : null;
}
