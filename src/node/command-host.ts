// A node's commands, as the node control channel's messages drive them (docs/agents.md, "Exec"):
// `berth node`'s (src/agent/node-agent.ts), the built-in node's too. A command is known (kills, credit and input for it kept)
// from the moment its `exec` message arrives; its output goes back as `exec-output` events of at
// most EXEC_CHUNK bytes, input credit as `exec-input-credit`, and last `exec-exit`.
import { execOutput } from '../protocol/dataplane';
import type { FromNode, ToNode } from '../protocol/node-channel';
import { type Command, whenStarted } from './command';
import type { NodeRuntime } from './runtime';

/** The channel messages about commands, server to node. */
export type CommandMessage = ToNode<'exec' | 'exec-kill' | 'exec-credit' | 'exec-input' | 'exec-input-end' | 'exec-resize'>;
/** What a node says of its commands. */
export type CommandEvent = FromNode<'exec-output' | 'exec-exit' | 'exec-input-credit'>;

export const isCommandMessage = (message: { type: string }): message is CommandMessage => message.type.startsWith('exec');

export class CommandHost {
  private readonly commands = new Map<string, Command>();

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
      case 'exec-credit':
        this.commands.get(message.exec)?.grant(message.bytes);
        return;
      case 'exec-input': {
        const run = message.exec;
        const data = Buffer.from(message.data, 'base64');
        this.commands.get(run)?.input(data, () => this.send({ type: 'exec-input-credit', exec: run, bytes: data.length }));
        return;
      }
      case 'exec-input-end':
        this.commands.get(message.exec)?.endInput();
        return;
      case 'exec-resize':
        this.commands.get(message.exec)?.resize({ rows: message.rows, cols: message.cols });
        return;
    }
  }

  /** Kills every command still running (the node stops). */
  killAll(): void {
    for (const command of this.commands.values()) command.kill();
  }

  private async exec({ exec: run, environment, argv, workdir, session }: ToNode<'exec'>): Promise<void> {
    const output = (stream: 'stdout' | 'stderr', data: Buffer) => {
      for (const event of execOutput(stream, data)) this.send({ ...event, exec: run });
    };
    if (!this.holds(environment.id)) {
      output('stderr', Buffer.from(`${this.who}: environment ${environment.id} is not on this node\n`));
      return this.send({ type: 'exec-exit', exec: run, exitCode: 126 });
    }
    const command = whenStarted(this.runtime.exec(environment.id, argv, workdir, output, session), (error) => {
      output('stderr', Buffer.from(`${this.who}: ${error.message}\n`));
      return 126;
    });
    this.commands.set(run, command);
    const exitCode = await command.exited;
    this.commands.delete(run);
    this.send({ type: 'exec-exit', exec: run, exitCode });
  }
}
