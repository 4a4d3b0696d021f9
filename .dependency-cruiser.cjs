// The layer rules of ARCHITECTURE.md ("Layers"), checked by `npm run lint` (depcruise). Each rule
// holds for the code today; what breaks one today is listed in KNOWN below with the step of issue 21
// that removes it, so the rule already refuses every new back-edge.

/** Platform: database, blob stores, crypto, the event bus, the clock (and the generated Prisma client). */
const PLATFORM = '^src/platform/|^src/generated/';
/** Kernel: what every module shares (errors, access checks, paging, validators, the GraphQL builder). */
const KERNEL = '^src/kernel/';
/** Protocols: what the server and the agents say to each other. */
const PROTOCOL = '^src/protocol/';
/** The node runtime: containers, envd, folder sync; run by `berth node` (the built-in node too). */
const RUNTIME = '^src/(node|dataplane)/';
/** Domain modules: one folder per domain (service, jobs, GraphQL types). */
const MODULES = '^src/modules/';
/** Edges: what speaks a transport (REST, GraphQL, WebSocket channels, the console's files). */
const EDGES = '^src/edges/';
/** The composition root: builds Deps, serves them, runs the jobs. */
const APP = '^src/app/';
/** What the composition hands every layer: the shapes of Deps/Context and of the configuration. */
const APP_SHAPES = '^src/app/(context|config)\\.ts$';
/** Clients: the `berth` command and the agents. */
const CLIENTS = '^src/(cli|agent)/';

const rule = (name, comment, from, to) => ({ name, comment, severity: 'error', from, to });

/** Known violations: [rule, from, to, the issue-21 step that removes it]. */
const KNOWN = [];

module.exports = {
  forbidden: [
    rule(
      'platform-only-platform',
      'the platform imports nothing of Berth but itself',
      { path: PLATFORM },
      { path: '^src/', pathNot: PLATFORM },
    ),
    rule(
      'kernel-only-platform',
      'the kernel imports only itself, the platform and the shapes of Deps/Context',
      { path: KERNEL },
      { path: '^src/', pathNot: `${PLATFORM}|${KERNEL}|${APP_SHAPES}` },
    ),
    rule(
      'protocol-below-modules',
      'protocols are what both ends import: they import no module, edge, app or client',
      { path: PROTOCOL },
      { path: `${MODULES}|${EDGES}|${APP}|${CLIENTS}|^src/observability/` },
    ),
    rule(
      'runtime-below-modules',
      'the node runtime runs on nodes without the server: it imports no module, edge, app or client',
      { path: RUNTIME },
      { path: `${MODULES}|${EDGES}|${APP}|${CLIENTS}` },
    ),
    rule(
      'server-not-node',
      'the API server never does a node\'s work (docs/agents.md, "The built-in node"): it holds no container engine and runs no file operation of the node runtime; of it, only its types and the command\'s plain shapes',
      { path: `${MODULES}|${EDGES}|${APP}|^src/observability/` },
      {
        path: `^src/node/(?!command\\.ts$)|^src/dataplane/(?!ws-bridge\\.ts$|relay-mux\\.ts$)|dockerode`,
        dependencyTypesNot: ['type-only'],
      },
    ),
    rule(
      'modules-not-edges',
      'modules are called by the edges and the app, never the other way round; nor do they import clients',
      { path: MODULES },
      { path: `${EDGES}|${CLIENTS}|${APP}`, pathNot: APP_SHAPES },
    ),
    rule(
      'module-through-index',
      "another module is reached through its index (GraphQL types may name another module's types through its graphql.ts)",
      { path: '^src/modules/([^/]+)/' },
      {
        path: '^src/modules/([^/]+)/',
        pathNot: ['^src/modules/$1/', '^src/modules/[^/]+/index\\.ts$', '^src/modules/[^/]+/graphql\\.ts$'],
      },
    ),
    rule(
      'nodes-report-through-ends',
      'the node side ends environments through deps.ends (src/kernel/environment-ends.ts): the nodes module imports nothing of the environments module, which places work on nodes',
      { path: '^src/modules/nodes/', pathNot: '^src/modules/nodes/graphql\\.ts$' },
      { path: '^src/modules/environments/' },
    ),
    rule(
      'edges-through-index',
      "the edges reach a module through its index; only the schema's assembly imports each module's GraphQL types",
      { path: `${EDGES}|${APP}|^src/observability/`, pathNot: '^src/edges/schema/index\\.ts$' },
      { path: MODULES, pathNot: '^src/modules/[^/]+/index\\.ts$' },
    ),
    rule(
      'rest-not-graphql',
      'REST and GraphQL share only src/edges/http/ and src/edges/schema/',
      { path: '^src/edges/rest/' },
      { path: '^src/edges/graphql/' },
    ),
    rule(
      'graphql-not-rest',
      'REST and GraphQL share only src/edges/http/ and src/edges/schema/',
      { path: '^src/edges/(graphql|schema)/' },
      { path: '^src/edges/rest/' },
    ),
    rule(
      'http-not-transports',
      'src/edges/http/ is what every request passes first: it knows no route table, no GraphQL',
      { path: '^src/edges/http/' },
      { path: '^src/edges/(rest|graphql|schema|channels)/' },
    ),
    rule(
      'clients-not-server',
      'the berth command and the agents are clients: they speak HTTP and the protocols, not the server code',
      { path: CLIENTS, pathNot: '^src/cli/operator\\.ts$' },
      { path: `${MODULES}|${EDGES}|${APP}` },
    ),
    rule(
      'operator-through-app',
      "the operator's commands run the server's code on the database through src/app/operator.ts only",
      { path: '^src/cli/operator\\.ts$' },
      { path: `${MODULES}|${EDGES}` },
    ),
    rule(
      'console-only-kernel',
      'the web console is a client of the GraphQL API: of src/ it imports only src/kernel/ (names and rules it shows)',
      { path: '^console/' },
      { path: '^src/', pathNot: KERNEL },
    ),
    // Type-only cycles are harmless (Context names the types of what it carries), and so are those closed
    // by a dynamic import(); a cycle of static runtime imports decides evaluation order by accident.
    rule(
      'no-circular',
      'no cycle of runtime imports',
      {},
      { circular: true, viaOnly: { dependencyTypesNot: ['type-only', 'dynamic-import'] } },
    ),
  ],
  options: {
    tsConfig: { fileName: 'tsconfig.json' },
    // Type-only imports count: a layer that names another's types depends on it.
    tsPreCompilationDeps: true,
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^src/generated/' },
    knownViolations: KNOWN.map(([name, from, to]) => ({ type: 'dependency', from, to, rule: { severity: 'error', name } })),
  },
};
