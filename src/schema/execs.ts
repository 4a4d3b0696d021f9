import { listExecs, recordExec, watchExecs } from '../services/environments';
import { builder } from './builder';

const Exec = builder.prismaObject('Exec', {
  description: 'A command run in an environment',
  fields: (t) => ({
    id: t.exposeInt('id'),
    lease: t.exposeString('environmentId', { description: 'The environment id' }),
    time: t.expose('time', { type: 'DateTime' }),
    actor: t.exposeString('actor'),
    command: t.exposeString('command'),
    exitCode: t.exposeInt('exitCode'),
    durationMs: t.exposeInt('durationMs'),
  }),
});

const ExecInput = builder.inputType('ExecInput', {
  fields: (t) => ({
    command: t.string({ required: true }),
    exitCode: t.int({ required: true }),
    durationMs: t.int({ required: true }),
  }),
});

builder.queryField('execs', (t) =>
  t.field({
    type: [Exec],
    description: "An environment's commands, newest first",
    args: { environment: t.arg.string({ required: true }) },
    resolve: (_root, { environment }, ctx) => listExecs(ctx.deps, ctx.actor, environment),
  }),
);

builder.mutationField('recordExec', (t) =>
  t.field({
    type: Exec,
    args: { environment: t.arg.string({ required: true }), input: t.arg({ type: ExecInput, required: true }) },
    resolve: (_root, { environment, input }, ctx) => recordExec(ctx.deps, ctx.actor, environment, input),
  }),
);

builder.subscriptionField('execs', (t) =>
  t.field({
    type: Exec,
    description: 'Every command recorded for the environment from now on, as it is recorded',
    args: {
      environment: t.arg.string({ required: true }),
      after: t.arg.int({ description: 'The newest id the caller has: the commands recorded since come first' }),
    },
    subscribe: (_root, { environment, after }, ctx) => watchExecs(ctx.deps, ctx.actor, environment, after),
    resolve: (exec) => exec,
  }),
);
