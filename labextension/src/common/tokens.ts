/**
 * Identifiers shared by the plugins: command ids, the output MIME type, the settings id.
 */

export const PLUGIN_ID = '@distrun/labextension:plugin';

/** The MIME type of a cell output that shows a job live; its data is `{ job_id }`. */
export const JOB_MIME_TYPE = 'application/vnd.distrun.job+json';

export namespace CommandIDs {
  export const runCell = 'distrun:run-cell';
  export const cancelJob = 'distrun:cancel-job';
  export const deleteJob = 'distrun:delete-job';
  export const refreshJobs = 'distrun:refresh-jobs';
  export const openLogs = 'distrun:open-logs';
  export const rerunJob = 'distrun:rerun-job';
  export const resumeJob = 'distrun:resume-job';
  export const editRerunJob = 'distrun:edit-rerun-job';
  export const downloadLogs = 'distrun:download-logs';
  export const openTensorBoard = 'distrun:open-tensorboard';
  export const logsFirstError = 'distrun:logs-first-error';
  export const logsToggleFollow = 'distrun:logs-toggle-follow';
  export const openSweep = 'distrun:open-sweep';
  export const cancelSweep = 'distrun:cancel-sweep';
  export const deleteSweep = 'distrun:delete-sweep';
  export const compareJobs = 'distrun:compare-jobs';
}

/** The gettext domain of every UI string. */
export const TRANSLATION_DOMAIN = 'distrun';

/** The DOM event a click on a traceback frame dispatches (common/sourceframes.ts). */
export const GOTO_SOURCE_EVENT = 'distrun-goto-source';
