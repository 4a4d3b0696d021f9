// `berth key create|ls|revoke` (docs/cli.md#api-keys): the organization's API keys (admins), as
// the console's Settings manages them.
import type { Command } from 'commander';
import { BerthClient, idOf, type JsonOptions, withConnection } from './client';
import { json, since, table } from './format';
import { durationOption } from './options';

interface ApiKey {
  id: string;
  name: string;
  admin: boolean;
  prefix: string;
  createdBy: string;
  created: string;
  expires?: string;
  revoked?: string;
  lastUsed?: string;
}

const role = (k: ApiKey) => (k.admin ? 'admin' : 'member');

/** Whether it still works: revoked, expired, or active until when. */
function state(k: ApiKey): string {
  if (k.revoked) return `revoked ${since(k.revoked)} ago`;
  if (k.expires && Date.parse(k.expires) <= Date.now()) return 'expired';
  return k.expires ? `active until ${k.expires}` : 'active';
}

export function registerKeyCommands(program: Command): void {
  const key = program.command('key').description("API keys: the organization's credentials for automation (admins)");

  withConnection(
    key
      .command('create <name>')
      .description('create an API key; prints its secret once')
      .option('--admin', 'it may do what an admin may (quotas, keys, webhooks, nodes)')
      .option('--expires-in <duration>', 'it stops working after this long, e.g. 90d (default: never)', durationOption)
      .option('--json', 'print {key, secret} as JSON'),
  ).action(async (name: string, options: JsonOptions & { admin?: boolean; expiresIn?: string }) => {
    const answer = await new BerthClient(options).post<{ key: ApiKey; secret: string }>('/v1/keys', {
      name,
      admin: options.admin ?? false,
      expiresIn: options.expiresIn,
    });
    if (options.json) return json(answer);
    const k = answer.key;
    console.log(`created ${role(k)} API key ${k.name} (${k.id})${k.expires ? `, expires ${k.expires}` : ''}`);
    console.log(`secret (shown once; it won't be shown again): ${answer.secret}`);
  });

  withConnection(key.command('ls').description('list the API keys, revoked ones included').option('--json', 'print {keys} as JSON')).action(
    async (options: JsonOptions) => {
      const answer = await new BerthClient(options).get<{ keys: ApiKey[] }>('/v1/keys');
      if (options.json) return json(answer);
      const rows = answer.keys.map((k) => [
        k.id,
        k.name,
        role(k),
        `${k.prefix}…`,
        k.createdBy,
        since(k.created),
        since(k.lastUsed),
        state(k),
      ]);
      if (rows.length === 0) console.error('no API keys');
      else console.log(table(['ID', 'NAME', 'ROLE', 'PREFIX', 'CREATED BY', 'AGE', 'LAST USED', 'STATE'], rows));
    },
  );

  withConnection(
    key
      .command('revoke <key>')
      .description('revoke an API key (by id, or the name of a live one); it stops working at once')
      .option('--json', 'print {key} as JSON'),
  ).action(async (ref: string, options: JsonOptions) => {
    const client = new BerthClient(options);
    // The API takes ids: a name is that of the live key of that name (live keys' names are unique).
    const { keys } = await client.get<{ keys: ApiKey[] }>('/v1/keys');
    const answer = await client.delete<{ key: ApiKey }>(`/v1/keys/${encodeURIComponent(idOf(keys, ref))}`);
    if (options.json) return json(answer);
    console.log(`${answer.key.id} ${answer.key.name} revoked`);
  });
}
