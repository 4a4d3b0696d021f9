// A node's commands, as the node control channel's messages drive them (docs/agents.md, "Exec"):
// `berth node`'s (src/agent/node-agent.ts), the built-in node's too. A command is known (kills, credit and input for it kept)
// from the moment its `exec` message arrives; its output goes back as `exec-output` events of at
// most EXEC_CHUNK bytes, input credit as `exec-input-credit`, and last `exec-exit`.
import { execOutput } from '../protocol/dataplane';
import type { FromNode, ToNode } from '../protocol/node-channel';
import { type Command, whenStarted } from './command';
import type { NodeRuntime } from './runtime';
import { NodeSession } from './session';

/** The channel messages about commands, server to node. */
export type CommandMessage = ToNode<
  'exec' | 'exec-kill' | 'exec-credit' | 'exec-input' | 'exec-input-end' | 'exec-resize' | 'exec-attach' | 'exec-detach' | 'exec-keep'
>;
/** What a node says of its commands. */
export type CommandEvent = FromNode<'exec-output' | 'exec-exit' | 'exec-input-credit' | 'exec-replay' | 'exec-attached'>;

export const isCommandMessage = (message: { type: string }): message is CommandMessage => message.type.startsWith('exec');

export class CommandHost {
  private readonly commands = new Map<string, Command>();
  /** The commands that are sessions (docs/agents.md, "Sessions"), by run id. */
  private readonly sessions = new Map<string, NodeSession>();

  constructor(
    private readonly runtime: NodeRuntime,
    private readonly send: (event: CommandEvent) => void,
    /** Whether this node holds the environment (a command for one it does not hold ends with 126). */
    private readonly holds: (environment: string) => boolean,
    /** How the node names itself in the errors a command's stderr shows. */
    private readonly who: string,
  ) {}

  handle(message: CommandMessage): void {
    switch (message.type) {
      case 'exec':
        void this.exec(message);
        return;
      case 'exec-kill':
        this.commands.get(message.exec)?.kill();
        return;
      case 'exec-credit': {
        const session = this.sessions.get(message.exec);
        if (session) session.credit(message.attach ?? '', message.bytes);
        else this.commands.get(message.exec)?.grant(message.bytes);
        return;
      }
      case 'exec-input': {
        const { exec: run, attach } = message;
        const data = Buffer.from(message.data, 'base64');
        if (attach) this.sessions.get(run)?.seen(attach);
        this.commands
          .get(run)
          ?.input(data, () => this.send({ type: 'exec-input-credit', exec: run, bytes: data.length, ...(attach ? { attach } : {}) }));
        return;
      }
      case 'exec-attach':
        this.sessions.get(message.exec)?.attach(message.attach);
        return;
      case 'exec-detach':
        this.sessions.get(message.exec)?.detach(message.attach);
        return;
      case 'exec-keep':
        this.sessions.get(message.exec)?.seen(message.attach);
        return;
      case 'exec-input-end':
        this.commands.get(message.exec)?.endInput();
        return;
      case 'exec-resize':
        this.commands.get(message.exec)?.resize({ rows: message.rows, cols: message.cols });
        return;
    }
  }

  /** The sessions running here (a hello names them: the server ends the others). */
  sessionIds(): string[] {
    return [...this.sessions.values()].map((s) => s.id);
  }

  /** Kills every command still running (the node stops). */
  killAll(): void {
    for (const command of this.commands.values()) command.kill();
  }

  private async exec({ exec: run, environment, argv, workdir, session }: ToNode<'exec'>): Promise<void> {
    let held: NodeSession | undefined;
    const output = (stream: 'stdout' | 'stderr', data: Buffer) => {
      if (held) return held.output(stream, data);
      for (const event of execOutput(stream, data)) this.send({ ...event, exec: run });
    };
    const ended = session?.id ? { session: session.id } : {};
    if (!this.holds(environment.id)) {
      output('stderr', Buffer.from(`${this.who}: environment ${environment.id} is not on this node\n`));
      return this.send({ type: 'exec-exit', exec: run, exitCode: 126, ...ended });
    }
    const mode = session ? { ...(session.tty ? { tty: session.tty } : {}) } : undefined;
    const command = whenStarted(this.runtime.exec(environment.id, argv, workdir, output, mode), (error) => {
      output('stderr', Buffer.from(`${this.who}: ${error.message}\n`));
      return 126;
    });
    if (session?.id && session.attach) {
      held = new NodeSession(session.id, command, (event) => this.send({ ...event, exec: run }), {
        attach: session.attach,
        graceMs: session.graceMs ?? 0,
        keepMs: session.keepMs ?? 5000,
      });
      this.sessions.set(run, held);
    }
    this.commands.set(run, command);
    const exitCode = await command.exited;
    held?.end();
    this.sessions.delete(run);
    this.commands.delete(run);
    this.send({ type: 'exec-exit', exec: run, exitCode, ...ended });
  }
}
