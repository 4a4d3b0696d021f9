// `berth template ls|get|push|rm` (docs/cli.md#templates): what can be leased, and an admin's own
// templates: a JSON template, or a .devcontainer folder sent as a tar with its build context.
import { createReadStream } from 'node:fs';
import { lstat, readdir, readFile, readlink } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import type { Command } from 'commander';
import { BerthClient, type JsonOptions, withConnection } from './client';
import { CommandError } from './errors';
import { json, table } from './format';
import type { Answer } from './http';
import type { RemoteNode } from './nodes';

interface Template {
  name: string;
  version: number;
  source: string;
  status: string;
  error?: string;
  warnings: string[];
  pool: string;
  image?: string | null;
  idle: string;
  hard: string;
  shares: { name: string; direction: string; envPath: string }[];
  services: { service: string; target: string }[];
  warm: number;
  resources: { cpus?: number; memory?: string; pids?: number; disk?: string };
  user?: string;
  workdir: string;
  lifecycle: { phase: string; name?: string; argv: string[] }[];
}

/** A template's limits in a table cell: `2cpu,4GiB,256pids,8GiB disk`, or `-`. */
function limits(r: Template['resources']): string {
  const parts = [
    r.cpus !== undefined && r.cpus !== null && `${r.cpus}cpu`,
    r.memory && r.memory,
    r.pids !== undefined && r.pids !== null && `${r.pids}pids`,
    r.disk && `${r.disk} disk`,
  ].filter((p): p is string => Boolean(p));
  return parts.join(',') || '-';
}

/** Folders a devcontainer upload leaves out: they are never a build's input and can be huge. */
const SKIPPED = new Set(['.git', 'node_modules']);

/**
 * A tar of `dir`: the folder holding `.devcontainer/` (sent whole, so a context of `..` is in it)
 * or the `.devcontainer` folder itself (its contents at the tar's root). Links are sent as links
 * (the server refuses those that lead out).
 */
async function devcontainerTar(dir: string): Promise<Readable> {
  const has = async (p: string) =>
    lstat(p).then(
      () => true,
      () => false,
    );
  if (
    !(await has(path.join(dir, '.devcontainer'))) &&
    !(await has(path.join(dir, 'devcontainer.json'))) &&
    !(await has(path.join(dir, '.devcontainer.json')))
  ) {
    throw new CommandError(`${dir} has no .devcontainer folder and no devcontainer.json`);
  }
  // (loaded here: every other command starts without it)
  const tar = await import('tar-stream');
  const pack = tar.pack();
  const add = async (rel: string): Promise<void> => {
    const full = path.join(dir, rel);
    const stat = await lstat(full);
    const common = { name: rel, mode: stat.mode & 0o7777, mtime: stat.mtime };
    if (stat.isDirectory()) {
      if (rel) pack.entry({ ...common, type: 'directory' });
      for (const name of (await readdir(full)).sort()) if (!SKIPPED.has(name)) await add(rel ? `${rel}/${name}` : name);
    } else if (stat.isSymbolicLink()) {
      pack.entry({ ...common, type: 'symlink', linkname: await readlink(full) });
    } else if (stat.isFile()) {
      await new Promise<void>((resolve, reject) => {
        const entry = pack.entry({ ...common, size: stat.size }, (error) => (error ? reject(error) : resolve()));
        createReadStream(full).on('error', reject).pipe(entry);
      });
    }
  };
  add('')
    .then(() => pack.finalize())
    .catch((error: Error) => pack.destroy(error));
  // (tar-stream's pack is a streamx stream: Node's own wraps it for fetch)
  return Readable.from(pack);
}

function printTemplate(t: Template): void {
  const rows: [string, string][] = [
    ['name', t.name],
    ['version', `${t.version} (${t.source})`],
    ['status', t.status + (t.error ? `: ${t.error}` : '')],
    ['pool', t.pool],
    ['image', t.image ?? '(files only)'],
    ['limits', limits(t.resources)],
    ['time-outs', `idle ${t.idle}, hard ${t.hard}`],
    ['workdir', t.workdir],
    ['user', t.user ?? "(the image's)"],
    ['warm', String(t.warm)],
    ['shares', t.shares.map((s) => `${s.name}:${s.direction}:${s.envPath}`).join(', ') || '-'],
    ['services', t.services.map((s) => `${s.service}→${s.target}`).join(', ') || '-'],
    ['lifecycle', t.lifecycle.map((c) => (c.name ? `${c.phase} (${c.name})` : c.phase)).join(', ') || '-'],
  ];
  for (const [k, v] of rows) console.log(`${k.padEnd(10)} ${v}`);
  for (const w of t.warnings) console.error(`warning: ${w}`);
}

export function registerTemplateCommands(program: Command): void {
  const template = program.command('template').description("templates: what can be leased, and your organization's own (admins)");

  withConnection(
    template.command('ls').description('list the templates the organization can lease').option('--json', 'print {templates} as JSON'),
  ).action(async (options: JsonOptions) => {
    const client = new BerthClient(options);
    const [answer, nodes] = await Promise.all([
      client.json<{ templates: Template[] }>('GET', '/v1/templates'),
      client.json<{ nodes: RemoteNode[] }>('GET', '/v1/nodes'),
    ]);
    if (options.json) return json(answer);
    // Warm containers ready for a lease (on every node of the organization's view) of those wanted.
    const ready = new Map<string, number>();
    for (const w of nodes.nodes.flatMap((n) => n.warm)) if (w.state === 'ready') ready.set(w.template, (ready.get(w.template) ?? 0) + 1);
    const rows = answer.templates.map((t) => [
      t.name,
      t.pool,
      t.image ?? '(files only)',
      t.status === 'ready' ? `v${t.version}` : `v${t.version} ${t.status}`,
      t.warm ? `${ready.get(t.name) ?? 0}/${t.warm}` : '-',
      limits(t.resources),
      t.idle,
      t.hard,
      t.shares.map((s) => `${s.name}:${s.direction}`).join(',') || '-',
      t.services.map((s) => s.service).join(',') || '-',
    ]);
    if (rows.length === 0) console.error('no templates');
    else console.log(table(['NAME', 'POOL', 'IMAGE', 'VERSION', 'WARM', 'LIMITS', 'IDLE', 'HARD', 'SHARES', 'SERVICES'], rows));
  });

  withConnection(
    template
      .command('get <name>')
      .description('show a template: its status, version, warnings (and its build log with --log)')
      .option('--log', "print its image's build log instead")
      .option('--json', 'print {template} as JSON'),
  ).action(async (name: string, options: JsonOptions & { log?: boolean }) => {
    const client = new BerthClient(options);
    if (options.log) {
      const res = await client.fetch(`/v1/templates/${encodeURIComponent(name)}/log`);
      process.stdout.write(await res.text());
      return;
    }
    const answer = await client.get<{ template: Template }>(`/v1/templates/${encodeURIComponent(name)}`);
    if (options.json) return json(answer);
    printTemplate(answer.template);
  });

  withConnection(
    template
      .command('push <name>')
      .description("set your organization's own version of a template (admins)")
      .option('--file <template.json>', "a JSON template (the templates file's format)")
      .option('--devcontainer <dir>', 'a folder holding .devcontainer/ (or the .devcontainer folder itself): sent with its build context')
      .option('--json', 'print {template} as JSON'),
  ).action(async (name: string, options: JsonOptions & { file?: string; devcontainer?: string }) => {
    if (Boolean(options.file) === Boolean(options.devcontainer)) throw new CommandError('give one of --file and --devcontainer');
    const client = new BerthClient(options);
    const at = `/v1/templates/${encodeURIComponent(name)}`;
    let res: Answer;
    if (options.file) {
      const text = await readFile(options.file, 'utf8');
      res = await client.fetch(at, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: text });
    } else {
      const body = await devcontainerTar(path.resolve(options.devcontainer!));
      res = await client.fetch(at, { method: 'PUT', headers: { 'content-type': 'application/x-tar' }, body });
    }
    const answer = (await res.json()) as { template: Template };
    if (options.json) return json(answer);
    const t = answer.template;
    console.log(`${t.name}: version ${t.version}, ${res.status === 201 ? 'made' : 'changed'}, ${t.status}${t.error ? `: ${t.error}` : ''}`);
    if (t.status === 'building') console.error(`its image builds on pool ${t.pool}'s nodes: berth template get ${t.name} --log`);
    for (const w of t.warnings) console.error(`warning: ${w}`);
  });

  withConnection(template.command('rm <name>').description("remove your organization's own version of a template (admins)")).action(
    async (name: string, options: JsonOptions) => {
      await new BerthClient(options).fetch(`/v1/templates/${encodeURIComponent(name)}`, { method: 'DELETE' });
      console.log(`${name}: removed`);
    },
  );
}
