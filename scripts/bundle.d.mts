// Types of scripts/bundle.mjs, for the TypeScript that imports it (test/helpers/console-build.ts).
export declare const NODE_BUNDLE: {
  bundle: true;
  splitting: true;
  format: 'esm';
  platform: 'node';
  target: 'node20';
  packages: 'external';
};
export declare function newestMtime(root: string, paths: string[], skip?: string[]): number;
