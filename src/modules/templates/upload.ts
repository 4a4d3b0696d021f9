// What a PUT of a template carries, made into a TemplateInput (src/modules/templates/service.ts):
// a JSON template as is, or a devcontainer.json, alone (GraphQL's `devcontainer`) or in a tar with
// its build context (REST, Content-Type application/x-tar).
import type { Readable } from 'node:stream';
import type { Deps } from '../../app/context';
import { ValidationError } from '../../kernel/errors';
import { buildContextTar, type ContextUpload, readContextTar } from './context-tar';
import { parseDevcontainer } from './devcontainer';
import { dockerfileSteps, fileInTar } from './dockerfile';
import type { TemplateInput } from './service';

function parse(deps: Deps, name: string, text: string, upload?: ContextUpload) {
  const pools = deps.catalog.pools.map((p) => p.name);
  return parseDevcontainer(text, {
    name,
    pools,
    defaultPool: pools[0] ?? 'default',
    ...(upload ? { folder: upload.folder, contextFiles: (path: string) => upload.has(path) } : {}),
  });
}

/** GraphQL putTemplate's arguments: exactly one of a JSON template and a devcontainer.json's text (which cannot build: no context). */
export async function templateInputOf(
  deps: Deps,
  name: string,
  spec: unknown,
  devcontainer: string | null | undefined,
): Promise<TemplateInput> {
  const given = (spec !== null && spec !== undefined ? 1 : 0) + (typeof devcontainer === 'string' ? 1 : 0);
  if (given !== 1) throw new ValidationError('give exactly one of spec (a JSON template) and devcontainer (a devcontainer.json)', 'spec');
  if (typeof devcontainer !== 'string') return { kind: 'json', template: spec };
  const parsed = parse(deps, name, devcontainer);
  if (parsed.build) {
    throw new ValidationError(
      'devcontainer.build: a build needs its context: PUT /v1/templates/{name} with a tar of the .devcontainer folder',
      'devcontainer.build',
    );
  }
  return { kind: 'devcontainer', template: parsed.template, warnings: parsed.warnings };
}

/** REST PUT with Content-Type application/x-tar: the .devcontainer folder (or its contents) and the build context it names. */
export async function templateInputOfTar(deps: Deps, name: string, body: Readable): Promise<TemplateInput> {
  const upload = await readContextTar(body);
  try {
    const parsed = parse(deps, name, upload.devcontainer, upload);
    if (!parsed.build) return { kind: 'devcontainer', template: parsed.template, warnings: parsed.warnings };
    const context = await buildContextTar(upload, parsed.build.context);
    const { runs } = dockerfileSteps(await fileInTar(context, parsed.build.dockerfile));
    return {
      kind: 'devcontainer',
      template: parsed.template,
      warnings: parsed.warnings,
      build: {
        context,
        dockerfile: parsed.build.dockerfile,
        args: parsed.build.args,
        runs,
        ...(parsed.build.target ? { target: parsed.build.target } : {}),
      },
    };
  } finally {
    await upload.close();
  }
}
