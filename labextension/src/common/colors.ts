/**
 * Which colour each replica's prefix gets. Colours are indices into a palette of
 * JupyterLab CSS variables (see style/base.css), so themes decide the actual colours.
 */

export const PALETTE_SIZE = 8;

/**
 * The palette index of `replica`: its position among the job's replicas when known, so
 * replicas of one job never share a colour until there are more replicas than colours;
 * otherwise a stable hash of its name, so the same name always gets the same colour.
 */
export function replicaColorIndex(
  replica: string,
  knownReplicas: readonly string[] = [],
  paletteSize: number = PALETTE_SIZE
): number {
  const position = knownReplicas.indexOf(replica);
  if (position >= 0) {
    return position % paletteSize;
  }
  return stringHash(replica) % paletteSize;
}

/** The 32-bit FNV-1a hash of a string, as an unsigned integer. */
export function stringHash(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

/** The `worker-0 | ` prefix, padded so that the bars of every replica line up. */
export function replicaPrefix(replica: string, width: number): string {
  return `${replica.padEnd(width)} | `;
}
