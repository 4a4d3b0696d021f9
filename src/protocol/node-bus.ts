// Server → node messages (docs/agents.md, "Control channel") across instances. Any instance
// addresses any node: a message is published on the events bus topic `node:<id>`, and the instance
// holding that node's control channel forwards it as JSON. A question carries a `reply` topic; the
// node answers `{type: 'reply', reply, error?}` on its channel and the instance holding it publishes
// that there. The server's side of the protocol: agents never import it.
import { randomUUID } from 'node:crypto';
import { type Events, nodeTopicsOf } from '../platform/events';
import type { DistributiveOmit, ExecTopicEvent, NodeReply, ServerToNode, ToNode } from './node-channel';

/** What the bus carries to a node's channel: its messages, and `revoked` (the node was removed: the channel closes). */
export type NodeBusMessage = ServerToNode | { type: 'revoked' };

/** The node channel's topics, carrying the protocol's messages. */
export const nodeTopics = nodeTopicsOf<NodeBusMessage, NodeReply, ExecTopicEvent>();

/** A question for a node: a message its agent answers with a `reply` (askNode adds the topic). */
export type NodeQuestion = DistributiveOmit<ToNode<'prepare' | 'release'>, 'reply'>;

/**
 * A message for the node's agent (dispatched there by `type`). Dropped when the node is not
 * connected; straight to its channel when this instance holds it (Events.send).
 */
export async function sendToNode(deps: { events: Events }, nodeId: string, message: NodeBusMessage): Promise<void> {
  await deps.events.send(nodeTopics.node(nodeId), message);
}

export class NodeUnreachableError extends Error {}

/** The asking instance is stopping: the question is left unanswered, its work for the next start (not a failure of the node). */
export class QuestionAbandonedError extends Error {}

/** The node's work failed through the environment's own fault (a lifecycle command exited non-zero): its message is the environment's error as is. */
export class EnvironmentFaultError extends Error {}

/** How long a question goes unanswered before it is sent again. */
const RESEND_MS = 10_000;

/**
 * Sends `message` with a fresh `reply` topic and waits for the node's answer, sending it again
 * every RESEND_MS until then. Gives up (throws)
 * when `check` says the work is no longer wanted (the node lost, the environment moved on), which
 * it asks the database about every `pollMs` (not before the first send: the caller just read the
 * work's state, and a question to a lost node is only published to nobody), or after `timeoutMs`.
 */
export async function askNode(
  deps: { events: Events },
  nodeId: string,
  message: NodeQuestion,
  opts: { timeoutMs: number; pollMs?: number; check: () => Promise<string | null>; signal?: AbortSignal },
): Promise<NodeReply> {
  const reply = `node-reply:${randomUUID()}`;
  const answers = deps.events.subscribe(nodeTopics.nodeReply(reply)!)[Symbol.asyncIterator]();
  // Listening starts with the first next(), before the message goes out.
  const answer = answers.next();
  const deadline = Date.now() + opts.timeoutMs;
  let timer: NodeJS.Timeout | undefined;
  let onAbort = () => {};
  const abandoned = new Promise<'abandoned'>((resolve) => {
    onAbort = () => resolve('abandoned');
  });
  // Removed in `finally`: the signal lives as long as the instance, the question does not.
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    if (opts.signal?.aborted) throw new QuestionAbandonedError('this instance is stopping');
    const question = { ...message, reply };
    await sendToNode(deps, nodeId, question);
    let asked = Date.now();
    for (;;) {
      const tick = new Promise<'tick'>((resolve) => {
        timer = setTimeout(() => resolve('tick'), opts.pollMs ?? 1000);
      });
      const got = await Promise.race([answer, tick, abandoned]);
      clearTimeout(timer);
      if (got === 'abandoned') throw new QuestionAbandonedError('this instance is stopping');
      if (got !== 'tick') {
        if (got.done) throw new NodeUnreachableError('the events bus closed');
        const error = got.value.error;
        if (typeof error === 'string') throw got.value.fault === 'environment' ? new EnvironmentFaultError(error) : new Error(error);
        return got.value;
      }
      const problem = await opts.check();
      if (problem) throw new NodeUnreachableError(problem);
      if (Date.now() > deadline) throw new NodeUnreachableError(`no answer within ${Math.round(opts.timeoutMs / 1000)}s`);
      // A question sent while the node was reconnecting (its process restarted) was dropped: asked
      // again now and then. The node's work is idempotent and the same work asked twice runs once.
      if (Date.now() - asked >= RESEND_MS) {
        await sendToNode(deps, nodeId, question);
        asked = Date.now();
      }
    }
  } finally {
    clearTimeout(timer);
    opts.signal?.removeEventListener('abort', onAbort);
    await answers.return?.();
  }
}
