import { builder } from '../../kernel/graphql/builder';
import { Exec } from './exec-graphql';
import { EnvironmentRef } from './graphql';
import { endSession, sessionsOf } from './sessions';

const SessionRef = builder.prismaObject('Session', {
  description: 'An interactive command that outlives its connection: attach to it again after a drop (docs/agents.md, "Sessions")',
  fields: (t) => ({
    id: t.exposeString('id'),
    command: t.exposeString('command'),
    tty: t.exposeBoolean('tty', { description: 'It runs on a terminal' }),
    created: t.expose('created', { type: 'DateTime' }),
    attached: t.exposeInt('attached', { description: 'Connections attached now (0: it runs on for SESSION_GRACE, then is killed)' }),
    lastActivity: t.expose('lastActivity', { type: 'DateTime', description: 'The last input, attach or detach' }),
  }),
});

builder.objectFields(EnvironmentRef, (t) => ({
  sessions: t.field({
    type: [SessionRef],
    description: "Its open sessions, oldest first (its owner, admins and API keys: the exec's rules)",
    resolve: (env, _args, ctx) => sessionsOf(ctx.deps, ctx.actor, env),
  }),
}));

builder.mutationField('endSession', (t) =>
  t.field({
    type: Exec,
    description: "Kills a session's command (its whole process group) and answers its recorded Exec (exit code 137)",
    args: { environment: t.arg.string({ required: true }), session: t.arg.string({ required: true }) },
    resolve: (_root, { environment, session }, ctx) => endSession(ctx.deps, ctx.actor, environment, session),
  }),
);
