/** What the UI specs share. */

import { APIRequestContext } from '@playwright/test';

/** Whether the server runs the distrun extension (its tests skip, saying why, when not). */
export async function serverExtensionPresent(
  request: APIRequestContext
): Promise<boolean> {
  return (await request.get('distrun/engines')).ok();
}
