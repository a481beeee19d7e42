/**
 * The Run-distributed form's values, with no DOM: built from `GET /distrun/engines`, read from
 * a cell's header, turned into the `overrides` of `POST /distrun/jobs`, and matched to the
 * `field` of a server error.
 *
 * The header reader here only pre-fills the form; the server's parser (distrun.core.header) stays
 * the authority. It reads the settings the form shows (framework, role counts and resources,
 * image, engine, namespace) following the server's rules and ignores everything else, so a cell
 * with a header is sent as written plus only the fields the user then edited in the form.
 */

import { IJobSpec } from '../common/model';

export interface IRoleInfo {
  name: string;
  min_replicas: number;
  max_replicas: number | null;
  default_replicas: number;
}

export interface IFrameworkInfo {
  name: string;
  kubeflow_kind: string | null;
  default_image: string;
  roles: IRoleInfo[];
  completion_roles: string[];
}

/** What an engine can give of GPUs (`options.gpus` of `GET /distrun/engines`). */
export interface IGpuOffer {
  mode: string;
  offers: string;
  fractions: boolean;
  memory: boolean;
  mig_profiles: string[];
  resources: string[];
}

export interface IEngineInfo {
  name: string;
  description: string;
  available: boolean;
  reason: string | null;
  namespaces: string[];
  options?: { gpus?: IGpuOffer };
}

/** The body of `GET /distrun/engines`. */
export interface IEngines {
  default_engine: string;
  engines: IEngineInfo[];
  frameworks: IFrameworkInfo[];
  limits: { max_replicas: number; max_gpus_per_replica: number };
}

export interface IRoleValues {
  replicas: number;
  cpu: string; // '' = not set
  memory: string;
  gpu: string;
  gpuMemory: string;
}

export interface IFormValues {
  framework: string;
  roles: Record<string, IRoleValues>;
  image: string;
  engine: string;
  namespace: string;
}

/** What a cell's header says about the form's fields; absent keys were not written. */
export interface IHeaderValues {
  framework?: string;
  image?: string;
  engine?: string;
  namespace?: string;
  counts: Record<string, number>;
  /** Role -> resource -> value; role '' means every role (`%cpu=2`). */
  resources: Record<string, Partial<Record<Resource, string>>>;
}

export type Resource = 'cpu' | 'memory' | 'gpu' | 'gpuMemory';
const RESOURCES: readonly Resource[] = ['cpu', 'memory', 'gpu', 'gpuMemory'];
/** A resource's JobSpec field where the form spells it otherwise. */
const SPEC_FIELD: Partial<Record<Resource, string>> = {
  gpuMemory: 'gpu_memory'
};

export function findFramework(
  engines: IEngines,
  name: string
): IFrameworkInfo | undefined {
  return engines.frameworks.find(framework => framework.name === name);
}

/** Every role name any framework has, for reading headers. */
export function roleNames(engines: IEngines): string[] {
  const names = engines.frameworks.flatMap(fw => fw.roles.map(r => r.name));
  return [...new Set(names)];
}

function emptyRole(replicas: number): IRoleValues {
  return { replicas, cpu: '', memory: '', gpu: '', gpuMemory: '' };
}

/**
 * The form for `framework` (the server's default engine, the framework's default replica
 * counts, `replicas` winning where given). An unknown framework falls back to the first.
 */
export function defaultValues(
  engines: IEngines,
  framework: string,
  replicas: Record<string, number> = {}
): IFormValues {
  const fw = findFramework(engines, framework) ?? engines.frameworks[0];
  const roles: Record<string, IRoleValues> = {};
  for (const role of fw?.roles ?? []) {
    const wanted = replicas[role.name];
    roles[role.name] = emptyRole(
      Number.isInteger(wanted) ? wanted : role.default_replicas
    );
  }
  return {
    framework: fw?.name ?? framework,
    roles,
    image: '',
    engine: engines.default_engine,
    namespace: ''
  };
}

/** The same choice on another framework: roles both share keep their values. */
export function switchFramework(
  engines: IEngines,
  values: IFormValues,
  framework: string
): IFormValues {
  const next = defaultValues(engines, framework);
  for (const name of Object.keys(next.roles)) {
    if (values.roles[name]) {
      next.roles[name] = { ...values.roles[name] };
    }
  }
  return { ...next, engine: values.engine, namespace: values.namespace };
}

/**
 * Stored values (notebook metadata) made to fit what the server offers now: unknown
 * frameworks, roles and engines are dropped, so a stale choice never reaches the server.
 */
export function reconcile(
  engines: IEngines,
  stored: unknown
): IFormValues | null {
  if (!isObject(stored) || typeof stored.framework !== 'string') {
    return null;
  }
  const fw = findFramework(engines, stored.framework);
  if (!fw) {
    return null;
  }
  const values = defaultValues(engines, fw.name);
  const roles = isObject(stored.roles) ? stored.roles : {};
  for (const name of Object.keys(values.roles)) {
    const role = roles[name];
    if (isObject(role) && Number.isInteger(role.replicas)) {
      values.roles[name] = {
        replicas: role.replicas as number,
        cpu: asString(role.cpu),
        memory: asString(role.memory),
        gpu: asString(role.gpu),
        gpuMemory: asString(role.gpuMemory)
      };
    }
  }
  values.image = asString(stored.image);
  values.namespace = asString(stored.namespace);
  const engine = asString(stored.engine);
  if (engines.engines.some(info => info.name === engine)) {
    values.engine = engine;
  }
  return values;
}

/**
 * What the server runs for a cell with this header, as form values: the header's framework
 * (else `fallbackFramework`, which the form then sends), its role counts (roles it does not
 * name get none, or their required minimum; no counts at all: the framework's defaults), its
 * resources, image, engine and namespace.
 */
export function applyHeader(
  engines: IEngines,
  header: IHeaderValues,
  fallbackFramework: string
): IFormValues {
  const values = defaultValues(engines, header.framework ?? fallbackFramework);
  const fw = findFramework(engines, values.framework);
  const named = Object.keys(header.counts).length > 0;
  for (const role of fw?.roles ?? []) {
    const role_values = values.roles[role.name];
    if (named) {
      role_values.replicas =
        header.counts[role.name] ??
        (role.min_replicas > 0
          ? Math.max(role.default_replicas, role.min_replicas)
          : 0);
    }
    const resources = {
      ...header.resources[''],
      ...header.resources[role.name]
    };
    for (const resource of RESOURCES) {
      role_values[resource] = resources[resource] ?? '';
    }
  }
  values.image = header.image ?? '';
  values.engine = header.engine ?? engines.default_engine;
  values.namespace = header.namespace ?? '';
  return values;
}

export function cloneValues(values: IFormValues): IFormValues {
  const roles: Record<string, IRoleValues> = {};
  for (const [name, role] of Object.entries(values.roles)) {
    roles[name] = { ...role };
  }
  return { ...values, roles };
}

/**
 * The `overrides` for `POST /distrun/jobs`. Without `baseline` (a header-less cell) every
 * field the form sets; with it (the values the cell's header gave) only what the user changed.
 * A changed role always carries its replica count, which the server needs to merge it.
 */
export function toOverrides(
  values: IFormValues,
  baseline: IFormValues | null = null
): Partial<IJobSpec> {
  const overrides: Partial<IJobSpec> = {};
  if (!baseline || baseline.framework !== values.framework) {
    overrides.framework = values.framework;
  }
  const roles: Record<string, unknown> = {};
  for (const [name, role] of Object.entries(values.roles)) {
    const before = baseline?.roles[name];
    const changed = RESOURCES.filter(r => !before || before[r] !== role[r]);
    if (before && before.replicas === role.replicas && !changed.length) {
      continue;
    }
    const resources: Record<string, string | number> = {};
    for (const resource of changed) {
      const text = role[resource].trim();
      if (text) {
        resources[SPEC_FIELD[resource] ?? resource] =
          resource === 'gpu' ? gpuValue(text) : text;
      }
    }
    roles[name] = Object.keys(resources).length
      ? { replicas: role.replicas, resources }
      : { replicas: role.replicas };
  }
  if (Object.keys(roles).length) {
    overrides.roles = roles as IJobSpec['roles'];
  }
  for (const key of ['image', 'engine', 'namespace'] as const) {
    const text = values[key].trim();
    if (text && (!baseline || baseline[key] !== values[key])) {
      overrides[key] = text;
    }
  }
  return overrides;
}

/** A GPU field's text as the spec takes it: a number (2, 0.5) or a MIG profile. */
export function gpuValue(text: string): number | string {
  return /^[0-9]+(\.[0-9]+)?$/.test(text) ? Number(text) : text;
}

/** What the engine `name` ('' = the default) offers of GPUs; undefined when it does not say. */
export function gpuOffer(
  engines: IEngines,
  name: string
): IGpuOffer | undefined {
  const wanted = name || engines.default_engine;
  return engines.engines.find(engine => engine.name === wanted)?.options?.gpus;
}

/** An example GPU value the engine can give, for the field's placeholder. */
export function gpuExample(offer: IGpuOffer | undefined): string {
  if (offer?.mig_profiles.length) {
    return offer.mig_profiles[0];
  }
  return offer?.fractions ? '0.5' : '0';
}

/**
 * The form field a server error's `field` names: `framework`, `image`, `engine`,
 * `namespace`, `roles.worker.replicas`, `roles.worker.cpu`, ...; `roles` for the role table as
 * a whole; null when the form has no such field (the error is shown under the button).
 */
export function formField(serverField: string | null): string | null {
  if (!serverField) {
    return null;
  }
  if (['framework', 'image', 'engine', 'namespace'].includes(serverField)) {
    return serverField;
  }
  const parts = serverField.split('.').filter(part => part !== 'resources');
  if (parts[0] !== 'roles') {
    return null;
  }
  if (parts.length === 1) {
    return 'roles';
  }
  const field = parts[2] ?? 'replicas';
  const what = field === 'gpu_memory' ? 'gpuMemory' : field;
  return (RESOURCES as readonly string[]).includes(what) || what === 'replicas'
    ? `roles.${parts[1]}.${what}`
    : `roles.${parts[1]}.replicas`;
}

// ------------------------------------------------------------------------------------------
// Reading a header (the server's rules, restricted to the form's fields)

const SETTING_LINE = /^[ \t]*%([A-Za-z][A-Za-z0-9_.-]*)[ \t]*=(.*)$/;
const MAGIC_LINE = /^[ \t]*%%distrun(?:[ \t](.*))?$/;
const SEGMENT = /^[ \t]*%([A-Za-z][A-Za-z0-9_-]*)[ \t]*=(.*)$/;
const ALIASES: Record<string, string> = {
  cpus: 'cpu',
  gpus: 'gpu',
  gpumemory: 'gpuMemory'
};

function norm(key: string): string {
  const plain = key.toLowerCase().replace(/[_-]/g, '');
  return ALIASES[plain] ?? plain;
}

function asResource(key: string): Resource | null {
  const name = norm(key);
  return (RESOURCES as readonly string[]).includes(name)
    ? (name as Resource)
    : null;
}

/**
 * The form's fields a cell's header sets, or null when the cell has no header. `roles` are
 * the role names the server knows (see `roleNames`).
 */
export function readHeader(
  cell: string,
  roles: readonly string[]
): IHeaderValues | null {
  const header: IHeaderValues = { counts: {}, resources: {} };
  const roleOf = (key: string): string | null =>
    roles.find(role => norm(role) === norm(key)) ?? null;
  let seenHeader = false;
  let first = true;
  for (const raw of cell.split(/\r?\n|\r/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) {
      continue;
    }
    const magic = first ? MAGIC_LINE.exec(raw) : null;
    first = false;
    if (magic) {
      readMagicLine(header, magic[1] ?? '', roleOf);
    } else {
      const setting = SETTING_LINE.exec(raw);
      if (!setting) {
        break;
      }
      readSettingLine(header, setting[1], setting[2], roleOf);
    }
    seenHeader = true;
  }
  return seenHeader ? header : null;
}

function setResource(
  header: IHeaderValues,
  role: string,
  resource: Resource,
  value: string
): void {
  header.resources[role] = {
    ...header.resources[role],
    [resource]: value.trim()
  };
}

function setScalar(header: IHeaderValues, key: string, value: string): void {
  const text = value.trim();
  switch (norm(key)) {
    case 'framework':
      header.framework = text.toLowerCase();
      break;
    case 'image':
      header.image = text;
      break;
    case 'engine':
      header.engine = text;
      break;
    case 'namespace':
      header.namespace = text;
      break;
  }
}

function setCount(header: IHeaderValues, role: string, value: string): void {
  const text = value.trim();
  if (/^[0-9]{1,6}$/.test(text)) {
    header.counts[role] = Number(text);
  }
}

function readSettingLine(
  header: IHeaderValues,
  key: string,
  value: string,
  roleOf: (key: string) => string | null
): void {
  const [rolePart, resourcePart] = key.split('.', 2);
  if (resourcePart !== undefined) {
    const role = roleOf(rolePart);
    const resource = asResource(resourcePart);
    if (role && resource) {
      setResource(header, role, resource, value);
    }
    return;
  }
  const role = roleOf(key);
  const resource = asResource(key);
  if (resource) {
    setResource(header, '', resource, value);
  } else if (role) {
    // ciao's role line: "%worker=2;%cpu=1;%memory=2Gi".
    const [count, ...segments] = value.split(';');
    setCount(header, role, count);
    for (const segment of segments) {
      const match = SEGMENT.exec(segment);
      const res = match ? asResource(match[1]) : null;
      if (match && res) {
        setResource(header, role, res, match[2]);
      }
    }
  } else {
    setScalar(header, key, value);
  }
}

function readMagicLine(
  header: IHeaderValues,
  args: string,
  roleOf: (key: string) => string | null
): void {
  const tokens = shellWords(args);
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i];
    if (!token.startsWith('--')) {
      continue;
    }
    const [flag, inline] = splitOnce(token.slice(2), '=');
    let value = inline;
    if (value === undefined) {
      value = tokens[i + 1] ?? '';
      i++;
    }
    if (norm(flag) === 'roleresources') {
      const [rolePart, assignments = ''] = splitOnce(value, ':');
      const role = roleOf(rolePart.trim());
      for (const assignment of role ? assignments.split(',') : []) {
        const [name, raw] = splitOnce(assignment, '=');
        const resource = asResource(name.trim());
        if (resource && raw !== undefined) {
          setResource(header, role!, resource, raw);
        }
      }
      continue;
    }
    // --workers 2, --worker 2, --ps 1
    const role = roleOf(flag) ?? roleOf(flag.replace(/s$/, ''));
    const resource = asResource(flag);
    if (resource) {
      setResource(header, '', resource, value);
    } else if (role) {
      setCount(header, role, value);
    } else {
      setScalar(header, flag, value);
    }
  }
}

function splitOnce(text: string, sep: string): [string, string | undefined] {
  const at = text.indexOf(sep);
  return at < 0 ? [text, undefined] : [text.slice(0, at), text.slice(at + 1)];
}

/** POSIX-shell words (as Python's shlex.split): quotes and backslashes, no expansion. */
export function shellWords(text: string): string[] {
  const words: string[] = [];
  let word: string | null = null;
  let quote: '"' | "'" | null = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote === "'") {
      if (c === "'") {
        quote = null;
      } else {
        word += c;
      }
    } else if (quote === '"') {
      if (c === '"') {
        quote = null;
      } else if (c === '\\' && '"\\$`'.includes(text[i + 1] ?? '')) {
        word += text[++i];
      } else {
        word += c;
      }
    } else if (c === ' ' || c === '\t') {
      if (word !== null) {
        words.push(word);
        word = null;
      }
    } else if (c === "'" || c === '"') {
      quote = c;
      word = word ?? '';
    } else if (c === '\\' && i + 1 < text.length) {
      word = (word ?? '') + text[++i];
    } else {
      word = (word ?? '') + c;
    }
  }
  if (word !== null) {
    words.push(word);
  }
  return words;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function asString(value: unknown): string {
  return typeof value === 'string'
    ? value
    : typeof value === 'number'
      ? String(value)
      : '';
}
