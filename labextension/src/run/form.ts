/**
 * The Run-distributed form at the top of the job sidebar: framework, the framework's roles with
 * replica counts and CPU/memory/GPU, image, engine and namespace, all offered from
 * `GET /distrun/engines`.
 *
 * What it shows follows the active notebook cell: a cell with a header pre-fills the form from
 * the header (and only the fields the user then edits are sent); a header-less cell gets the
 * notebook's own choice, kept in the notebook's metadata under `distrun.run` when a job is
 * submitted, so it travels with the notebook and survives reloads.
 */

import { NotebookPanel } from '@jupyterlab/notebook';
import { ITranslator, TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { PartialJSONObject } from '@lumino/coreutils';

import { DistrunAPIError, requestAPI } from '../common/api';
import {
  applyHeader,
  cloneValues,
  defaultValues,
  findFramework,
  formField,
  gpuExample,
  gpuOffer,
  IEngines,
  IFormValues,
  IHeaderValues,
  readHeader,
  reconcile,
  roleNames,
  switchFramework,
  toOverrides
} from './formmodel';
import { IJobSpec } from '../common/model';
import { CommandIDs, TRANSLATION_DOMAIN } from '../common/tokens';

/** Notebook metadata key of the last submitted choice: `{"distrun": {"run": {...}}}`. */
export const METADATA_KEY = 'distrun';

/** Where a header-less notebook starts: the settings, or the last job's choice. */
export interface IFormDefaults {
  framework: string;
  replicas: Record<string, number>;
}

type Field = HTMLInputElement | HTMLSelectElement;

export class RunForm {
  constructor(options: {
    commands: CommandRegistry;
    translator: ITranslator;
    defaults: () => IFormDefaults;
  }) {
    this._commands = options.commands;
    this._trans = options.translator.load(TRANSLATION_DOMAIN);
    this._defaults = options.defaults;
    this.node.className = 'jp-distrun-RunForm';
    this.node.noValidate = true; // the server checks every value and says what to fix
    this.node.setAttribute('aria-label', this._trans.__('Run distributed'));
    this.node.dataset.testId = 'distrun-form';
    this.node.dataset.ready = 'false';
    this.node.onsubmit = event => {
      event.preventDefault();
      void this._commands.execute(CommandIDs.runCell);
    };
    this._commands.commandChanged.connect(this._onCommandChanged, this);
  }

  readonly node = document.createElement('form');

  /** The server's frameworks and engines, once loaded. */
  get engines(): IEngines | null {
    return this._engines;
  }

  /** Loads `GET /distrun/engines` and draws the form; a failure is said in the form. */
  async load(): Promise<void> {
    try {
      this._engines = await requestAPI<IEngines>('engines');
    } catch (error) {
      this._renderUnavailable(error as Error);
      return;
    }
    this._show();
  }

  /** Follows the active notebook and its active cell's source (null: no code cell). */
  follow(panel: NotebookPanel | null, cell: string | null): void {
    const header =
      this._engines && cell !== null
        ? readHeader(cell, roleNames(this._engines))
        : null;
    const key = JSON.stringify(header);
    if (panel === this._panel && key === this._headerKey) {
      return; // same cell settings: keep the user's edits
    }
    this._panel = panel;
    this._headerKey = key;
    this._header = header;
    this._show();
  }

  /**
   * The `overrides` for running `cell` from this notebook: every field for a header-less cell,
   * only the edited fields for a cell with a header; null before the engines are known.
   */
  overridesFor(cell: string): Partial<IJobSpec> | null {
    if (!this._engines || !this._values) {
      return null;
    }
    const header = readHeader(cell, roleNames(this._engines));
    if (header === null) {
      return toOverrides(this._values);
    }
    if (header.framework === undefined) {
      // The header leaves the framework to the form (the server's fallback).
      return { framework: this._values.framework };
    }
    // A cell that carries its own header runs as it says, whatever the form shows.
    return null;
  }

  /** Keeps the form's choice in the notebook's metadata (after a job was accepted). */
  remember(panel: NotebookPanel): void {
    if (this._values && this._header === null) {
      const stored = { run: this._values } as unknown as PartialJSONObject;
      panel.model?.setMetadata(METADATA_KEY, stored);
    }
  }

  clearErrors(): void {
    for (const slot of this.node.querySelectorAll<HTMLElement>(
      '.jp-distrun-RunForm-error'
    )) {
      slot.textContent = '';
      slot.hidden = true;
    }
    for (const input of this.node.querySelectorAll('[aria-invalid]')) {
      input.removeAttribute('aria-invalid');
    }
  }

  /**
   * Shows a refused submission next to the field it names (`field` of a 400), or under the
   * Run button; an error on a header line stays with the cell, where it is already shown.
   */
  showError(error: DistrunAPIError): void {
    this.clearErrors();
    if (error.line !== null) {
      return;
    }
    const field = formField(error.field);
    const input = field
      ? this.node.querySelector<Field>(`[name="${CSS.escape(field)}"]`)
      : null;
    input?.setAttribute('aria-invalid', 'true');
    const slot =
      (field && this._slots.get(field)) ?? this._slots.get('') ?? null;
    if (slot) {
      slot.textContent = error.message;
      slot.hidden = false;
    }
  }

  dispose(): void {
    this._commands.commandChanged.disconnect(this._onCommandChanged, this);
    this.node.remove();
  }

  // --- values ---

  private _fromHeader(header: IHeaderValues): IFormValues {
    return applyHeader(
      this._engines!,
      header,
      this._notebookValues().framework
    );
  }

  private _notebookValues(): IFormValues {
    const engines = this._engines!;
    const panel = this._panel;
    const known = panel ? this._byNotebook.get(panel) : undefined;
    if (known) {
      return cloneValues(known);
    }
    const stored = panel?.model?.getMetadata(METADATA_KEY) as
      { run?: unknown } | undefined;
    const fromMetadata = reconcile(engines, stored?.run);
    if (fromMetadata) {
      return fromMetadata;
    }
    const defaults = this._defaults();
    return defaultValues(engines, defaults.framework, defaults.replicas);
  }

  /** Records an edit: for a header-less cell it becomes the notebook's choice. */
  private _edited(values: IFormValues): void {
    this._values = values;
    if (this._header === null && this._panel) {
      this._byNotebook.set(this._panel, cloneValues(values));
    }
  }

  // --- DOM ---

  private _show(): void {
    if (!this._engines) {
      return;
    }
    this._values = this._header
      ? this._fromHeader(this._header)
      : this._notebookValues();
    this._render();
  }

  private _renderUnavailable(error: Error): void {
    const message = document.createElement('p');
    message.className = 'jp-distrun-RunForm-unavailable';
    message.dataset.testId = 'distrun-form-unavailable';
    message.textContent =
      error instanceof DistrunAPIError && error.status === 404
        ? this._trans.__(
            'The distrun server extension is missing: check `jupyter server extension list`.'
          )
        : this._trans.__(
            'Cannot load the frameworks and engines: %1',
            error.message
          );
    this.node.replaceChildren(message);
  }

  private _render(): void {
    const engines = this._engines!;
    const values = this._values!;
    this._slots.clear();
    const title = document.createElement('h3');
    title.textContent = this._trans.__('Run distributed');

    const source = document.createElement('p');
    source.className = 'jp-distrun-RunForm-source';
    source.dataset.testId = 'distrun-form-source';
    source.dataset.source = this._header ? 'header' : 'notebook';
    source.textContent = this._header
      ? this._trans.__(
          "From the cell's header, which decides how it runs; edit the header to change it."
        )
      : this._trans.__('For cells without a header in this notebook.');

    const framework = this._select(
      'framework',
      engines.frameworks.map(fw => [fw.name, fw.name]),
      values.framework,
      value => this._edited(switchFramework(engines, this._values!, value)),
      true
    );

    const fw = findFramework(engines, values.framework);
    const engineOptions = engines.engines.map((info): [string, string] => [
      info.name,
      info.available
        ? info.name
        : this._trans.__('%1 (unavailable: %2)', info.name, info.reason ?? '')
    ]);
    const engine = this._select(
      'engine',
      engineOptions,
      values.engine,
      value => {
        this._values!.engine = value;
        this._edited(this._values!);
      },
      true // the roles' GPU fields offer what this engine can give
    );

    const image = this._text('image', values.image, fw?.default_image ?? '');
    const namespace = this._text('namespace', values.namespace, '');
    const namespaces = engines.engines.find(
      e => e.name === values.engine
    )?.namespaces;
    if (namespaces?.length) {
      const list = document.createElement('datalist');
      list.id = 'distrun-form-namespaces';
      list.append(...namespaces.map(name => new Option(name, name)));
      namespace.querySelector('input')!.setAttribute('list', list.id);
      namespace.append(list);
    }

    const run = document.createElement('button');
    run.type = 'submit';
    run.className = 'jp-Button jp-mod-styled jp-mod-accept';
    run.dataset.testId = 'distrun-form-run';
    run.textContent = this._trans.__('Run distributed');
    run.title = this._commands.caption(CommandIDs.runCell);
    run.disabled = !this._commands.isEnabled(CommandIDs.runCell);
    this._run = run;

    this.node.replaceChildren(
      title,
      source,
      framework,
      this._rolesTable(),
      image,
      engine,
      namespace,
      this._slot(''),
      run
    );
    this.node.dataset.ready = 'true';
  }

  private _rolesTable(): HTMLElement {
    const engines = this._engines!;
    const values = this._values!;
    const fw = findFramework(engines, values.framework);
    const table = document.createElement('table');
    table.className = 'jp-distrun-RunForm-roles';
    table.setAttribute(
      'aria-label',
      this._trans.__('Replicas and resources per role')
    );
    const head = table.createTHead().insertRow();
    for (const label of [
      this._trans.__('Role'),
      this._trans.__('Replicas'),
      this._trans.__('CPU'),
      this._trans.__('Memory'),
      this._trans.__('GPU'),
      this._trans.__('GPU memory')
    ]) {
      const th = document.createElement('th');
      th.scope = 'col';
      th.textContent = label;
      head.append(th);
    }
    const body = table.createTBody();
    for (const role of fw?.roles ?? []) {
      const current = values.roles[role.name];
      const row = body.insertRow();
      const name = document.createElement('th');
      name.scope = 'row';
      name.textContent = role.name;
      row.append(name);
      const max = role.max_replicas ?? engines.limits.max_replicas;
      const replicas = this._input(`roles.${role.name}.replicas`, 'number');
      replicas.min = String(role.min_replicas);
      replicas.max = String(max);
      replicas.value = String(current.replicas);
      replicas.setAttribute(
        'aria-label',
        this._trans.__(
          '%1 replicas (%2 to %3)',
          role.name,
          role.min_replicas,
          max
        )
      );
      replicas.oninput = () => {
        this._values!.roles[role.name].replicas = parseInt(replicas.value, 10);
        this._edited(this._values!);
      };
      row.insertCell().append(replicas);
      const offer = gpuOffer(engines, values.engine);
      for (const [resource, placeholder, label] of [
        ['cpu', '1', this._trans.__('%1 CPU', role.name)],
        ['memory', '2Gi', this._trans.__('%1 memory', role.name)],
        ['gpu', gpuExample(offer), this._trans.__('%1 GPUs', role.name)],
        ['gpuMemory', '10Gi', this._trans.__('%1 GPU memory', role.name)]
      ] as const) {
        const input = this._input(`roles.${role.name}.${resource}`, 'text');
        input.value = current[resource];
        input.placeholder = placeholder;
        input.setAttribute('aria-label', label);
        if (resource.startsWith('gpu') && offer) {
          input.title = offer.offers;
        }
        if (resource === 'gpuMemory' && offer && !offer.memory) {
          input.disabled = !input.value; // what a header set stays visible
        }
        input.oninput = () => {
          this._values!.roles[role.name][resource] = input.value;
          this._edited(this._values!);
        };
        row.insertCell().append(input);
      }
      const errorRow = body.insertRow();
      const cell = errorRow.insertCell();
      cell.colSpan = 6;
      const slot = this._slot(`roles.${role.name}`);
      cell.append(slot);
      for (const what of ['replicas', 'cpu', 'memory', 'gpu', 'gpuMemory']) {
        this._slots.set(`roles.${role.name}.${what}`, slot);
      }
    }
    const wrapper = document.createElement('div');
    wrapper.append(table, this._slot('roles'));
    const offer = gpuOffer(engines, values.engine);
    if (offer) {
      const hint = document.createElement('p');
      hint.className = 'jp-distrun-RunForm-gpuHint';
      hint.dataset.testId = 'distrun-form-gpu-offer';
      hint.textContent = this._trans.__('GPUs: %1', offer.offers);
      wrapper.append(hint);
    }
    return wrapper;
  }

  private _input(name: string, type: string): HTMLInputElement {
    const input = document.createElement('input');
    input.type = type;
    input.name = name;
    input.className = 'jp-mod-styled';
    input.dataset.testId = `distrun-form-${name}`;
    return input;
  }

  private _labelled(name: string, label: string, field: Field): HTMLElement {
    const row = document.createElement('div');
    row.className = 'jp-distrun-RunForm-row';
    const text = document.createElement('label');
    field.id = `distrun-form-${name}`;
    text.htmlFor = field.id;
    text.textContent = label;
    const slot = this._slot(name);
    field.setAttribute('aria-describedby', slot.id);
    row.append(text, field, slot);
    return row;
  }

  private _labelFor(name: string): string {
    switch (name) {
      case 'framework':
        return this._trans.__('Framework');
      case 'engine':
        return this._trans.__('Engine');
      case 'image':
        return this._trans.__('Image');
      default:
        return this._trans.__('Namespace');
    }
  }

  private _select(
    name: string,
    options: [string, string][],
    value: string,
    changed: (value: string) => void,
    rerender = false
  ): HTMLElement {
    const select = document.createElement('select');
    select.name = name;
    select.className = 'jp-mod-styled';
    select.dataset.testId = `distrun-form-${name}`;
    select.append(...options.map(([v, label]) => new Option(label, v)));
    select.value = value;
    select.onchange = () => {
      changed(select.value);
      if (rerender) {
        this._render();
      }
    };
    return this._labelled(name, this._labelFor(name), select);
  }

  private _text(
    name: 'image' | 'namespace',
    value: string,
    placeholder: string
  ): HTMLElement {
    const input = this._input(name, 'text');
    input.value = value;
    input.placeholder = placeholder;
    input.oninput = () => {
      this._values![name] = input.value;
      this._edited(this._values!);
    };
    return this._labelled(name, this._labelFor(name), input);
  }

  /** Where the server's message about `field` goes ('' for one that names no field). */
  private _slot(field: string): HTMLElement {
    const slot = document.createElement('div');
    slot.className = 'jp-distrun-RunForm-error';
    slot.id = `distrun-form-error-${field || 'general'}`;
    slot.dataset.testId = slot.id;
    slot.setAttribute('role', 'alert');
    slot.hidden = true;
    this._slots.set(field, slot);
    return slot;
  }

  private _onCommandChanged(
    _: CommandRegistry,
    change: CommandRegistry.ICommandChangedArgs
  ): void {
    if (this._run && (!change.id || change.id === CommandIDs.runCell)) {
      this._run.disabled = !this._commands.isEnabled(CommandIDs.runCell);
    }
  }

  private readonly _commands: CommandRegistry;
  private readonly _trans: TranslationBundle;
  private readonly _defaults: () => IFormDefaults;
  private readonly _slots = new Map<string, HTMLElement>();
  private readonly _byNotebook = new WeakMap<NotebookPanel, IFormValues>();
  private _engines: IEngines | null = null;
  private _values: IFormValues | null = null;
  private _panel: NotebookPanel | null = null;
  private _header: IHeaderValues | null = null;
  private _headerKey = 'null';
  private _run: HTMLButtonElement | null = null;
}
