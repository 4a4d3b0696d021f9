// Writes docs/api.md's error table from src/kernel/error-codes.ts (test/error-codes.test.ts fails when it differs).
import { readFile, writeFile } from 'node:fs/promises';
import { API_DOC, withErrorTable } from './error-table';

const doc = await readFile(API_DOC, 'utf8');
await writeFile(API_DOC, withErrorTable(doc));
console.log('wrote the error table of docs/api.md');
