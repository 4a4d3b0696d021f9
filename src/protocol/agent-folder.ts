// The sandbox agent keeps its credential in DIR/.berth (src/agent/sandbox-agent-credential.ts).
// No share, extra file or sync may reach it: the server refuses such wiring, the agent refuses
// such paths.

export const AGENT_FOLDER = '.berth';

/** Whether a normalised path relative to the sandbox folder is the agent's folder or inside it. */
export function inAgentFolder(rel: string): boolean {
  return rel === AGENT_FOLDER || rel.startsWith(`${AGENT_FOLDER}/`);
}
