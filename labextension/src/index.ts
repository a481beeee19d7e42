/**
 * The distrun JupyterLab plugin: the "Run distributed" command (notebook toolbar, cell
 * context menu, palette, shortcut; see schema/plugin.json), job commands and the sidebar.
 * The live job output is the MIME renderer in mime.ts.
 */

import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  showDialog,
  showErrorMessage
} from '@jupyterlab/apputils';
import { CodeCell } from '@jupyterlab/cells';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import {
  ITranslator,
  nullTranslator,
  TranslationBundle
} from '@jupyterlab/translation';
import {
  JSONExt,
  ReadonlyJSONObject,
  ReadonlyPartialJSONObject
} from '@lumino/coreutils';

import { cancelJob, deleteJob } from './common/api';
import { JOB_ID_ARGS, NO_ARGS } from './common/commandargs';
// The form is part of the sidebar, needed at activation like it.
// eslint-disable-next-line jupyter/prefer-lazy-imports
import { RunForm } from './run/form';
import {
  choiceFromSpec,
  choiceToOverrides,
  hasMagicHeader,
  hasSweepHeader,
  IRunChoice
} from './run/header';
import { distrunIcon } from './common/icons';
// The sidebar is needed at activation (the layout restorer tracks it), so load it eagerly.
// eslint-disable-next-line jupyter/prefer-lazy-imports
import { JobListPanel } from './sidebar/sidebar';
import {
  CommandIDs,
  GOTO_SOURCE_EVENT,
  PLUGIN_ID,
  TRANSLATION_DOMAIN
} from './common/tokens';
import type { ISourceFrame } from './common/sourceframes';
import { logViewerPlugin } from './logviewer/viewerplugin';
import { sweepPlugin } from './sweep/sweepplugin';

const LAST_CHOICE_KEY = `${PLUGIN_ID}:last-choice`;
/** After Run distributed, how long the job list waits before it refreshes. */
const SIDEBAR_REFRESH_DELAY_MS = 500;

/** The commands that interrupt a notebook's kernel: its jobs are cancelled with it. */
const INTERRUPT_COMMANDS = new Set([
  'notebook:interrupt-kernel',
  'kernelmenu:interrupt'
]);

/** The active cell when it is a code cell: the one the job output goes to. */
function activeCodeCell(panel: NotebookPanel | null): CodeCell | null {
  const cell = panel?.content.activeCell;
  return cell instanceof CodeCell ? cell : null;
}

/** What a header-less cell runs as, from the settings and the last submitted job. */
class RunChoices {
  constructor(private readonly _state: IStateDB | null) {}

  settings: IRunChoice = { framework: 'pytorch', replicas: {} };
  useLastChoice = true;

  current(): IRunChoice {
    return this.useLastChoice && this._last ? this._last : this.settings;
  }

  async restore(): Promise<void> {
    const saved = (await this._state?.fetch(LAST_CHOICE_KEY)) as
      IRunChoice | undefined;
    if (saved && typeof saved.framework === 'string') {
      this._last = saved;
    }
  }

  remember(choice: IRunChoice): void {
    const same =
      this._last !== null &&
      JSONExt.deepEqual(
        this._last as unknown as ReadonlyJSONObject,
        choice as unknown as ReadonlyJSONObject
      );
    if (same) {
      return; // saving it again would have the workspace saved again, as the job starts
    }
    this._last = choice;
    void this._state?.save(
      LAST_CHOICE_KEY,
      choice as unknown as ReadonlyJSONObject
    );
  }

  loadSettings(settings: ISettingRegistry.ISettings): void {
    this.settings = {
      framework: settings.get('defaultFramework').composite as string,
      replicas: settings.get('defaultReplicas').composite as Record<
        string,
        number
      >
    };
    this.useLastChoice = settings.get('useLastChoice').composite as boolean;
  }

  private _last: IRunChoice | null = null;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'Run a notebook cell as a distributed job and follow its replicas live.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [
    ICommandPalette,
    ILayoutRestorer,
    ISettingRegistry,
    IStateDB,
    ITranslator
  ],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    settingRegistry: ISettingRegistry | null,
    state: IStateDB | null,
    translator: ITranslator | null
  ): void => {
    const trans = (translator ?? nullTranslator).load(TRANSLATION_DOMAIN);
    const choices = new RunChoices(state);
    void choices.restore();
    if (settingRegistry) {
      void settingRegistry.load(PLUGIN_ID).then(settings => {
        choices.loadSettings(settings);
        settings.changed.connect(() => choices.loadSettings(settings));
      });
    }

    const sidebar = new JobListPanel({
      commands: app.commands,
      translator: translator ?? nullTranslator
    });
    app.shell.add(sidebar, 'left', { rank: 900 });
    restorer?.add(sidebar, sidebar.id);

    const form = new RunForm({
      commands: app.commands,
      translator: translator ?? nullTranslator,
      defaults: () => choices.current()
    });
    sidebar.addSection(form.node);
    followActiveCell(tracker, form);
    void form.load().then(() => form.follow(...activeCellSource(tracker)));

    addCommands(app, tracker, sidebar, form, choices, trans);
    cancelJobsOnInterrupt(app, tracker, trans);
    followSourceLinks(app, tracker, trans);
    palette?.addItem({
      command: CommandIDs.runCell,
      category: trans.__('Distributed')
    });
    palette?.addItem({
      command: CommandIDs.refreshJobs,
      category: trans.__('Distributed')
    });
  }
};

function addCommands(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  sidebar: JobListPanel,
  form: RunForm,
  choices: RunChoices,
  trans: TranslationBundle
): void {
  const { commands } = app;
  const jobId = (args: ReadonlyPartialJSONObject): string =>
    String(args.id ?? '');

  commands.addCommand(CommandIDs.runCell, {
    label: args => (args.toolbar ? '' : trans.__('Run distributed')),
    describedBy: {
      args: {
        type: 'object',
        properties: {
          toolbar: { type: 'boolean', description: 'Shown as a toolbar icon' }
        }
      }
    },
    caption: trans.__(
      'Run the cell as a distributed job and show every replica live'
    ),
    icon: distrunIcon,
    isEnabled: () => activeCodeCell(tracker.currentWidget) !== null,
    execute: async () => {
      const panel = tracker.currentWidget;
      if (!panel || !activeCodeCell(panel)) {
        return;
      }
      const { runCellDistributed, selectedSource } =
        await import('./run/runcell');
      const cell = selectedSource(panel);
      if (hasSweepHeader(cell)) {
        const { runSweepInKernel } = await import('./run/sweepcell');
        form.clearErrors();
        const problem = await runSweepInKernel(panel);
        if (problem) {
          void showErrorMessage(trans.__('Cannot run the sweep'), problem);
        }
        await sidebar.refresh();
        return;
      }
      // Before the form knows the server's frameworks, fall back to the remembered choice.
      const overrides =
        form.overridesFor(cell) ??
        (hasMagicHeader(cell) ? null : choiceToOverrides(choices.current()));
      form.clearErrors();
      const result = await runCellDistributed(panel, overrides);
      if (result && 'job' in result) {
        choices.remember(choiceFromSpec(result.job.spec));
        form.remember(panel);
      } else if (result) {
        form.showError(result.error);
      }
      // Not at once: the job's replicas are starting, and the list's request and repaint
      // would take CPU from them just when the person waits for their first line.
      window.setTimeout(() => void sidebar.refresh(), SIDEBAR_REFRESH_DELAY_MS);
    }
  });

  commands.addCommand(CommandIDs.cancelJob, {
    label: trans.__('Cancel'),
    describedBy: JOB_ID_ARGS,
    caption: args => trans.__('Stop every replica of %1', jobId(args)),
    execute: async args => {
      try {
        await cancelJob(jobId(args));
      } catch (error) {
        void showErrorMessage(
          trans.__('Cannot cancel the job'),
          error as Error
        );
      }
      await sidebar.refresh();
    }
  });

  commands.addCommand(CommandIDs.deleteJob, {
    label: trans.__('Delete'),
    describedBy: JOB_ID_ARGS,
    caption: args =>
      trans.__(
        'Forget %1 and its logs (a running job is cancelled first)',
        jobId(args)
      ),
    execute: async args => {
      const id = jobId(args);
      const answer = await showDialog({
        title: trans.__('Delete job %1?', id),
        body: trans.__(
          'Its logs are deleted too; a running job is cancelled first.'
        ),
        buttons: [
          Dialog.cancelButton(),
          Dialog.warnButton({ label: trans.__('Delete') })
        ]
      });
      if (!answer.button.accept) {
        return;
      }
      try {
        await deleteJob(id);
      } catch (error) {
        void showErrorMessage(
          trans.__('Cannot delete the job'),
          error as Error
        );
      }
      await sidebar.refresh();
    }
  });

  commands.addCommand(CommandIDs.refreshJobs, {
    label: trans.__('Refresh distributed jobs'),
    describedBy: NO_ARGS,
    execute: () => sidebar.refresh()
  });

  tracker.activeCellChanged.connect(() =>
    commands.notifyCommandChanged(CommandIDs.runCell)
  );
  tracker.currentChanged.connect(() =>
    commands.notifyCommandChanged(CommandIDs.runCell)
  );
}

/** The active notebook and its active code cell's source (null when it is not a code cell). */
function activeCellSource(
  tracker: INotebookTracker
): [NotebookPanel | null, string | null] {
  const panel = tracker.currentWidget;
  const cell = activeCodeCell(panel);
  return [panel, cell ? cell.model.sharedModel.getSource() : null];
}

/** Keeps the form on the active cell: its header, or the notebook's own choice. */
function followActiveCell(tracker: INotebookTracker, form: RunForm): void {
  let watched: CodeCell | null = null;
  let timer = 0;
  const follow = () => form.follow(...activeCellSource(tracker));
  const onEdit = () => {
    window.clearTimeout(timer);
    timer = window.setTimeout(follow, 300);
  };
  const watch = () => {
    watched?.model.contentChanged.disconnect(onEdit);
    watched = activeCodeCell(tracker.currentWidget);
    watched?.model.contentChanged.connect(onEdit);
    follow();
  };
  tracker.currentChanged.connect(watch);
  tracker.activeCellChanged.connect(watch);
}

/**
 * A click on a traceback frame of a job's own code, in a cell output or the log viewer,
 * shows that line of the cell (or the shipped file) the job came from.
 */
function followSourceLinks(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  trans: TranslationBundle
): void {
  document.addEventListener(GOTO_SOURCE_EVENT, event => {
    const frame = (event as CustomEvent<ISourceFrame>).detail;
    void import('./run/gotosource')
      .then(({ goToSource }) => goToSource(app, tracker, frame))
      .catch(error =>
        showErrorMessage(trans.__('Cannot show the source'), error as Error)
      );
  });
}

/**
 * Interrupting a notebook's kernel (toolbar stop button, `I I`, Kernel menu) also cancels the
 * jobs its cells started that are still running.
 */
function cancelJobsOnInterrupt(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  trans: TranslationBundle
): void {
  const cancelling = new Set<NotebookPanel>();
  app.commands.commandExecuted.connect((_, executed) => {
    if (!INTERRUPT_COMMANDS.has(executed.id)) {
      return;
    }
    // The command names its notebook by widget id in its args, or acts on the current one.
    const named = Object.values(executed.args);
    const panel =
      tracker.find(candidate => named.includes(candidate.id)) ??
      tracker.currentWidget;
    if (!panel || cancelling.has(panel)) {
      return; // the Kernel menu runs the notebook's own command: cancel once
    }
    cancelling.add(panel);
    void import('./run/runcell')
      .then(({ cancelNotebookJobs }) => cancelNotebookJobs(panel))
      .catch(error =>
        showErrorMessage(trans.__('Cannot cancel the jobs'), error as Error)
      )
      .finally(() => cancelling.delete(panel));
  });
}

export default [plugin, logViewerPlugin, sweepPlugin];
