import { builder } from '../../kernel/graphql/builder';
import { connectionOf } from '../../kernel/graphql/paging';
import { labelsOf, type Segment, segmentsOf } from '../../kernel/json-columns';
import { createArtifactLink, deleteArtifact, getArtifact, type ArtifactLink as Link, listArtifacts, revokeArtifactLinks } from './service';

// Uploads are REST only (POST /v1/artifacts takes the raw bytes); GraphQL reads, links and deletes.

const ArtifactSegment = builder.objectRef<Segment>('ArtifactSegment').implement({
  description: 'One segment object of an artifact in the blob store',
  fields: (t) => ({
    name: t.exposeString('name', { description: 'Object name in the blob store' }),
    size: t.expose('size', { type: 'SafeInt', description: 'Sealed bytes in the object' }),
    objects: t.exposeInt('objects', { description: 'Sealed chunks in the object' }),
  }),
});

export const Artifact = builder.prismaObject('Artifact', {
  description: 'A file up to 2 GiB, sealed under its project key and packed into object storage',
  fields: (t) => ({
    id: t.exposeID('id'),
    project: t.exposeString('project', { description: 'Whose key seals it' }),
    name: t.exposeString('name'),
    size: t.expose('size', { type: 'SafeInt', description: 'Plain bytes' }),
    sha256: t.exposeString('sha256', { description: 'SHA-256 of the plain bytes (hex); also the download ETag' }),
    contentType: t.exposeString('contentType'),
    labels: t.field({ type: 'JSONObject', resolve: (a) => labelsOf(a) }),
    keyVersion: t.exposeInt('keyVersion', { description: 'Version of the project key it is sealed under' }),
    manifest: t.exposeString('manifest', { description: 'Object name of its sealed manifest' }),
    segments: t.field({ type: [ArtifactSegment], resolve: (a) => segmentsOf(a) }),
    chunks: t.exposeInt('chunks', { description: 'Sealed chunks over all segments' }),
    sealedBytes: t.expose('sealedBytes', { type: 'SafeInt', description: 'Bytes stored over all segments' }),
    createdBy: t.exposeString('createdBy'),
    created: t.expose('created', { type: 'DateTime' }),
    expires: t.expose('expires', { type: 'DateTime', description: 'When retention ends and it is deleted' }),
  }),
});

const ArtifactLink = builder.objectRef<Link>('ArtifactLink').implement({
  description: 'A signed URL that downloads the plain bytes without a bearer token until it expires',
  fields: (t) => ({
    url: t.exposeString('url'),
    expires: t.expose('expires', { type: 'DateTime' }),
  }),
});

const ArtifactLinkInput = builder.inputType('ArtifactLinkInput', {
  fields: (t) => ({
    lifetime: t.string({
      required: false,
      description: 'Duration such as 24h (default 24h, at most 30d); the link never outlives the artifact',
    }),
  }),
});

builder.queryFields((t) => ({
  artifact: t.field({
    type: Artifact,
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => getArtifact(ctx.deps, ctx.actor, String(id)),
  }),
  artifacts: t.connection({
    type: Artifact,
    description: "The organization's artifacts, newest first",
    args: {
      project: t.arg.string({ description: 'Only this project (default: every project)' }),
      name: t.arg.string({ description: 'Only artifacts with exactly this name' }),
      label: t.arg.stringList({ description: 'key=value; only artifacts carrying every one of them' }),
    },
    resolve: async (_root, args, ctx) => connectionOf(await listArtifacts(ctx.deps, ctx.actor, { ...args, labels: args.label }), args),
  }),
}));

builder.mutationFields((t) => ({
  createArtifactLink: t.field({
    type: ArtifactLink,
    args: { id: t.arg.id({ required: true }), input: t.arg({ type: ArtifactLinkInput, required: false }) },
    resolve: (_root, { id, input }, ctx) => createArtifactLink(ctx.deps, ctx.actor, String(id), input?.lifetime),
  }),
  revokeArtifactLinks: t.field({
    type: Artifact,
    description: 'Every signed link made so far stops working (410 link_revoked)',
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => revokeArtifactLinks(ctx.deps, ctx.actor, String(id)),
  }),
  deleteArtifact: t.id({
    description: 'Deletes the objects and the record; links stop working. Returns the id.',
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => deleteArtifact(ctx.deps, ctx.actor, String(id)),
  }),
}));
