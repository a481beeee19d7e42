/**
 * What the log viewer does with a whole job: fetch it, run it again (the same spec, or the
 * spec edited as a cell in a dialog), and download its full log as text.
 */

import { Dialog, showDialog } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { DistrunAPIError, requestAPI, submitCell } from '../common/api';
import { IJob, IJobSpec } from '../common/model';
import { cellFromSpec } from '../common/specheader';

/** Submits `spec` unchanged as a new job. */
export function submitSpec(spec: IJobSpec): Promise<IJob> {
  return requestAPI<IJob>('jobs', {
    method: 'POST',
    body: JSON.stringify({ spec })
  });
}

/** The REST URL of the job's whole log as text, every replica, prefixed. */
export function logsTextUrl(
  id: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  return URLExt.join(
    settings.baseUrl,
    'distrun/jobs',
    encodeURIComponent(id),
    'logs?format=text'
  );
}

/** Fetches the whole log (authenticated) and hands it to the browser as `<id>.log`. */
export async function downloadLogs(id: string): Promise<void> {
  const settings = ServerConnection.makeSettings();
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(
      logsTextUrl(id, settings),
      {},
      settings
    );
  } catch (error) {
    throw new DistrunAPIError(0, String((error as Error).message ?? error));
  }
  if (!response.ok) {
    const body = await response.text();
    let message = response.statusText;
    try {
      message = (JSON.parse(body) as { message?: string }).message ?? message;
    } catch {
      // not JSON: keep the status text
    }
    throw new DistrunAPIError(response.status, message);
  }
  const url = URL.createObjectURL(await response.blob());
  const link = document.createElement('a');
  link.href = url;
  link.download = `${id}.log`;
  document.body.append(link);
  link.click();
  link.remove();
  // Give the browser a moment to start the download before the blob goes away.
  window.setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** The dialog body: the job as an editable cell, and the server's complaint if any. */
class EditCellBody extends Widget {
  constructor(text: string, error: DistrunAPIError | null, note: string) {
    super();
    this.addClass('jp-distrun-EditCell');
    this._text.className = 'jp-distrun-EditCell-text';
    this._text.value = text;
    this._text.rows = Math.min(24, Math.max(8, text.split('\n').length + 1));
    this._text.spellcheck = false;
    this._text.dataset.testId = 'distrun-edit-cell';
    this._text.setAttribute('aria-label', note);
    const hint = document.createElement('div');
    hint.className = 'jp-distrun-EditCell-hint';
    hint.textContent = note;
    this.node.append(hint, this._text);
    if (error) {
      const message = document.createElement('div');
      message.className = 'jp-distrun-EditCell-error';
      message.dataset.testId = 'distrun-edit-cell-error';
      message.setAttribute('role', 'alert');
      message.textContent = error.message;
      this.node.append(message);
    }
  }

  getValue(): string {
    return this._text.value;
  }

  /** Where the caret goes when the dialog opens: the line the server complained about. */
  focusLine(line: number | null): void {
    this._text.focus();
    if (line === null) {
      return;
    }
    const lines = this._text.value.split('\n');
    const start = lines
      .slice(0, Math.max(0, line - 1))
      .reduce((sum, text) => sum + text.length + 1, 0);
    this._text.setSelectionRange(start, start + (lines[line - 1] ?? '').length);
  }

  private readonly _text = document.createElement('textarea');
}

/**
 * Shows the job's spec as a cell (header and code) to edit, and submits it. A refused cell
 * reopens the dialog with the server's message under the text. Returns the new job, or null
 * when the user cancelled.
 */
export async function editAndRunAgain(
  job: IJob,
  trans: TranslationBundle
): Promise<IJob | null> {
  const { cell, overrides } = cellFromSpec(job.spec);
  const files = Object.keys((job.spec.files ?? {}) as Record<string, string>);
  const note = files.length
    ? trans.__(
        'Edit the header and code, then run. The files shipped with %1 (%2) are sent again.',
        job.id,
        files.join(', ')
      )
    : trans.__('Edit the header and code of %1, then run.', job.id);
  let text = cell;
  let error: DistrunAPIError | null = null;
  for (;;) {
    const body = new EditCellBody(text, error, note);
    const line = error?.line ?? null;
    requestAnimationFrame(() => body.focusLine(line));
    const result = await showDialog({
      title: trans.__('Edit and run again'),
      body,
      buttons: [
        Dialog.cancelButton(),
        Dialog.okButton({ label: trans.__('Run distributed') })
      ],
      focusNodeSelector: 'textarea'
    });
    if (!result.button.accept || result.value === null) {
      return null;
    }
    text = result.value;
    try {
      return await submitCell({ cell: text, overrides });
    } catch (caught) {
      error =
        caught instanceof DistrunAPIError
          ? caught
          : new DistrunAPIError(0, String(caught));
    }
  }
}
