// `berth preview ENV PORT` (docs/cli.md#preview-urls): a signed, expiring URL of a port inside an
// environment, at its own host under the server's PREVIEW_DOMAIN (docs/environments.md, "Preview URLs").
import type { Command } from 'commander';
import { BerthClient, type JsonOptions, withConnection } from './client';
import { CommandError } from './errors';
import { json } from './format';
import { durationOption } from './options';

interface Preview {
  url: string;
  port: number;
  expires: string;
}

/** A port 1-65535, checked as the server checks it. */
function portArgument(value: string): number {
  const port = Number(value);
  if (!/^\d{1,5}$/.test(value) || port < 1 || port > 65_535) throw new CommandError(`port: ${value} is not a port from 1 to 65535`);
  return port;
}

export function registerPreviewCommands(program: Command): void {
  withConnection(
    program
      .command('preview <environment> <port>')
      .description('print a signed URL that opens a port of the environment in a browser (any port; default 1h)')
      .option('--expires <duration>', 'how long the URL works, e.g. 30m or 2h (default 1h, at most 24h)', durationOption)
      .option('--json', 'print {preview} as JSON'),
  ).action(async (environment: string, port: string, options: JsonOptions & { expires?: string }) => {
    const answer = await new BerthClient(options).post<{ preview: Preview }>(
      `/v1/environments/${encodeURIComponent(environment)}/previews`,
      {
        port: portArgument(port),
        expiresIn: options.expires,
      },
    );
    if (options.json) return json(answer);
    console.log(answer.preview.url);
    console.error(`port ${answer.preview.port} of ${environment}, until ${answer.preview.expires}`);
  });
}
