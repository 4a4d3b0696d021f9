import { builder } from '../../kernel/graphql/builder';
import { listQuotas, type QuotaView, setQuota } from './service';

const Quota = builder.objectRef<QuotaView>('Quota').implement({
  fields: (t) => ({
    template: t.exposeString('template', { description: 'A template name, or * for all templates' }),
    maxLeases: t.exposeInt('maxLeases'),
    running: t.exposeInt('running', { description: 'Live leases now' }),
    idle: t.exposeString('idle', { description: 'Default and cap of the idle time-out' }),
    hard: t.exposeString('hard', { description: 'Default and cap of the hard time-out' }),
    warnings: t.exposeStringList('warnings', {
      description:
        'Why maxLeases cannot be reached: it is above what the pool can run of the organization at once (a Berth extension); empty when it can',
    }),
  }),
});

const QuotaInput = builder.inputType('QuotaInput', {
  fields: (t) => ({
    maxLeases: t.int({ required: true }),
    idle: t.string(),
    hard: t.string(),
  }),
});

builder.queryField('quotas', (t) => t.field({ type: [Quota], resolve: (_r, _a, ctx) => listQuotas(ctx.deps, ctx.actor) }));

builder.mutationField('setQuota', (t) =>
  t.field({
    type: Quota,
    args: { template: t.arg.string({ required: true }), input: t.arg({ type: QuotaInput, required: true }) },
    resolve: (_root, { template, input }, ctx) => setQuota(ctx.deps, ctx.actor, template, input),
  }),
);
