/**
 * The MIME renderer of `application/vnd.distrun.job+json` outputs. The output stores only
 * `{ job_id }`, so a reloaded notebook's output reconnects to the job and shows it live
 * (or finished) again.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { nullTranslator } from '@jupyterlab/translation';
import { PanelLayout, Widget } from '@lumino/widgets';

import { JobView } from './jobview';
import { isJobId } from '../common/model';
import { JOB_MIME_TYPE, TRANSLATION_DOMAIN } from '../common/tokens';

export class JobRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(private readonly _options: IRenderMime.IRendererOptions) {
    super();
    this.addClass('jp-distrun-JobRenderer');
    this.layout = new PanelLayout();
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const data = model.data[JOB_MIME_TYPE] as { job_id?: unknown } | undefined;
    const jobId = data?.job_id;
    const layout = this.layout as PanelLayout;
    if (this._view && this._view.jobId === jobId) {
      return;
    }
    this._view?.dispose();
    this._view = null;
    if (!isJobId(jobId)) {
      const trans = (this._options.translator ?? nullTranslator).load(
        TRANSLATION_DOMAIN
      );
      this.node.textContent = trans.__(
        'not a distrun job id: %1',
        JSON.stringify(jobId)
      );
      return;
    }
    this._view = new JobView({ jobId, translator: this._options.translator });
    layout.addWidget(this._view);
  }

  private _view: JobView | null = null;
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  // Safe: it renders text only, and talks only to the user's own jobs on their server.
  safe: true,
  mimeTypes: [JOB_MIME_TYPE],
  defaultRank: 50,
  createRenderer: options => new JobRenderer(options)
};

const extension: IRenderMime.IExtension = {
  id: '@distrun/labextension:job-renderer',
  description: 'Shows a distrun job live in a cell output.',
  rendererFactory,
  rank: 50,
  dataType: 'json'
};

export default extension;
