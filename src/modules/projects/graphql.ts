import { builder } from '../../kernel/graphql/builder';
import { type ShredResult, shredProject } from './shredding';

const ShredResultRef = builder.objectRef<ShredResult>('ShredResult').implement({
  fields: (t) => ({
    project: t.exposeString('project'),
    shredded: t.exposeBoolean('shredded'),
    at: t.expose('at', {
      type: 'DateTime',
      description: 'When the keys were destroyed (the latest shred, when repeated with nothing new to shred)',
    }),
  }),
});

builder.mutationField('shredProject', (t) =>
  t.field({
    type: ShredResultRef,
    description: "Destroys the project's keys, then its snapshots and artifacts (admins only)",
    args: { project: t.arg.string({ required: true }) },
    resolve: (_root, { project }, ctx) => shredProject(ctx.deps, ctx.actor, project),
  }),
);
