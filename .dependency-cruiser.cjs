// The layer rules of ARCHITECTURE.md ("Layers"), checked by `npm run lint` (depcruise). Each rule
// holds for the code today; what breaks one today is listed in KNOWN below with the step of issue 21
// that removes it, so the rule already refuses every new back-edge.

/** Platform: depends on nothing of Berth but itself (and the generated Prisma client, the package's paths). */
const PLATFORM = '^src/(db|store|crypto)/|^src/(events|clock|paths)\\.ts$|^src/generated/';
/** Edges: what speaks a transport. */
const EDGES = '^src/(rest|graphql|http|schema)/|^src/(server|console)\\.ts$';
/** Clients: the `berth` command and the agents. */
const CLIENTS = '^src/(cli|agent)/';
/** The server's domain: rules and jobs. */
const SERVER = '^src/(services|scheduler)/';

const rule = (name, comment, from, to) => ({ name, comment, severity: 'error', from, to });

/** Known violations: [rule, from, to, the issue-21 step that removes it]. */
const KNOWN = [
  // Clients share validators with the server: issue 21 "kernel" step moves them to src/kernel/.
  ['clients-not-server', 'src/cli/env.ts', 'src/services/durations.ts', 'kernel: the duration grammar moves to src/kernel/'],
  ['clients-not-server', 'src/cli/options.ts', 'src/services/durations.ts', 'kernel: the duration grammar moves to src/kernel/'],
  ['clients-not-server', 'src/agent/node-agent.ts', 'src/services/image-ref.ts', 'kernel: image references move to src/kernel/'],
  ['clients-not-server', 'src/agent/node-agent.ts', 'src/services/sync-rules.ts', 'kernel: sync rules move to src/kernel/'],
  // What server and agents both speak: issue 21 "protocol" step moves it to src/protocol/.
  [
    'clients-not-server',
    'src/agent/node-agent.ts',
    'src/services/snapshot-archive.ts',
    'protocol: the snapshot archive format moves to src/protocol/',
  ],
  ['clients-not-server', 'src/agent/sandbox-agent.ts', 'src/services/sandbox-wiring.ts', 'protocol: the sandbox config schema (zod)'],
  ['clients-not-server', 'src/agent/sandbox-agent.ts', 'src/services/agent-folder.ts', 'protocol: the agent folder layout'],
  ['clients-not-server', 'src/agent/sandbox-agent-credential.ts', 'src/services/agent-folder.ts', 'protocol: the agent folder layout'],
  ['clients-not-server', 'src/agent/confine.ts', 'src/services/agent-folder.ts', 'protocol: the agent folder layout'],
  // Operator commands run the server's code on the database itself (no server may be running):
  // issue 21 "app" step gives them one entry in src/app/ (lazily imported), not services one by one.
  ['clients-not-server', 'src/cli/operator.ts', 'src/services/errors.ts', 'app: operator commands through src/app/'],
  ['clients-not-server', 'src/cli/operator.ts', 'src/services/org-limits.ts', 'app: operator commands through src/app/'],
  ['clients-not-server', 'src/cli/operator.ts', 'src/services/organizations.ts', 'app: operator commands through src/app/'],
  ['clients-not-server', 'src/cli/operator.ts', 'src/services/sizes.ts', 'app: operator commands through src/app/'],
  // The console is a client of the GraphQL API; it shares the server's lists of names: issue 21
  // "kernel" step moves the audit actions and webhook events to src/kernel/.
  ['console-only-kernel', 'console/src/pages/Audit.tsx', 'src/services/event-names.ts', 'kernel: the event names move to src/kernel/'],
  [
    'console-only-kernel',
    'console/src/pages/SettingsWebhooks.tsx',
    'src/services/event-names.ts',
    'kernel: the event names move to src/kernel/',
  ],
];

/** Known cycles (type-only: Context names the types of what it carries): issue 21 "app" step moves Context to src/app/. */
const KNOWN_CYCLES = [
  ['src/context.ts', ['src/scheduler/background.ts', 'src/context.ts']],
  ['src/context.ts', ['src/services/credential-cache.ts', 'src/context.ts']],
];

module.exports = {
  forbidden: [
    rule(
      'platform-only-platform',
      'db, store, crypto, events and clock import nothing of Berth but platform: no edge, client, service or job',
      { path: PLATFORM },
      { path: '^src/', pathNot: PLATFORM },
    ),
    rule(
      'kernel-only-platform',
      'src/kernel/ (error codes, shared rules) imports only itself and platform',
      { path: '^src/kernel/' },
      { path: '^src/', pathNot: `${PLATFORM}|^src/kernel/` },
    ),
    rule(
      'server-not-edges',
      'services and jobs are called by the edges, never the other way round; nor do they import clients',
      { path: SERVER },
      { path: `${EDGES}|${CLIENTS}` },
    ),
    rule(
      'edges-not-each-other',
      'REST and GraphQL share only src/http/ and what Context carries',
      { path: '^src/rest/' },
      { path: '^src/graphql/' },
    ),
    rule(
      'graphql-not-rest',
      'REST and GraphQL share only src/http/ and what Context carries',
      { path: '^src/(graphql|schema)/' },
      { path: '^src/rest/' },
    ),
    rule(
      'http-not-transports',
      'src/http/ is what every request passes first: it knows no route table, no GraphQL',
      { path: '^src/http/' },
      { path: '^src/(rest|graphql|schema)/' },
    ),
    rule(
      'clients-not-server',
      'the berth command and the agents are clients: they speak HTTP, not the server code',
      { path: CLIENTS },
      { path: '^src/(services|scheduler|rest|graphql|schema|http)/' },
    ),
    rule(
      'console-only-kernel',
      'the web console is a client of the GraphQL API: of src/ it imports only src/kernel/ (names and rules it shows)',
      { path: '^console/' },
      { path: '^src/', pathNot: '^src/kernel/' },
    ),
    rule('no-circular', 'no import cycles', {}, { circular: true }),
  ],
  options: {
    tsConfig: { fileName: 'tsconfig.json' },
    // Type-only imports count: a layer that names another's types depends on it.
    tsPreCompilationDeps: true,
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^src/generated/' },
    knownViolations: [
      ...KNOWN.map(([name, from, to]) => ({ type: 'dependency', from, to, rule: { severity: 'error', name } })),
      ...KNOWN_CYCLES.map(([from, cycle]) => ({
        type: 'cycle',
        from,
        to: cycle[0],
        cycle: cycle.map((name) => ({ name, dependencyTypes: [] })),
        rule: { severity: 'error', name: 'no-circular' },
      })),
    ],
  },
};
