/**
 * How jobs' specs differ, for comparing runs: every field as a dotted path ("roles.worker.
 * replicas", "env.LR") with each job's value, only the fields where they differ; the code as
 * a line diff (jsdiff) of each job against the first.
 */

import { diffLines } from 'diff';

import { IJobSpec } from '../common/model';

/** Fields compared as their own rows; `code` is diffed, shipped files by name and size. */
const SKIPPED = new Set(['code', 'files']);

export interface IFieldRow {
  field: string;
  /** One per job: the value as text, or null where the job has no such field. */
  values: (string | null)[];
}

/** Every leaf of `value` as path -> text; arrays and scalars are leaves. */
export function flatten(
  value: unknown,
  prefix = '',
  into = new Map<string, string>()
): Map<string, string> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    for (const [key, child] of Object.entries(
      value as Record<string, unknown>
    )) {
      flatten(child, prefix ? `${prefix}.${key}` : key, into);
    }
  } else if (prefix) {
    into.set(prefix, typeof value === 'string' ? value : JSON.stringify(value));
  }
  return into;
}

/** The fields whose values are not the same in every spec, in a stable order. */
export function differingFields(specs: readonly IJobSpec[]): IFieldRow[] {
  const flat = specs.map(spec => {
    const fields = flatten(
      Object.fromEntries(
        Object.entries(spec).filter(([key]) => !SKIPPED.has(key))
      )
    );
    for (const [name, content] of Object.entries(
      (spec.files ?? {}) as Record<string, string>
    )) {
      fields.set(
        `files.${name}`,
        `${Math.floor((content.length * 3) / 4)} bytes`
      );
    }
    return fields;
  });
  const names = [...new Set(flat.flatMap(fields => [...fields.keys()]))].sort();
  return names
    .map(field => ({
      field,
      values: flat.map(fields => fields.get(field) ?? null)
    }))
    .filter(row => new Set(row.values).size > 1);
}

export interface ICodeChange {
  kind: 'same' | 'added' | 'removed';
  text: string;
}

/** `other`'s code against `first`'s, line by line; empty when they are the same. */
export function codeDiff(first: IJobSpec, other: IJobSpec): ICodeChange[] {
  const before = String(first.code ?? '');
  const after = String(other.code ?? '');
  if (before === after) {
    return [];
  }
  return diffLines(before, after).map(part => ({
    kind: part.added ? 'added' : part.removed ? 'removed' : 'same',
    text: part.value
  }));
}
