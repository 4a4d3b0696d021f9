import type { Snapshot as SnapshotRow } from '../../generated/prisma/client';
import { builder } from '../../kernel/graphql/builder';
import { type Segment, segmentsOf } from '../../kernel/json-columns';
import { listSnapshots } from './service';

const SnapshotSegment = builder.objectRef<Segment>('SnapshotSegment').implement({
  description: 'One segment object of a saved share in the blob store',
  fields: (t) => ({
    name: t.exposeString('name', { description: 'Object name in the blob store' }),
    size: t.expose('size', { type: 'SafeInt', description: 'Sealed bytes in the object' }),
    objects: t.exposeInt('objects', { description: 'Sealed chunks in the object' }),
  }),
});

export const Snapshot = builder.prismaObject('Snapshot', {
  description: "One share of an environment's synced files, saved under a key when it ended",
  fields: (t) => ({
    project: t.exposeString('project', { description: 'Whose key seals it' }),
    key: t.exposeString('key'),
    share: t.exposeString('share', { description: 'Template share the files came from' }),
    root: t.exposeString('root', { description: 'Id of the save: every share saved by one environment at its end has the same root' }),
    keyVersion: t.exposeInt('keyVersion', { description: 'Version of the project key it is sealed under' }),
    segments: t.field({ type: [SnapshotSegment], resolve: (s) => segmentsOf(s) }),
    files: t.exposeInt('files'),
    bytes: t.expose('bytes', { type: 'SafeInt', description: 'Plain bytes of the files' }),
    objects: t.exposeInt('objects', { description: 'Sealed chunks over all segments' }),
    sealedBytes: t.expose('sealedBytes', { type: 'SafeInt', description: 'Bytes stored over all segments' }),
    lease: t.exposeString('lease', { description: 'Environment that saved it' }),
    createdBy: t.exposeString('createdBy'),
    created: t.expose('created', { type: 'DateTime' }),
  }),
});

const SnapshotList = builder.objectRef<{ project: string; snapshots: SnapshotRow[]; next: string | null }>('SnapshotList').implement({
  fields: (t) => ({
    project: t.exposeString('project'),
    snapshots: t.field({ type: [Snapshot], resolve: (l) => l.snapshots }),
    next: t.string({ nullable: true, description: 'Cursor of the next page; absent on the last', resolve: (l) => l.next }),
  }),
});

builder.queryField('snapshots', (t) =>
  t.field({
    type: SnapshotList,
    description: "A project's snapshots, newest first",
    args: {
      project: t.arg.string({ description: 'Project (default: default)' }),
      prefix: t.arg.string({ description: 'Only keys starting with this' }),
      first: t.arg.int({ description: 'Page size, 1-500 (default 50)' }),
      after: t.arg.string({ description: 'The `next` of the previous page' }),
    },
    resolve: (_root, args, ctx) => listSnapshots(ctx.deps, ctx.actor, args),
  }),
);
