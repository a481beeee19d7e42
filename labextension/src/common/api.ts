/**
 * The one way to reach the distrun server extension: typed REST calls and websocket URLs,
 * both built from the Jupyter server's connection settings (base URL, token, XSRF).
 */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  API_VERSION_HEADER,
  IJob,
  IJobList,
  IJobMetrics,
  IScalarsReport,
  ISubmitCell,
  ISweep,
  IUsageReport,
  REST_API_VERSION,
  STREAM_TICKET_HEADER
} from './model';

/** A failed request: the HTTP status (0 when the server was unreachable) and its message. */
export class DistrunAPIError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly line: number | null = null,
    readonly field: string | null = null
  ) {
    super(message);
    this.name = 'DistrunAPIError';
  }
}

/** Calls `{baseUrl}/distrun/{endPoint}` and returns its JSON (undefined for a 204). */
export async function requestAPI<T>(
  endPoint: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, 'distrun', endPoint);
  const headers = new Headers(init.headers);
  headers.set(API_VERSION_HEADER, REST_API_VERSION);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(
      url,
      { ...init, headers },
      settings
    );
  } catch (error) {
    throw new DistrunAPIError(0, String((error as Error).message ?? error));
  }
  const text = await response.text();
  const data = parseJSON(text);
  if (!response.ok) {
    const body = (data ?? {}) as {
      message?: unknown;
      line?: unknown;
      field?: unknown;
    };
    throw new DistrunAPIError(
      response.status,
      typeof body.message === 'string'
        ? body.message
        : response.statusText || text,
      typeof body.line === 'number' ? body.line : null,
      typeof body.field === 'string' ? body.field : null
    );
  }
  return data as T;
}

function parseJSON(text: string): unknown {
  if (!text) {
    return undefined;
  }
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

export function listJobs(): Promise<IJobList> {
  return requestAPI<IJobList>('jobs');
}

export function getJob(id: string): Promise<IJob> {
  return requestAPI<IJob>(`jobs/${encodeURIComponent(id)}`);
}

export function getScalars(id: string): Promise<IScalarsReport> {
  return requestAPI<IScalarsReport>(`jobs/${encodeURIComponent(id)}/scalars`);
}

/** The job's usage from sample `since` on (the live samples come on the log websocket). */
export function getUsage(id: string, since = 0): Promise<IUsageReport> {
  return requestAPI<IUsageReport>(
    `jobs/${encodeURIComponent(id)}/usage?since=${since}`
  );
}

/** Starts (or finds) TensorBoard on the job's scalars; answers where it is served. */
export function openTensorBoard(id: string): Promise<{ url: string }> {
  return requestAPI<{ url: string }>(
    `jobs/${encodeURIComponent(id)}/tensorboard`,
    { method: 'POST' }
  );
}

/**
 * Submits a cell. `streamTicket`: the ticket of a log stream opened for this job before it
 * exists (common/earlystream.ts); the server has it follow the job before it answers.
 */
export function submitCell(
  body: ISubmitCell,
  streamTicket?: string
): Promise<IJob> {
  const headers: Record<string, string> = streamTicket
    ? { [STREAM_TICKET_HEADER]: streamTicket }
    : {};
  return requestAPI<IJob>('jobs', {
    method: 'POST',
    body: JSON.stringify(body),
    headers
  });
}

export function cancelJob(id: string): Promise<IJob> {
  return requestAPI<IJob>(`jobs/${encodeURIComponent(id)}/cancel`, {
    method: 'POST'
  });
}

export function deleteJob(id: string): Promise<void> {
  return requestAPI<void>(`jobs/${encodeURIComponent(id)}`, {
    method: 'DELETE'
  });
}

/** The log stream's websocket URL, resuming after `since` (empty: from the first line). */
export function logStreamUrl(
  id: string,
  since: string,
  usageSince = 0,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  const base = URLExt.join(
    settings.wsUrl,
    'distrun/jobs',
    encodeURIComponent(id),
    'logs/stream'
  );
  return withStreamQuery(base, since, usageSince, settings);
}

/**
 * The websocket URL of the log stream of the job to be submitted with `ticket`, from its
 * first line (the server's stream_tickets.py).
 */
export function ticketStreamUrl(
  ticket: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  const base = URLExt.join(
    settings.wsUrl,
    'distrun/streams',
    encodeURIComponent(ticket)
  );
  return withStreamQuery(base, '', 0, settings);
}

function withStreamQuery(
  base: string,
  since: string,
  usageSince: number,
  settings: ServerConnection.ISettings
): string {
  const query: string[] = [];
  if (since) {
    query.push(`since=${encodeURIComponent(since)}`);
  }
  if (usageSince > 0) {
    query.push(`usage_since=${usageSince}`);
  }
  if (settings.appendToken && settings.token) {
    query.push(`token=${encodeURIComponent(settings.token)}`);
  }
  return query.length ? `${base}?${query.join('&')}` : base;
}

export function getSweep(id: string): Promise<ISweep> {
  return requestAPI<ISweep>(`sweeps/${encodeURIComponent(id)}`);
}

export function cancelSweep(id: string): Promise<ISweep> {
  return requestAPI<ISweep>(`sweeps/${encodeURIComponent(id)}/cancel`, {
    method: 'POST'
  });
}

export function deleteSweep(id: string): Promise<void> {
  return requestAPI<void>(`sweeps/${encodeURIComponent(id)}`, {
    method: 'DELETE'
  });
}

/** Each job's metrics as its first replica's log reported them. */
export async function jobsMetrics(ids: string[]): Promise<IJobMetrics[]> {
  const query = ids.map(id => `job=${encodeURIComponent(id)}`).join('&');
  const body = await requestAPI<{ jobs: IJobMetrics[] }>(`metrics?${query}`);
  return body.jobs;
}
