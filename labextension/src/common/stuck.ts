/**
 * Why a pending job is waiting, in words. The engines report Kubernetes' own reasons
 * ("worker-1: Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.",
 * "ErrImagePull: ...", "waiting for gang resources: ..."); this puts a plain sentence first and
 * keeps the engine's text after it, so nothing the cluster said is lost.
 */

import { ITrans } from './trans';

interface IKnownReason {
  pattern: RegExp;
  words: (trans: ITrans, match: RegExpExecArray) => string;
}

const KNOWN: IKnownReason[] = [
  {
    // The Kubernetes engines add which GPU resource no node has enough of.
    pattern: /\[short of GPU resource ([^:\]]+):/,
    words: (trans, match) =>
      trans.__('no node has enough free GPU resource %1', match[1])
  },
  {
    pattern:
      /\b(ImagePullBackOff|ErrImagePull|InvalidImageName|ErrImageNeverPull)\b/,
    words: trans => trans.__('cannot pull the image')
  },
  {
    pattern: /\b(Unschedulable|FailedScheduling)\b/,
    words: trans =>
      trans.__('no node can take it yet (not enough free CPU, memory or GPUs)')
  },
  {
    pattern: /\bgang\b|\bPodGroup\b|\bminAvailable\b/i,
    words: trans =>
      trans.__(
        'waiting until every replica can start at once (gang scheduling)'
      )
  },
  {
    pattern: /\b(CrashLoopBackOff)\b/,
    words: trans => trans.__('a replica keeps crashing on start')
  },
  {
    pattern: /\b(CreateContainerConfigError|CreateContainerError)\b/,
    words: trans => trans.__('a container cannot be created')
  },
  {
    pattern: /\b(FailedMount|FailedAttachVolume)\b/,
    words: trans => trans.__('a volume cannot be mounted')
  },
  {
    pattern: /\b(ContainerCreating|PodInitializing)\b/,
    words: trans => trans.__('starting the containers')
  },
  {
    pattern: /\bExceededQuota\b|\bexceeded quota\b/i,
    words: trans => trans.__("the namespace's resource quota is used up")
  }
];

/** The plain sentence for an engine's pending reason, or null when none is known. */
export function stuckWords(reason: string, trans: ITrans): string | null {
  for (const entry of KNOWN) {
    const match = entry.pattern.exec(reason);
    if (match) {
      return entry.words(trans, match);
    }
  }
  return null;
}

/** `waiting: cannot pull the image (worker-0: ErrImagePull: ...)`, or the reason as it is. */
export function describeWaiting(reason: string, trans: ITrans): string {
  const words = stuckWords(reason, trans);
  return words ? trans.__('%1 (%2)', words, reason) : reason;
}
