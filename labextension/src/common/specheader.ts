/**
 * A submitted job's spec written back as a cell (a magic header, then the code), for
 * "Edit and run again". The header uses the keys of the server's parser (distrun.core.header) and
 * leaves out values equal to the defaults, so it reads like what a person would write.
 * What a header cannot carry travels beside the cell as `overrides`: the shipped files (their
 * content came from the notebook's directory at the first run) and env values that a header
 * line would change (leading or trailing spaces, line breaks).
 */

import { IJobSpec } from './model';

/** Scalar spec fields in the server's header order, with their header key and default. */
const SCALARS: ReadonlyArray<[field: string, key: string, fallback: unknown]> =
  [
    ['framework', 'framework', undefined],
    ['name', 'name', 'job'],
    ['engine', 'engine', null],
    ['namespace', 'namespace', null],
    ['image', 'image', null],
    ['roles', '', undefined],
    ['restart_policy', 'restartPolicy', 'Never'],
    ['backoff_limit', 'backoffLimit', 0],
    ['restart', 'restart', null],
    ['max_restarts', 'maxRestarts', null],
    ['elastic', 'elastic', null],
    ['checkpoint_volume', 'checkpointVolume', null],
    ['resume_from', 'resumeFrom', null],
    ['active_deadline_seconds', 'deadline', null],
    ['startup_timeout_seconds', 'startupTimeout', null],
    ['clean_pod_policy', 'cleanPolicy', 'Running'],
    ['ttl_seconds_after_finished', 'ttl', null],
    ['queue', 'queue', null],
    ['priority_class', 'priorityClass', null],
    ['gpu_fallback', 'gpuFallback', null]
  ];

const RESOURCES = ['cpu', 'memory', 'gpu'] as const;

/** Roles in the order the frameworks list them (distrun.core.frameworks), leaders first. */
const ROLE_ORDER = ['master', 'chief', 'launcher', 'ps', 'worker', 'evaluator'];

function roleRank(role: string): number {
  const rank = ROLE_ORDER.indexOf(role);
  return rank < 0 ? ROLE_ORDER.length : rank;
}

export interface IEditableCell {
  cell: string;
  overrides: Partial<IJobSpec>;
}

/** The cell (header and code) and overrides that submit `spec` again. */
export function cellFromSpec(spec: IJobSpec): IEditableCell {
  const lines: string[] = [];
  const overrides: Record<string, unknown> = {};
  for (const [field, key, fallback] of SCALARS) {
    if (field === 'roles') {
      lines.push(...roleLines(spec.roles));
      continue;
    }
    const value = spec[field];
    if (value === undefined || value === null || value === fallback) {
      continue;
    }
    const text =
      field === 'clean_pod_policy'
        ? String(value).toLowerCase()
        : String(value);
    lines.push(`%${key}=${text}`);
  }
  const env = (spec.env ?? {}) as Record<string, string>;
  const unwritable: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value !== value.trim() || /[\r\n\0]/.test(value)) {
      unwritable[name] = value;
    } else {
      lines.push(`%env=${name}=${value}`);
    }
  }
  if (Object.keys(unwritable).length) {
    overrides.env = unwritable;
  }
  const files = (spec.files ?? {}) as Record<string, string>;
  if (Object.keys(files).length) {
    overrides.files = files;
  }
  const code = String(spec.code ?? '').replace(/^(?:[ \t]*\r?\n)+/, '');
  return {
    cell: lines.map(line => `${line}\n`).join('') + code,
    overrides: overrides as Partial<IJobSpec>
  };
}

function roleLines(roles: IJobSpec['roles']): string[] {
  const ordered = Object.entries(roles ?? {}).sort(
    ([a], [b]) => roleRank(a) - roleRank(b)
  );
  return ordered.map(([role, spec]) => {
    const segments = [`%${role}=${spec.replicas}`];
    for (const resource of RESOURCES) {
      const value = spec.resources?.[resource];
      if (value !== undefined && value !== null && value !== 0) {
        segments.push(`%${resource}=${value}`);
      }
    }
    return segments.join(';');
  });
}
