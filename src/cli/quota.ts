// `berth quota set|ls` (docs/cli.md#quotas): how many environments of a template may be live at
// once, and its time-outs, as the console's Quotas page sets them (setting one is for admins).
import type { Command } from 'commander';
import { BerthClient, type JsonOptions, withConnection } from './client';
import { json, table } from './format';
import { countOption, durationOption } from './options';

interface Quota {
  template: string;
  maxLeases: number;
  running: number;
  idle: string;
  hard: string;
  warnings: string[];
}

/** Why a quota cannot be reached (its pool runs fewer at once), on stderr: the API keeps it anyway. */
const warn = (quotas: Quota[]) => {
  for (const q of quotas) for (const w of q.warnings) console.error(`warning: ${q.template}: ${w}`);
};

export function registerQuotaCommands(program: Command): void {
  const quota = program.command('quota').description('quotas: how many environments of a template may be live at once');

  withConnection(
    quota
      .command('set <template>')
      .description("set a template's quota ('*': across every template) (admins)")
      .requiredOption('--max <n>', 'how many of its environments may be live at once', countOption)
      .option('--idle <duration>', "default and longest idle time-out, e.g. 30m (default: the template's)", durationOption)
      .option('--hard <duration>', "default and longest hard time-out, at most 24h (default: the template's)", durationOption)
      .option('--json', 'print {quota} as JSON'),
  ).action(async (template: string, options: JsonOptions & { max: number; idle?: string; hard?: string }) => {
    const answer = await new BerthClient(options).put<{ quota: Quota }>(`/v1/quotas/${encodeURIComponent(template)}`, {
      maxLeases: options.max,
      idle: options.idle,
      hard: options.hard,
    });
    if (options.json) return json(answer);
    const q = answer.quota;
    console.log(`${q.template}: at most ${q.maxLeases} live (${q.running} now), idle ${q.idle}, hard ${q.hard}`);
    warn([q]);
  });

  withConnection(
    quota.command('ls').description('list the quotas with how many environments each has live').option('--json', 'print {quotas} as JSON'),
  ).action(async (options: JsonOptions) => {
    const answer = await new BerthClient(options).get<{ quotas: Quota[] }>('/v1/quotas');
    if (options.json) return json(answer);
    const rows = answer.quotas.map((q) => [q.template, String(q.running), String(q.maxLeases), q.idle, q.hard]);
    if (rows.length === 0) console.error('no quotas: every template may be leased as much as its pool allows');
    else console.log(table(['TEMPLATE', 'RUNNING', 'MAX', 'IDLE', 'HARD'], rows));
    warn(answer.quotas);
  });
}
