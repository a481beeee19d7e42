import { ServerConnection } from '@jupyterlab/services';

import { requestAPI } from '../api';
import { API_VERSION_HEADER, REST_API_VERSION } from '../model';

function settingsAnswering(
  status: number,
  body: unknown,
  seen: Request[]
): ServerConnection.ISettings {
  return ServerConnection.makeSettings({
    baseUrl: 'http://127.0.0.1:1/',
    fetch: async (request: RequestInfo | URL) => {
      seen.push(request as Request);
      return new Response(JSON.stringify(body), { status });
    }
  });
}

describe('requestAPI', () => {
  it('sends the REST version it parses', async () => {
    const seen: Request[] = [];
    const jobs = await requestAPI<{ jobs: unknown[] }>(
      'jobs',
      { method: 'POST', headers: { 'X-Other': 'kept' } },
      settingsAnswering(200, { jobs: [] }, seen)
    );
    expect(jobs).toEqual({ jobs: [] });
    expect(seen[0].headers.get(API_VERSION_HEADER)).toBe(REST_API_VERSION);
    expect(seen[0].headers.get('X-Other')).toBe('kept');
  });

  it("shows a server's refusal of its version in the server's words", async () => {
    const message = 'this server serves version 2 of the distrun REST API';
    await expect(
      requestAPI('jobs', {}, settingsAnswering(406, { message }, []))
    ).rejects.toMatchObject({ status: 406, message });
  });
});
