// What a node needs to know of an environment to hold it (src/node/runtime.ts): its shares, as the
// template places them, and what it was leased with (image, limits, network, workdir, variables,
// the users and the lifecycle commands).
import type { Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import type { EnvironmentSpec } from '../../node/runtime';
import type { TemplateSpec } from '../templates';
import { findTemplate } from '../templates';

export async function environmentSpec(deps: Deps, env: Environment): Promise<EnvironmentSpec> {
  const template = await findTemplate(deps.prisma, env.orgId, env.template).catch(() => undefined);
  return {
    id: env.id,
    name: env.name,
    orgId: env.orgId,
    template: env.template,
    shares: (template?.shares ?? []).map((s) => ({ name: s.name, envPath: s.envPath })),
    image: env.image,
    resources: resourcesOf(env),
    network: env.network === 'egress' ? 'egress' : 'none',
    workdir: env.workdir,
    env: (env.envVars ?? {}) as Record<string, string>,
    ...(env.user ? { user: env.user } : {}),
    ...(env.containerUser ? { containerUser: env.containerUser } : {}),
    // As its template's check left it (src/modules/templates/catalog.ts), when it was leased.
    lifecycle: (Array.isArray(env.lifecycle) ? env.lifecycle : []) as unknown as EnvironmentSpec['lifecycle'],
  };
}

/** The limits it was leased with. */
export function resourcesOf(env: Environment): EnvironmentSpec['resources'] {
  return (env.resources ?? {}) as EnvironmentSpec['resources'];
}

/** A warm container's spec: the template's, with the template's name as its hostname (a lease's own name comes too late). */
export function warmEnvironmentSpec(template: TemplateSpec, orgId: string): Omit<EnvironmentSpec, 'id'> {
  return {
    name: template.name,
    orgId,
    template: template.name,
    shares: template.shares.map((s) => ({ name: s.name, envPath: s.envPath })),
    image: template.image ?? null,
    resources: template.resources,
    network: template.network,
    workdir: template.workdir,
    env: template.env,
    ...(template.user ? { user: template.user } : {}),
    ...(template.containerUser ? { containerUser: template.containerUser } : {}),
    // Only the create phases run in a warm container; postStartCommand comes with the lease that claims it.
    lifecycle: template.lifecycle.filter((c) => c.phase !== 'postStartCommand'),
  };
}
