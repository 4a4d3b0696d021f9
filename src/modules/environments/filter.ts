// The environment filter of GET /v1/environments, the `environments` query and the `environments`
// subscription. Each condition is written once with both of its forms side by side: the database
// `where` that lists, and the predicate on one environment that filters a live feed, so a filter
// value cannot mean one thing in a query and another in a subscription.
import type { Actor, Deps } from '../../app/context';
import type { Environment, Prisma as P } from '../../generated/prisma/client';
import { requireMember } from '../../kernel/access';
import { STATES as EACH_STATE, ENDED_STATES, LIVE_STATES } from '../../kernel/environment-states';
import { ValidationError } from '../../kernel/errors';
import { labelsOf } from '../../kernel/json-columns';
import { parseLabelPairs } from '../../kernel/labels';
import { findSandboxRow } from '../sandboxes';

export interface EnvironmentFilterInput {
  /** A state, or `live` / `ended`. */
  state?: string | null;
  template?: string | null;
  /** `key=value` pairs; all must match. */
  label?: readonly string[] | null;
  /** A sandbox id (`sb_…`, removed ones too) or the name of a sandbox not removed. */
  sandbox?: string | null;
  project?: string | null;
}

export interface EnvironmentFilter {
  /** The condition as a database query (lists). */
  where: P.EnvironmentWhereInput;
  /** The same condition on one environment (live feeds). */
  matches(env: Environment): boolean;
  /** Equal for two filters that match the same environments (the organization included). */
  key: string;
}

interface Condition {
  where: P.EnvironmentWhereInput;
  test(env: Environment): boolean;
  key: string;
}

const STATES: Record<string, readonly string[]> = {
  live: LIVE_STATES,
  ended: ENDED_STATES,
  ...Object.fromEntries(EACH_STATE.map((state) => [state, [state]])),
};

const NOTHING: Condition = { where: { id: { in: [] } }, test: () => false, key: 'nothing' };

/**
 * Checks a filter and compiles it for the caller's organization. A sandbox is resolved once, now:
 * an unknown one (or another organization's) matches nothing, like an unknown template or project.
 */
export async function environmentFilter(deps: Deps, actor: Actor, input: EnvironmentFilterInput): Promise<EnvironmentFilter> {
  requireMember(actor);
  const { orgId } = actor;
  const conditions: Condition[] = [{ where: { orgId }, test: (env) => env.orgId === orgId, key: `org=${orgId}` }];
  if (input.state) {
    const states = STATES[input.state];
    if (!states) throw new ValidationError(`state must be one of ${Object.keys(STATES).join(', ')}`, 'state');
    conditions.push({ where: { state: { in: [...states] } }, test: (env) => states.includes(env.state), key: `state=${states.join('|')}` });
  }
  const { template, project } = input;
  if (template) conditions.push({ where: { template }, test: (env) => env.template === template, key: `template=${template}` });
  if (project) conditions.push({ where: { project }, test: (env) => env.project === project, key: `project=${project}` });
  for (const [key, value] of Object.entries(parseLabelPairs(input.label ?? [], 'label'))) {
    conditions.push({
      where: { labels: { path: [key], equals: value } },
      test: (env) => labelsOf(env)[key] === value,
      key: `label=${JSON.stringify([key, value])}`,
    });
  }
  if (input.sandbox) {
    const sandboxId = (await findSandboxRow(deps.prisma, orgId, input.sandbox))?.id;
    conditions.push(
      sandboxId ? { where: { sandboxId }, test: (env) => env.sandboxId === sandboxId, key: `sandbox=${sandboxId}` } : NOTHING,
    );
  }
  return {
    where: { AND: conditions.map((c) => c.where) },
    matches: (env) => conditions.every((c) => c.test(env)),
    key: JSON.stringify(conditions.map((c) => c.key).sort()),
  };
}
