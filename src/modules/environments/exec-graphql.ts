import { builder } from '../../kernel/graphql/builder';
import { type ExecEvent, runCommand } from './exec';
import { listExecs, recordExec, watchExecs } from './service';

export const Exec = builder.prismaObject('Exec', {
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

type ExecEventShape = ExecEvent;

const ExecOutput = builder.objectRef<ExecEventShape>('ExecOutput').implement({
  description: "A piece of a running command's output, or its end (then `exec` is the recorded Exec)",
  fields: (t) => ({
    stream: t.string({
      nullable: true,
      description: 'stdout or stderr (output only)',
      resolve: (e) => (e.kind === 'output' ? e.stream : null),
    }),
    data: t.string({
      nullable: true,
      description: 'The bytes, base64 (output only)',
      resolve: (e) => (e.kind === 'output' ? e.data.toString('base64') : null),
    }),
    exitCode: t.int({
      nullable: true,
      description: "The command's exit code (the end only)",
      resolve: (e) => (e.kind === 'exit' ? e.exec.exitCode : null),
    }),
    exec: t.field({
      type: Exec,
      nullable: true,
      description: 'The recorded Exec (the end only)',
      resolve: (e) => (e.kind === 'exit' ? e.exec : null),
    }),
  }),
});

/** Output kept waiting on a subscriber's connection before the next event is taken (then the command blocks: EXEC_WINDOW). */
const PACE_BYTES = 256 * 1024;
const PACE_LOOK_MS = 10;

/**
 * The events of `source`, each taken only once the subscriber's connection has sent what it held
 * beyond PACE_BYTES: a subscriber that reads slowly slows the command down, as over REST.
 */
function paced<T>(source: AsyncIterable<T>, unsent: (() => number) | undefined): AsyncIterable<T> {
  if (!unsent) return source;
  const it = source[Symbol.asyncIterator]();
  return {
    [Symbol.asyncIterator]: () => ({
      async next() {
        while (unsent() > PACE_BYTES) await new Promise((resolve) => setTimeout(resolve, PACE_LOOK_MS));
        return it.next();
      },
      return: (value?: unknown) => it.return?.(value) ?? Promise.resolve({ done: true as const, value: undefined }),
    }),
  };
}

builder.subscriptionField('runCommand', (t) =>
  t.field({
    type: ExecOutput,
    description:
      "Runs a command on the environment's node (members; ready environments) with the environment root as working directory: " +
      'its output as it comes, then its end with the Exec the server recorded. Ending the subscription stops the command.',
    args: {
      environment: t.arg.string({ required: true, description: 'Id or name' }),
      command: t.arg.stringList({ required: true, description: 'The program and its arguments' }),
    },
    subscribe: async (_root, { environment, command }, ctx) =>
      paced(await runCommand(ctx.deps, ctx.actor, environment, command), ctx.unsent),
    resolve: (event) => event,
  }),
);
