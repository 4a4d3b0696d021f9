// `berth webhook add|ls|rm|deliveries` (docs/cli.md#webhooks): the organization's webhook
// endpoints (admins), as the console's Settings › Webhooks manages them.
import { type Command, Option } from 'commander';
import { WEBHOOK_EVENTS } from '../kernel/event-names';
import { BerthClient, type JsonOptions, withConnection } from './client';
import { json, since, table } from './format';

interface Webhook {
  id: string;
  url: string;
  events: string[];
  createdBy: string;
  created: string;
  failing: boolean;
  failingSince?: string;
  consecutiveFailures: number;
}

interface Delivery {
  id: string;
  event: string;
  attempts: number;
  created: string;
  nextAttempt?: string;
  delivered?: string;
  gaveUp?: string;
  history: { attempt: number; at: string; status?: number; error?: string }[];
}

const path = (id: string) => `/v1/webhooks/${encodeURIComponent(id)}`;

/** Where a delivery stands: delivered, given up, or when it is tried next. */
function outcome(d: Delivery): string {
  if (d.delivered) return `delivered ${d.delivered}`;
  if (d.gaveUp) return `gave up ${d.gaveUp}`;
  return d.nextAttempt ? `pending, next attempt ${d.nextAttempt}` : 'pending';
}

export function registerWebhookCommands(program: Command): void {
  const webhook = program.command('webhook').description("webhooks: where the organization's events are sent (admins)");

  withConnection(
    webhook
      .command('add <url>')
      .description('register an endpoint for some events; prints its signing secret once')
      .addOption(
        new Option('--event <type...>', 'an event type to send (several, or repeat the option)')
          .choices(WEBHOOK_EVENTS)
          .makeOptionMandatory(),
      )
      .option('--json', 'print {webhook, secret} as JSON'),
  ).action(async (url: string, options: JsonOptions & { event: string[] }) => {
    const answer = await new BerthClient(options).post<{ webhook: Webhook; secret: string }>('/v1/webhooks', {
      url,
      events: options.event,
    });
    if (options.json) return json(answer);
    console.log(`added webhook ${answer.webhook.id} for ${answer.webhook.events.join(', ')}`);
    console.log(`signing secret (shown once; it won't be shown again): ${answer.secret}`);
  });

  withConnection(webhook.command('ls').description('list the endpoints, newest first').option('--json', 'print {webhooks} as JSON')).action(
    async (options: JsonOptions) => {
      const answer = await new BerthClient(options).get<{ webhooks: Webhook[] }>('/v1/webhooks');
      if (options.json) return json(answer);
      const rows = answer.webhooks.map((w) => [
        w.id,
        w.url,
        w.events.join(','),
        w.failing ? `failing since ${w.failingSince} (${w.consecutiveFailures} failures)` : 'ok',
        w.createdBy,
        since(w.created),
      ]);
      if (rows.length === 0) console.error('no webhooks');
      else console.log(table(['ID', 'URL', 'EVENTS', 'STATE', 'CREATED BY', 'AGE'], rows));
    },
  );

  withConnection(
    webhook.command('rm <id>').description('remove an endpoint; its pending deliveries stop').option('--json', 'print {deleted} as JSON'),
  ).action(async (id: string, options: JsonOptions) => {
    const answer = await new BerthClient(options).delete<{ deleted: string }>(path(id));
    if (options.json) return json(answer);
    console.log(`removed webhook ${answer.deleted}`);
  });

  withConnection(
    webhook
      .command('deliveries <id>')
      .description("an endpoint's deliveries, newest first, each with every attempt: its status and error")
      .option('--limit <n>', 'at most this many (default 50, at most 500)')
      .option('--cursor <next>', 'the page after the one that printed this cursor')
      .option('--json', 'print {deliveries, next} as JSON'),
  ).action(async (id: string, options: JsonOptions & { limit?: string; cursor?: string }) => {
    const answer = await new BerthClient(options).get<{ deliveries: Delivery[]; next?: string }>(`${path(id)}/deliveries`, {
      limit: options.limit,
      cursor: options.cursor,
    });
    if (options.json) return json(answer);
    if (answer.deliveries.length === 0) console.error('no deliveries');
    for (const d of answer.deliveries) {
      console.log(`${d.id} ${d.event} ${outcome(d)} (${d.attempts} attempt${d.attempts === 1 ? '' : 's'}, created ${d.created})`);
      // The attempts, first first: a status where the endpoint answered, the error of each that failed.
      for (const a of d.history) console.log(`  #${a.attempt} ${a.at} ${a.status ?? '-'} ${a.error ?? 'ok'}`);
    }
    if (answer.next) console.error(`more: berth webhook deliveries ${id} --cursor ${answer.next}`);
  });
}
