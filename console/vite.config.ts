import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';
import react from '@vitejs/plugin-react';
import { defineConfig, type Plugin } from 'vite';

/**
 * Writes .br and .gz beside each text file of the build; Berth serves them to clients that take
 * them. From the files as written: in generateBundle a chunk's code may still hold placeholders
 * Vite fills in later (the preload helper of a lazily loaded chunk).
 */
function precompress(): Plugin {
  return {
    name: 'berth-precompress',
    apply: 'build',
    enforce: 'post',
    writeBundle(options, bundle) {
      const dir = options.dir ?? 'dist';
      for (const fileName of Object.keys(bundle)) {
        if (!/\.(?:js|css|html|svg|json)$/.test(fileName)) continue;
        const source = readFileSync(join(dir, fileName));
        writeFileSync(join(dir, `${fileName}.gz`), gzipSync(source, { level: 9 }));
        writeFileSync(join(dir, `${fileName}.br`), brotliCompressSync(source, { params: { [constants.BROTLI_PARAM_QUALITY]: 11 } }));
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
