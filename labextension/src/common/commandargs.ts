/**
 * The argument schemas of the plugins' commands (`describedBy`), shared by every plugin.
 */

/** A command that takes no arguments. */
export const NO_ARGS = { args: { type: 'object', properties: {} } } as const;

/** A command that takes the id of one thing (a job, a sweep) as `id`. */
function idArgs<D extends string>(description: D) {
  return {
    args: {
      type: 'object',
      properties: { id: { type: 'string', description } },
      required: ['id']
    }
  } as const;
}

export const JOB_ID_ARGS = idArgs('The job id');
export const SWEEP_ID_ARGS = idArgs('The sweep id');
