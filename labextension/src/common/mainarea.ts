/**
 * A feature's view in the main area: found again when it is open already, else wrapped in a
 * MainAreaWidget (the views draw their own bars: no toolbar), tracked for the layout
 * restorer, added and activated.
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

/** Activates the tracked view whose content `matches`; whether there was one. */
export function activateOpen<T extends Widget>(
  app: JupyterFrontEnd,
  tracker: WidgetTracker<MainAreaWidget<T>>,
  matches: (content: T) => boolean
): boolean {
  const open = tracker.find(widget => matches(widget.content));
  if (open) {
    app.shell.activateById(open.id);
  }
  return open !== undefined;
}

/** Shows `content` in the main area as the widget `id`, tracked by `tracker`. */
export async function addToMainArea<T extends Widget>(
  app: JupyterFrontEnd,
  tracker: WidgetTracker<MainAreaWidget<T>>,
  content: T,
  id: string
): Promise<void> {
  const widget = new MainAreaWidget({ content });
  widget.toolbar.hide();
  widget.id = id;
  widget.title.label = content.title.label;
  widget.title.caption = content.title.caption;
  widget.title.icon = content.title.icon;
  await tracker.add(widget);
  app.shell.add(widget, 'main');
  app.shell.activateById(widget.id);
}
