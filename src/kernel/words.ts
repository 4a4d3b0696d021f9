// Small helpers for the sentences Berth writes for people (why a lease waits, a quota's warnings).

/** `1 node`, `3 nodes`. */
export const plural = (n: number, one: string): string => `${n} ${one}${n === 1 ? '' : 's'}`;
