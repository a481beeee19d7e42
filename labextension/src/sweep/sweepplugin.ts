/**
 * The sweep plugin: `distrun:open-sweep` opens a sweep's view in the main area (restored after
 * a reload), `distrun:compare-jobs` opens jobs side by side, and the sweep's cancel and delete.
 */

import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  MainAreaWidget,
  showDialog,
  showErrorMessage,
  WidgetTracker
} from '@jupyterlab/apputils';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { cancelSweep, deleteSweep } from '../common/api';
import { SWEEP_ID_ARGS } from '../common/commandargs';
import { activateOpen, addToMainArea } from '../common/mainarea';
import { isJobId } from '../common/model';
import { CommandIDs, PLUGIN_ID, TRANSLATION_DOMAIN } from '../common/tokens';
import type { CompareView } from './compareview';
import type { SweepView } from './sweepview';

const JOB_IDS_ARGS = {
  args: {
    type: 'object',
    properties: {
      ids: {
        type: 'array',
        items: { type: 'string' },
        description: 'The job ids (two or more)'
      }
    },
    required: ['ids']
  }
} as const;

export const sweepPlugin: JupyterFrontEndPlugin<void> = {
  id: `${PLUGIN_ID.split(':')[0]}:sweeps`,
  description: "A sweep's trials side by side, and any jobs compared.",
  autoStart: true,
  optional: [ILayoutRestorer, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    translator: ITranslator | null
  ): void => {
    const sweeps = new WidgetTracker<MainAreaWidget<SweepView>>({
      namespace: 'distrun-sweeps'
    });
    const compares = new WidgetTracker<MainAreaWidget<CompareView>>({
      namespace: 'distrun-compare'
    });
    addCommands(app, sweeps, compares, translator ?? nullTranslator);
    void restorer?.restore(sweeps, {
      command: CommandIDs.openSweep,
      args: widget => ({ id: widget.content.sweepId }),
      name: widget => widget.content.sweepId
    });
    void restorer?.restore(compares, {
      command: CommandIDs.compareJobs,
      args: widget => ({ ids: widget.content.jobIds }),
      name: widget => widget.content.jobIds.join(',')
    });
  }
};

function addCommands(
  app: JupyterFrontEnd,
  sweeps: WidgetTracker<MainAreaWidget<SweepView>>,
  compares: WidgetTracker<MainAreaWidget<CompareView>>,
  translator: ITranslator
): void {
  const { commands } = app;
  const trans = translator.load(TRANSLATION_DOMAIN);
  const sweepId = (args: ReadonlyPartialJSONObject): string =>
    String(args.id ?? '');
  const refreshJobs = async () => {
    if (commands.hasCommand(CommandIDs.refreshJobs)) {
      await commands.execute(CommandIDs.refreshJobs);
    }
  };

  commands.addCommand(CommandIDs.openSweep, {
    label: trans.__('Open sweep'),
    caption: args =>
      trans.__('Open the trials of %1 side by side', sweepId(args)),
    describedBy: SWEEP_ID_ARGS,
    execute: async args => {
      const id = sweepId(args);
      if (activateOpen(app, sweeps, view => view.sweepId === id)) {
        return;
      }
      const { SweepView } = await import('./sweepview');
      const view = new SweepView({ sweepId: id, commands, translator });
      await addToMainArea(app, sweeps, view, `${view.id}-panel`);
    }
  });

  commands.addCommand(CommandIDs.compareJobs, {
    label: trans.__('Compare'),
    caption: args =>
      trans.__(
        'Compare the metrics and specs of %1',
        ((args.ids ?? []) as string[]).join(', ')
      ),
    describedBy: JOB_IDS_ARGS,
    isEnabled: args => ((args.ids ?? []) as string[]).length >= 2,
    execute: async args => {
      const ids = ((args.ids ?? []) as unknown[]).filter(isJobId);
      const same = (view: CompareView) => view.jobIds.join() === ids.join();
      if (ids.length < 2 || activateOpen(app, compares, same)) {
        return;
      }
      const { CompareView } = await import('./compareview');
      const view = new CompareView({ jobIds: ids, translator });
      await addToMainArea(app, compares, view, `${view.id}-panel`);
    }
  });

  commands.addCommand(CommandIDs.cancelSweep, {
    label: trans.__('Cancel sweep'),
    caption: args =>
      trans.__(
        'Stop every trial of %1 still running; no more start',
        sweepId(args)
      ),
    describedBy: SWEEP_ID_ARGS,
    execute: async args => {
      await act(trans.__('Cannot cancel the sweep'), () =>
        cancelSweep(sweepId(args))
      );
      await refreshJobs();
    }
  });

  commands.addCommand(CommandIDs.deleteSweep, {
    label: trans.__('Delete sweep'),
    caption: args =>
      trans.__('Delete every trial of %1 and its logs', sweepId(args)),
    describedBy: SWEEP_ID_ARGS,
    execute: async args => {
      const id = sweepId(args);
      const answer = await showDialog({
        title: trans.__('Delete sweep %1?', id),
        body: trans.__(
          'Every trial and its logs are deleted; running trials are cancelled first.'
        ),
        buttons: [
          Dialog.cancelButton(),
          Dialog.warnButton({ label: trans.__('Delete') })
        ]
      });
      if (!answer.button.accept) {
        return;
      }
      const deleted = await act(trans.__('Cannot delete the sweep'), () =>
        deleteSweep(id)
      );
      if (deleted) {
        sweeps.find(widget => widget.content.sweepId === id)?.dispose();
      }
      await refreshJobs();
    }
  });
}

/** Runs `action`; a failure shows as a dialog. Whether it succeeded. */
async function act(
  title: string,
  action: () => Promise<unknown>
): Promise<boolean> {
  try {
    await action();
    return true;
  } catch (error) {
    void showErrorMessage(title, error as Error);
    return false;
  }
}
