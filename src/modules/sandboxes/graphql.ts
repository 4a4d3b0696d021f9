import { builder } from '../../kernel/graphql/builder';
import type { SandboxConfig } from '../../protocol/sandbox-config';
import {
  getSandbox,
  joinSandbox,
  listSandboxes,
  readSandboxConfig,
  registerSandbox,
  removeSandbox,
  type SandboxEntry,
  type SandboxRecord,
  sandboxHeartbeat,
  watchSandboxConfig,
} from './service';

export const Sandbox = builder.objectRef<SandboxRecord>('Sandbox').implement({
  description: 'A machine of the organization that environments are wired to',
  fields: (t) => ({
    id: t.exposeID('id'),
    org: t.exposeString('org', { description: "The organization's name" }),
    name: t.exposeString('name', { description: 'Its name on the private network (a DNS label)' }),
    createdBy: t.exposeString('createdBy'),
    created: t.expose('created', { type: 'DateTime' }),
    lastSeen: t.expose('lastSeen', {
      type: 'DateTime',
      nullable: true,
      description: 'When its agent last joined, read its config or sent a heartbeat',
    }),
    removed: t.expose('removed', { type: 'DateTime', nullable: true }),
    removedBy: t.exposeString('removedBy', { nullable: true, description: "Who removed it: a person's email or an API key's name" }),
  }),
});

const SandboxEntryRef = builder.objectRef<SandboxEntry>('SandboxEntry').implement({
  description: 'A sandbox and how many live environments are wired to it',
  fields: (t) => ({
    sandbox: t.field({ type: Sandbox, resolve: (e) => e.sandbox }),
    environments: t.exposeInt('environments', { description: 'Live (pending, starting, ready, stopping) environments wired to it' }),
  }),
});

const RegisteredSandbox = builder.objectRef<{ sandbox: SandboxRecord; config: SandboxConfig; key: string }>('RegisteredSandbox').implement({
  fields: (t) => ({
    sandbox: t.field({ type: Sandbox, resolve: (r) => r.sandbox }),
    config: t.field({
      type: 'JSONObject',
      description: 'The sandbox configuration (docs/sandboxes.md, "Sandbox configuration")',
      resolve: (r) => r.config,
    }),
    key: t.exposeString('key', { description: 'Network join key: single use, valid one hour; only its hash is kept' }),
  }),
});

const JoinedSandbox = builder.objectRef<{ sandbox: SandboxRecord; config: SandboxConfig; credential: string }>('JoinedSandbox').implement({
  fields: (t) => ({
    sandbox: t.field({ type: Sandbox, resolve: (r) => r.sandbox }),
    config: t.field({ type: 'JSONObject', resolve: (r) => r.config }),
    credential: t.exposeString('credential', {
      description: "The sandbox's own bearer credential (bsc_…): reads and watches its config, sends heartbeats. Shown once.",
    }),
  }),
});

const RegisterSandboxInput = builder.inputType('RegisterSandboxInput', {
  fields: (t) => ({
    name: t.string({ required: false, description: 'Name on the private network (a DNS label); empty: from hostname, else generated' }),
    hostname: t.string({
      required: false,
      description: "The machine's hostname, sent by the client; its first label names the sandbox when name is empty",
    }),
  }),
});

builder.queryFields((t) => ({
  sandboxes: t.field({
    type: [SandboxEntryRef],
    description: "The organization's sandboxes with their live environment counts, oldest first",
    args: { removed: t.arg.boolean({ required: false, description: 'Include removed sandboxes' }) },
    resolve: (_root, args, ctx) => listSandboxes(ctx.deps, ctx.actor, { removed: args.removed }),
  }),
  sandbox: t.field({
    type: SandboxEntryRef,
    description: 'One sandbox by id, or by the name of one not removed',
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => getSandbox(ctx.deps, ctx.actor, String(id)),
  }),
  sandboxConfig: t.field({
    type: 'JSONObject',
    description: "The sandbox's configuration (members, and the sandbox's own credential)",
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => readSandboxConfig(ctx.deps, ctx.actor, String(id)),
  }),
}));

builder.mutationFields((t) => ({
  registerSandbox: t.field({
    type: RegisteredSandbox,
    args: { input: t.arg({ type: RegisterSandboxInput, required: false }) },
    resolve: (_root, { input }, ctx) => registerSandbox(ctx.deps, ctx.actor, input ?? {}),
  }),
  joinSandbox: t.field({
    type: JoinedSandbox,
    description:
      "Spends a join key of a sandbox of the caller's organization. Agents without a credential use POST /v1/sandboxes/join instead.",
    args: { key: t.arg.string({ required: true }) },
    // Failures count against the caller's address, as every failed credential does.
    resolve: (_root, { key }, ctx) => joinSandbox(ctx.deps, { key }, { address: ctx.clientAddress, actor: ctx.actor }),
  }),
  removeSandbox: t.field({
    type: Sandbox,
    description: 'Sets removed, revokes its credential, refuses new wiring (idempotent)',
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => removeSandbox(ctx.deps, ctx.actor, String(id)),
  }),
  sandboxHeartbeat: t.field({
    type: Sandbox,
    description: "The sandbox's own agent reports that it is alive (sets lastSeen)",
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => sandboxHeartbeat(ctx.deps, ctx.actor, String(id)),
  }),
}));

builder.subscriptionField('sandboxConfig', (t) =>
  t.field({
    type: 'JSONObject',
    description: 'The whole configuration now, then again on every change; ends after the sandbox is removed',
    args: { id: t.arg.id({ required: true }) },
    subscribe: (_root, { id }, ctx) => watchSandboxConfig(ctx.deps, ctx.actor, String(id)),
    resolve: (config: SandboxConfig) => config,
  }),
);
