// Preview URLs in GraphQL (docs/environments.md, "Preview URLs"): the createPreview mutation.
import { builder } from '../../kernel/graphql/builder';
import { createPreview, type Preview } from './previews';

const PreviewRef = builder.objectRef<Preview>('Preview').implement({
  description: "A signed, expiring URL of a port inside a ready environment, at a host of the server's PREVIEW_DOMAIN",
  fields: (t) => ({
    url: t.exposeString('url', { description: 'Opening it sets a cookie for the preview host only, then redirects to /' }),
    port: t.exposeInt('port'),
    expires: t.expose('expires', { type: 'DateTime' }),
  }),
});

const CreatePreviewInput = builder.inputType('CreatePreviewInput', {
  fields: (t) => ({
    port: t.int({ required: true, description: 'A port inside the environment, 1-65535 (any port, not only the services)' }),
    expiresIn: t.string({ description: 'How long the URL works, such as 30m or 2h (default 1h, at most 24h, never past the lease)' }),
  }),
});

builder.mutationField('createPreview', (t) =>
  t.field({
    type: PreviewRef,
    description: "A preview URL of a port of the environment (its owner, admins and API keys; 409 without the server's PREVIEW_DOMAIN)",
    args: {
      environment: t.arg.string({ required: true, description: 'The environment id or name' }),
      input: t.arg({ type: CreatePreviewInput, required: true }),
    },
    resolve: (_root, { environment, input }, ctx) => createPreview(ctx.deps, ctx.actor, environment, input),
  }),
);
