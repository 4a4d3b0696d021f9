// What the server and a node agent agree on (docs/agents.md, "Control channel").

/** The WebSocket a node agent opens with its node credential. */
export const NODE_CHANNEL_PATH = '/v1/nodes/channel';

/** The most slots one node agent may hold. */
export const MAX_SLOTS = 64;
