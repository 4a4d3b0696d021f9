import { brotliCompressSync, constants, gzipSync } from 'node:zlib';
import react from '@vitejs/plugin-react';
import { defineConfig, type Plugin } from 'vite';

/** Writes .br and .gz beside each text file of the build; Berth serves them to clients that take them. */
function precompress(): Plugin {
  return {
    name: 'berth-precompress',
    apply: 'build',
    enforce: 'post',
    generateBundle(_options, bundle) {
      for (const [fileName, item] of Object.entries(bundle)) {
        if (!/\.(?:js|css|html|svg|json)$/.test(fileName)) continue;
        const source = Buffer.from(item.type === 'chunk' ? item.code : item.source);
        this.emitFile({ type: 'asset', fileName: `${fileName}.gz`, source: gzipSync(source, { level: 9 }) });
        this.emitFile({
          type: 'asset',
          fileName: `${fileName}.br`,
          source: brotliCompressSync(source, { params: { [constants.BROTLI_PARAM_QUALITY]: 11 } }),
        });
      }
    },
  };
}

// `npm run console:dev` serves the console with hot reload and sends the API to a Berth on :8080.
const berth = process.env.BERTH_URL ?? 'http://127.0.0.1:8080';

export default defineConfig({
  root: import.meta.dirname,
  plugins: [react(), precompress()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // No data: URLs: the Content-Security-Policy allows images and fonts only from files.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    // Brotli at its best quality takes a second or two, once per build: not worth a warning.
    rolldownOptions: { checks: { bundlerTimings: false } },
  },
  server: {
    proxy: {
      '/graphql': { target: berth, ws: true },
      '/v1': { target: berth },
    },
  },
});
