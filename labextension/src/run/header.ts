/**
 * Whether a cell starts with a distrun header, and the overrides a header-less cell runs with.
 *
 * The server's parser (distrun.core.header) is the authority on the header; this only decides
 * whether to send `overrides`, which would win over a header. The rule mirrors the parser's:
 * the first line that is neither blank nor a `#` comment is a header line when it is
 * `%%distrun ...` or a ciao-style `%key=value` (an identifier, then `=`), so IPython line
 * magics such as `%env X=1` or `%time f()` are not headers.
 */

import { IJobSpec } from '../common/model';

const CELL_MAGIC = /^%%distrun(\s|$)/;
const CIAO_LINE = /^%\s*[A-Za-z][\w.]*\s*=/;

export function hasMagicHeader(cell: string): boolean {
  for (const raw of cell.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) {
      continue;
    }
    return CELL_MAGIC.test(line) || CIAO_LINE.test(line);
  }
  return false;
}

const SWEEP_CIAO_LINE = /^%\s*sweep\.[A-Za-z_]\w*\s*=/;
const SWEEP_FLAG = /\s--sweep(\s|=)/;

/** Whether the cell's header declares a parameter sweep (`%sweep.x=...`, `--sweep x=...`). */
export function hasSweepHeader(cell: string): boolean {
  for (const raw of cell.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) {
      continue;
    }
    if (CELL_MAGIC.test(line)) {
      return SWEEP_FLAG.test(line);
    }
    if (SWEEP_CIAO_LINE.test(line)) {
      return true;
    }
    if (!CIAO_LINE.test(line)) {
      return false;
    }
  }
  return false;
}

/** What a header-less cell runs as: a framework and optional replica counts per role. */
export interface IRunChoice {
  framework: string;
  replicas: Record<string, number>;
}

export function choiceToOverrides(choice: IRunChoice): Partial<IJobSpec> {
  const roles = Object.entries(choice.replicas)
    .filter(([, count]) => Number.isInteger(count) && count >= 0)
    .map(([role, count]) => [role, { replicas: count }]);
  return roles.length
    ? { framework: choice.framework, roles: Object.fromEntries(roles) }
    : { framework: choice.framework };
}

/** The choice a submitted job embodies, to reuse for the next header-less cell. */
export function choiceFromSpec(spec: IJobSpec): IRunChoice {
  const replicas: Record<string, number> = {};
  for (const [role, roleSpec] of Object.entries(spec.roles ?? {})) {
    replicas[role] = roleSpec.replicas;
  }
  return { framework: spec.framework, replicas };
}
