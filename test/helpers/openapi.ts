import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { expect } from 'vitest';
import type { Reply } from './server';

type Doc = { paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, { schema: object }> }> }>> };

/** Checks real responses against the server's own OpenAPI document. */
export function openApiValidator(doc: Doc) {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  const templates = Object.keys(doc.paths).map((template) => ({
    template,
    pattern: new RegExp(`^${template.replace(/\{\w+\}/g, '[^/]+')}$`),
  }));
  return (method: string, path: string, reply: Reply) => {
    const pathname = path.split('?')[0]!;
    const match = templates.find((t) => t.pattern.test(pathname) && doc.paths[t.template]![method.toLowerCase()]);
    expect(match, `${method} ${pathname} is in the OpenAPI document`).toBeDefined();
    const op = doc.paths[match!.template]![method.toLowerCase()]!;
    const response = op.responses[String(reply.status)] ?? op.responses.default;
    expect(response, `${method} ${match!.template} documents status ${reply.status}`).toBeDefined();
    const schema = response!.content?.['application/json']?.schema;
    if (!schema) return;
    const validate = ajv.compile(schema);
    const ok = validate(reply.body);
    expect(ok, `${method} ${pathname} ${reply.status}: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(reply.body)}`).toBe(true);
  };
}
