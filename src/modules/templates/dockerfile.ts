// What a devcontainer's Dockerfile asks of the node that builds it, read when the template is put:
// whether it runs commands (RUN: the tenant's code runs during the build, which a node allows only
// when its engine isolates build steps from the host's network), and no source fetched by URL
// (ADD https://… is fetched by the engine itself, from the node's network: refused outright).
import { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { ValidationError } from '../../kernel/errors';
import { show } from '../../kernel/show';

const FIELD = 'devcontainer.build.dockerfile';

export interface DockerfileSteps {
  /** It has RUN instructions (not counting ONBUILD's, which run in a later build). */
  runs: boolean;
}

/** The instructions of a Dockerfile: continuation lines joined, comments and blank lines left out. */
function instructions(text: string): string[] {
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  // A parser directive at the very top may change the escape character.
  let escapeChar = '\\';
  for (const line of lines) {
    const directive = /^#\s*(\w+)\s*=\s*(\S+)\s*$/.exec(line);
    if (!directive) break;
    if (directive[1]!.toLowerCase() === 'escape' && (directive[2] === '`' || directive[2] === '\\')) escapeChar = directive[2];
  }
  const out: string[] = [];
  let current = '';
  for (const line of lines) {
    if (!current && /^\s*(#|$)/.test(line)) continue;
    const trimmed = line.replace(/\s+$/, '');
    if (trimmed.endsWith(escapeChar)) {
      current += `${trimmed.slice(0, -1)} `;
      continue;
    }
    current += line;
    out.push(current.trim());
    current = '';
  }
  if (current.trim()) out.push(current.trim());
  return out;
}

/** Reads a Dockerfile's steps; refuses an ADD of a URL (422 naming the Dockerfile). */
export function dockerfileSteps(text: string): DockerfileSteps {
  let runs = false;
  for (const step of instructions(text)) {
    const [word = '', ...rest] = step.split(/\s+/);
    const keyword = word.toUpperCase();
    if (keyword === 'RUN') runs = true;
    if (keyword === 'ADD' || keyword === 'COPY') {
      const remote = rest.find((arg) => /^[a-z][a-z0-9+.-]*:\/\//i.test(arg) || /^git@/i.test(arg));
      if (remote) {
        throw new ValidationError(
          `${FIELD}: ${keyword} ${show(remote)}: sources fetched by URL are not built (the engine would fetch them from the node's network); put the file in the build context`,
          FIELD,
        );
      }
    }
  }
  return { runs };
}

/** The text of the file at `path` in a tar (the build context), or a 422 when it is not there. */
export async function fileInTar(archive: Buffer, path: string): Promise<string> {
  const extract = tar.extract();
  let found: Buffer | undefined;
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (header, stream, next) => {
      const name = header.name.replace(/^\.\//, '');
      const chunks: Buffer[] = [];
      stream.on('data', (chunk) => {
        if (name === path && header.type === 'file') chunks.push(chunk as Buffer);
      });
      stream.on('end', () => {
        if (name === path && header.type === 'file') found = Buffer.concat(chunks);
        next();
      });
      stream.resume();
    });
    extract.on('finish', resolve);
    extract.on('error', reject);
  });
  Readable.from([archive]).pipe(extract);
  await done;
  if (!found) throw new ValidationError(`${FIELD}: ${show(path)} is not a file of the build context`, FIELD);
  return found.toString('utf8');
}
