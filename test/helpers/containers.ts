// Suites that run environments as containers: the engine the global setup found
// (test/helpers/engine-setup.ts), a catalog of templates of the offline test images, waits, and
// addresses of this machine's own for probes that must never leave it.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { type AddressInfo, createServer } from 'node:net';
import { promisify } from 'node:util';
import { describe, inject } from 'vitest';
import { type Backend, describeBackends } from './server';

export { writeCatalog } from './catalog';

import { podman } from './engine-setup';

export { TEST_ECHO_IMAGE, TEST_HOG_IMAGE, TEST_IMAGE, TEST_LINKED_IMAGE, TEST_USER_IMAGE } from './engine-setup';

/** The engine for DOCKER_HOST / --engine ('' when there is none). */
export const engine = (): string => inject('engine');

/** Runs the suite when there is an engine (tagged `containers`); otherwise skips it with one line saying why. */
export function describeContainers(name: string, suite: () => void): void {
  if (inject('engine')) describe(name, { tags: ['containers'] }, suite);
  else describe.skip(`${name} (${inject('engineMissing')})`, suite);
}

/** describeBackends (test/helpers/server.ts) for suites that need the engine: skipped, saying why, without one. */
export function describeContainerBackends(name: string, suite: (backend: Backend) => void): void {
  if (inject('engine')) describeBackends(name, suite, { tags: ['containers'] });
  else describe.skip(`${name} (${inject('engineMissing')})`, () => suite('pglite'));
}

/** The ids of the engine's containers of one environment (none once it is removed). */
export async function containersOf(environmentId: string): Promise<string[]> {
  return (await podman('ps', '-aq', '--filter', `label=berth.environment=${environmentId}`)).split('\n').filter(Boolean);
}

/** The engine's containers (all, running or not) a server or node labels as its own (`berth.owner`), by name. */
export async function ownedBy(owner: string): Promise<string[]> {
  return (await podman('ps', '-a', '--filter', `label=berth.owner=${owner}`, '--format', '{{.Names}}')).split('\n').filter(Boolean);
}

/** Removes what a suite's server left in the engine under its owner label (none before it knew it). */
export async function removeOwned(owner: string): Promise<void> {
  const left = owner ? await ownedBy(owner) : [];
  if (left.length) await podman('rm', '-f', ...left);
}

const run = promisify(execFile);

/**
 * Gives this machine `address` (/32) on a veth pair of the test's own, made in the host's namespace,
 * and checks that the kernel routes it locally, so a probe of it never leaves the machine.
 * `missing` says why when the test cannot make links (not root, no `ip`). remove() takes the pair
 * away again.
 */
export async function ownAddress(address: string): Promise<{ remove: () => Promise<void> } | { missing: string }> {
  const link = `bt-${randomBytes(4).toString('hex')}`;
  try {
    await run('ip', ['link', 'add', link, 'type', 'veth', 'peer', 'name', `${link}p`]);
  } catch (error) {
    return {
      missing: `cannot make a veth link for ${address}, which this test needs (root and iproute2): ${(error as Error).message.trim()}`,
    };
  }
  const remove = async () => {
    await run('ip', ['link', 'del', link]).catch(() => undefined);
  };
  try {
    await run('ip', ['addr', 'add', `${address}/32`, 'dev', link]);
    await run('ip', ['link', 'set', link, 'up']);
    await run('ip', ['link', 'set', `${link}p`, 'up']);
    const route = (await run('ip', ['route', 'get', address])).stdout;
    if (!route.startsWith('local ')) throw new Error(`${address} is not routed locally: ${route.trim()}`);
  } catch (error) {
    await remove();
    throw error;
  }
  return { remove };
}

/** A TCP server on `address` (one of ownAddress's) that counts the connections it gets and ends each. */
export async function countingListener(address: string): Promise<{ port: number; connections: () => number; close: () => void }> {
  let connections = 0;
  const server = createServer((socket) => {
    connections++;
    socket.destroy();
  });
  server.listen(0, address);
  await once(server, 'listening');
  return { port: (server.address() as AddressInfo).port, connections: () => connections, close: () => server.close() };
}
