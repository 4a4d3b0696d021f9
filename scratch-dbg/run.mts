import { mkdir, mkdtemp, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { echoServer, echoThrough, spawnNode, startBerth } from '../test/helpers/processes.ts';

const base = await mkdtemp(join(tmpdir(), 'sbdbg-'));
const echo = await echoServer();
await writeFile(
  join(base, 't.json'),
  JSON.stringify({
    pools: [{ name: 'dev', hotNodes: 2, maxQueued: 10 }],
    templates: [
      {
        name: 'dev',
        pool: 'dev',
        startMs: 50,
        idle: '30m',
        hard: '1h',
        shares: [
          { name: 'src', direction: 'in', envPath: '/workspace/src' },
          { name: 'out', direction: 'out', envPath: '/workspace/out' },
        ],
        services: [{ service: 'echo', target: `127.0.0.1:${echo.port}` }],
      },
    ],
  }),
);
const T = 'bct_test-bootstrap-token-0123456789';
const b = await startBerth({ DATA_DIR: join(base, 'data'), BOOTSTRAP_TOKEN: T, TEMPLATES_FILE: join(base, 't.json'), BERTH_TEST_LOG: '' });
const h = { authorization: `Bearer ${T}`, 'content-type': 'application/json' };
const reg = await (await fetch(`${b.url}/v1/sandboxes`, { method: 'POST', headers: h, body: JSON.stringify({ name: 'lap' }) })).json();
const dir = join(base, 'sb');
await mkdir(join(dir, 'app'), { recursive: true });
await writeFile(join(dir, 'app', 'a.txt'), 'hi');
const agent = spawnNode(['bin/berth.js', 'agent', '--server', b.url, '--dir', dir, '--join', reg.key], {});
await agent.waitFor(/connected/);
const env = await (
  await fetch(`${b.url}/v1/environments`, {
    method: 'POST',
    headers: h,
    body: JSON.stringify({ template: 'dev', sandbox: 'lap', shares: { src: 'app' } }),
  })
).json();
console.log(JSON.stringify(env.environment.exports));
await new Promise((r) => setTimeout(r, 4000));
console.log('AGENT:', agent.output());
console.log('SERVER:', b.output().slice(-3000));
try {
  console.log(await readdir(join(base, 'data', 'workspaces', env.environment.id), { recursive: true }));
} catch (e) {
  console.log(e.message);
}
const port = Number(env.environment.exports[0].listen.split(':')[1]);
console.log(
  'echo:',
  (await Promise.race([echoThrough(port, Buffer.from('ping')), new Promise((r) => setTimeout(() => r('timeout'), 3000))]))?.toString(),
);
await agent.kill();
await b.kill();
await echo.close();
process.exit(0);
