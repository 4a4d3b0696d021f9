#!/usr/bin/env node
// The `berth` command: runs the TypeScript sources through tsx, in a checkout and after `npm install -g`.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/index.ts');
