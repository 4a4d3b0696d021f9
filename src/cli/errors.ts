/** A command that cannot do what was asked: its message is printed as `berth: <message>` and the exit code is 1. */
export class CommandError extends Error {}
