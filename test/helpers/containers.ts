// Suites that run environments as containers: the engine the global setup found
// (test/helpers/engine-setup.ts), a catalog of templates of the offline test images, and waits.
import { describe, inject } from 'vitest';
import { type Backend, describeBackends } from './server';

export { writeCatalog } from './catalog';

import { podman } from './engine-setup';

export { TEST_ECHO_IMAGE, TEST_HOG_IMAGE, TEST_IMAGE, TEST_USER_IMAGE } from './engine-setup';

/** The engine for DOCKER_HOST / --engine ('' when there is none). */
export const engine = (): string => inject('engine');

/** Runs the suite when there is an engine; otherwise skips it with one line saying why. */
export function describeContainers(name: string, suite: () => void): void {
  if (inject('engine')) describe(name, suite);
  else describe.skip(`${name} (${inject('engineMissing')})`, suite);
}

/** describeBackends (test/helpers/server.ts) for suites that need the engine: skipped, saying why, without one. */
export function describeContainerBackends(name: string, suite: (backend: Backend) => void): void {
  if (inject('engine')) describeBackends(name, suite);
  else describe.skip(`${name} (${inject('engineMissing')})`, () => suite('pglite'));
}

/** The ids of the engine's containers of one environment (none once it is removed). */
export async function containersOf(environmentId: string): Promise<string[]> {
  return (await podman('ps', '-aq', '--filter', `label=berth.environment=${environmentId}`)).split('\n').filter(Boolean);
}
