// The node agent's commands (`berth exec`, docs/agents.md "Exec"): the server sends
// `{type: 'exec', exec, environment, argv}`; the agent runs argv with the environment's root as
// working directory and sends its output as `exec-output` events (at most 4 KiB each) and then
// `exec-exit` with the exit code. `exec-kill` stops it (its caller went away).
import { type ChildProcess, spawn } from 'node:child_process';
import { constants } from 'node:os';
import type { NodeAgent } from './node-agent';

const CHUNK = 4096;

export function installExec(agent: NodeAgent): void {
  const running = new Map<string, ChildProcess>();
  agent.handlers.set('exec', async (_agent, message) => {
    const run = String(message.exec);
    const env = (message.environment as { id: string }).id;
    const argv = message.argv as string[];
    const output = (stream: 'stdout' | 'stderr') => (data: Buffer) => {
      for (let i = 0; i < data.length; i += CHUNK) {
        agent.send({ type: 'exec-output', exec: run, stream, data: data.subarray(i, i + CHUNK).toString('base64') });
      }
    };
    let exited = false;
    const exit = (exitCode: number) => {
      if (exited) return;
      exited = true;
      running.delete(run);
      agent.send({ type: 'exec-exit', exec: run, exitCode });
    };
    if (!agent.held.has(env)) {
      output('stderr')(Buffer.from(`berth node: environment ${env} is not on this node\n`));
      return void exit(126);
    }
    const child = spawn(argv[0]!, argv.slice(1), { cwd: agent.root(env), stdio: ['ignore', 'pipe', 'pipe'] });
    running.set(run, child);
    child.stdout!.on('data', output('stdout'));
    child.stderr!.on('data', output('stderr'));
    child.on('error', (err: NodeJS.ErrnoException) => {
      output('stderr')(Buffer.from(`berth: ${argv[0]}: ${err.code === 'ENOENT' ? 'command not found' : err.message}\n`));
      exit(err.code === 'ENOENT' ? 127 : 126);
    });
    child.on('close', (code, signal) => exit(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0)));
    return undefined;
  });
  agent.handlers.set('exec-kill', async (_agent, message) => {
    running.get(String(message.exec))?.kill('SIGKILL');
    return undefined;
  });
}
