// `berth session ls ENV`, `berth session attach ENV SESSION`, `berth session end ENV SESSION`: the
// sessions that outlive their connection (docs/agents.md, "Sessions"), from a shell.
import type { Command } from 'commander';
import { BerthClient, type ConnectionOptions, type JsonOptions, withConnection } from './client';
import { json, since, table } from './format';

interface Session {
  id: string;
  command: string;
  tty: boolean;
  created: string;
  attached: number;
  lastActivity: string;
}

const session = () => import('./session');
const path = (environment: string, id = '') =>
  `/v1/environments/${encodeURIComponent(environment)}/sessions${id ? `/${encodeURIComponent(id)}` : ''}`;

export function registerSessionCommands(program: Command): void {
  const sessions = program.command('session').description('sessions: interactive commands that outlive a dropped connection');
  withConnection(
    sessions
      .command('ls')
      .description("list an environment's open sessions")
      .argument('<environment>', 'environment id or name')
      .option('--json', 'print {sessions} as JSON'),
  ).action(async (environment: string, options: JsonOptions) => {
    const answer = await new BerthClient(options).json<{ sessions: Session[] }>('GET', path(environment));
    if (options.json) return json(answer);
    if (answer.sessions.length === 0) return console.log(`no open sessions in ${environment}`);
    console.log(
      table(
        ['SESSION', 'COMMAND', 'TTY', 'ATTACHED', 'STARTED', 'ACTIVE'],
        answer.sessions.map((s) => [
          s.id,
          s.command.length > 40 ? `${s.command.slice(0, 39)}…` : s.command,
          s.tty ? 'yes' : 'no',
          String(s.attached),
          `${since(s.created)} ago`,
          `${since(s.lastActivity)} ago`,
        ]),
      ),
    );
  });
  withConnection(
    sessions
      .command('attach')
      .description('attach to a running session: its recent output first, then live; exits with its exit code')
      .argument('<environment>', 'environment id or name')
      .argument('<session>', 'session id (ses_…, from berth session ls)'),
  ).action(async (environment: string, id: string, options: ConnectionOptions) => {
    const tty = Boolean(process.stdin.isTTY);
    process.exitCode = await (await session()).runSession(new BerthClient(options), { environment, session: id, tty, stdin: true });
  });
  withConnection(
    sessions
      .command('end')
      .description("end a session: its command's whole process group is killed (recorded with 137)")
      .argument('<environment>', 'environment id or name')
      .argument('<session>', 'session id'),
  ).action(async (environment: string, id: string, options: ConnectionOptions) => {
    const answer = await new BerthClient(options).json<{ exec: { exitCode: number } }>('DELETE', path(environment, id));
    console.log(`ended ${id} (exit code ${answer.exec.exitCode})`);
  });
}
