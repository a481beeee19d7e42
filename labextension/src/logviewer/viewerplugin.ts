/**
 * The log viewer plugin: `distrun:open-logs` opens a job's log viewer in the main area
 * (restored after a reload through the layout restorer), and the commands the viewer's
 * buttons run: run again, edit and run again, download, first error, follow / pause.
 */

import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  MainAreaWidget,
  showErrorMessage,
  WidgetTracker
} from '@jupyterlab/apputils';
import {
  ITranslator,
  nullTranslator,
  TranslationBundle
} from '@jupyterlab/translation';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { getJob, openTensorBoard } from '../common/api';
import { JOB_ID_ARGS, NO_ARGS } from '../common/commandargs';
import { activateOpen, addToMainArea } from '../common/mainarea';
import { IJob, isJobId, withoutTrialEnv } from '../common/model';
import type { LogViewer } from './logviewer';
import { CommandIDs, PLUGIN_ID, TRANSLATION_DOMAIN } from '../common/tokens';

export const logViewerPlugin: JupyterFrontEndPlugin<void> = {
  id: `${PLUGIN_ID.split(':')[0]}:log-viewer`,
  description:
    "A job's live log viewer with replica filter, search, metrics chart and run again.",
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    translator: ITranslator | null
  ): void => {
    const tracker = new WidgetTracker<MainAreaWidget<LogViewer>>({
      namespace: 'distrun-logs'
    });
    addCommands(app, tracker, translator ?? nullTranslator);
    void restorer?.restore(tracker, {
      command: CommandIDs.openLogs,
      args: widget => ({ id: widget.content.jobId }),
      name: widget => widget.content.jobId
    });
    const trans = (translator ?? nullTranslator).load(TRANSLATION_DOMAIN);
    for (const command of [
      CommandIDs.logsFirstError,
      CommandIDs.logsToggleFollow
    ]) {
      palette?.addItem({ command, category: trans.__('Distributed') });
    }
  }
};

function addCommands(
  app: JupyterFrontEnd,
  tracker: WidgetTracker<MainAreaWidget<LogViewer>>,
  translator: ITranslator
): void {
  const { commands } = app;
  const trans = translator.load(TRANSLATION_DOMAIN);
  const jobId = (args: ReadonlyPartialJSONObject): string =>
    String(args.id ?? '');
  const current = (): LogViewer | null =>
    tracker.currentWidget?.content ?? null;

  const open = async (id: string): Promise<void> => {
    if (!isJobId(id)) {
      void showErrorMessage(
        trans.__('Cannot open the logs'),
        trans.__('%1 is not a job id', id)
      );
      return;
    }
    if (activateOpen(app, tracker, viewer => viewer.jobId === id)) {
      return;
    }
    const { LogViewer } = await import('./logviewer');
    const content = new LogViewer({
      jobId: id,
      commands,
      translator
    });
    await addToMainArea(app, tracker, content, content.id);
  };

  /** Opens the new job's viewer and refreshes the job list. */
  const opened = async (job: IJob | null): Promise<void> => {
    if (!job) {
      return;
    }
    await open(job.id);
    if (commands.hasCommand(CommandIDs.refreshJobs)) {
      await commands.execute(CommandIDs.refreshJobs);
    }
  };

  commands.addCommand(CommandIDs.openLogs, {
    label: trans.__('Open logs'),
    caption: args =>
      trans.__('Open the live logs, metrics and spec of %1', jobId(args)),
    describedBy: JOB_ID_ARGS,
    execute: args => open(jobId(args))
  });

  /** Submits the job's spec again as a new job (resuming from its checkpoints if asked). */
  const runAgain = async (id: string, resume: boolean): Promise<void> => {
    try {
      const { submitSpec } = await import('../run/jobactions');
      const job = await getJob(id);
      const spec = withoutTrialEnv(job.spec);
      await opened(
        await submitSpec(resume ? { ...spec, resume_from: job.id } : spec)
      );
    } catch (error) {
      void showErrorMessage(
        trans.__('Cannot run the job again'),
        error as Error
      );
    }
  };

  commands.addCommand(CommandIDs.rerunJob, {
    label: trans.__('Run again'),
    caption: args =>
      trans.__('Submit the spec of %1 again, unchanged', jobId(args)),
    describedBy: JOB_ID_ARGS,
    execute: args => runAgain(jobId(args), false)
  });

  commands.addCommand(CommandIDs.resumeJob, {
    label: trans.__('Resume'),
    caption: args =>
      trans.__(
        "Run %1 again, resuming: a new job whose DISTRUN_CHECKPOINT_DIR starts with this job's checkpoints",
        jobId(args)
      ),
    describedBy: JOB_ID_ARGS,
    execute: args => runAgain(jobId(args), true)
  });

  commands.addCommand(CommandIDs.editRerunJob, {
    label: trans.__('Edit and run again…'),
    caption: args =>
      trans.__(
        'Edit the header and code of %1, then submit it as a new job',
        jobId(args)
      ),
    describedBy: JOB_ID_ARGS,
    execute: async args => {
      try {
        const { editAndRunAgain } = await import('../run/jobactions');
        const job = await getJob(jobId(args));
        const alone = { ...job, spec: withoutTrialEnv(job.spec) };
        await opened(await editAndRunAgain(alone, trans as TranslationBundle));
      } catch (error) {
        void showErrorMessage(
          trans.__('Cannot run the job again'),
          error as Error
        );
      }
    }
  });

  commands.addCommand(CommandIDs.downloadLogs, {
    label: trans.__('Download'),
    caption: args =>
      trans.__('Download every line of %1 as a text file', jobId(args)),
    describedBy: JOB_ID_ARGS,
    execute: async args => {
      try {
        const { downloadLogs } = await import('../run/jobactions');
        await downloadLogs(jobId(args));
      } catch (error) {
        void showErrorMessage(
          trans.__('Cannot download the logs'),
          error as Error
        );
      }
    }
  });

  commands.addCommand(CommandIDs.openTensorBoard, {
    label: trans.__('TensorBoard'),
    caption: args =>
      trans.__(
        "Open TensorBoard on the scalars %1's replicas wrote (DISTRUN_TENSORBOARD_DIR)",
        jobId(args)
      ),
    describedBy: JOB_ID_ARGS,
    execute: async args => {
      // Opened at once (a browser allows a new tab only within the click), pointed later.
      const tab = window.open('', '_blank');
      try {
        const { url } = await openTensorBoard(jobId(args));
        if (tab) {
          tab.location.href = url;
        } else {
          window.open(url, '_blank');
        }
      } catch (error) {
        tab?.close();
        void showErrorMessage(
          trans.__('Cannot open TensorBoard'),
          error as Error
        );
      }
    }
  });

  commands.addCommand(CommandIDs.logsFirstError, {
    label: trans.__('Jump to the first error in the job logs'),
    describedBy: NO_ARGS,
    isEnabled: () => current() !== null,
    execute: () => {
      current()?.jumpToFirstError();
    }
  });

  commands.addCommand(CommandIDs.logsToggleFollow, {
    label: trans.__('Follow / pause the job logs'),
    describedBy: NO_ARGS,
    isEnabled: () => current() !== null,
    isToggled: () => current()?.follow ?? false,
    execute: () => {
      const viewer = current();
      viewer?.setFollow(!viewer.follow);
    }
  });

  tracker.currentChanged.connect(() => {
    commands.notifyCommandChanged(CommandIDs.logsFirstError);
    commands.notifyCommandChanged(CommandIDs.logsToggleFollow);
  });
}
