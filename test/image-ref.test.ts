import { describe, expect, it } from 'vitest';
import { normalizeImage, parseImageRef } from '../src/kernel/image-ref';
import { thrown } from './helpers/thrown';

const DIGEST = `sha256:${'0123456789abcdef'.repeat(4)}`;

describe('parseImageRef', () => {
  it('splits and normalises as Docker does', () => {
    expect(parseImageRef('node:20')).toEqual({
      domain: 'docker.io',
      path: 'library/node',
      tag: '20',
      reference: 'docker.io/library/node:20',
    });
    expect(parseImageRef('busybox')).toEqual({
      domain: 'docker.io',
      path: 'library/busybox',
      tag: 'latest',
      reference: 'docker.io/library/busybox:latest',
    });
    expect(parseImageRef(`busybox@${DIGEST}`)).toEqual({
      domain: 'docker.io',
      path: 'library/busybox',
      digest: DIGEST,
      reference: `docker.io/library/busybox@${DIGEST}`,
    });
    expect(parseImageRef('localhost:5000/a/b:c')).toMatchObject({ domain: 'localhost:5000', path: 'a/b', tag: 'c' });
    expect(parseImageRef('[::1]:5000/ci:1')).toMatchObject({ domain: '[::1]:5000', path: 'ci', tag: '1' });
  });

  const normal: [string, string][] = [
    ['node:20', 'docker.io/library/node:20'],
    ['busybox', 'docker.io/library/busybox:latest'],
    ['docker.io/library/node:20-bookworm', 'docker.io/library/node:20-bookworm'],
    ['docker.io/node:20', 'docker.io/library/node:20'],
    ['index.docker.io/node', 'docker.io/library/node:latest'],
    ['library/node', 'docker.io/library/node:latest'],
    ['user/repo:TAG_1.x', 'docker.io/user/repo:TAG_1.x'],
    ['localhost/ci:3', 'localhost/ci:3'],
    ['localhost:5000/ci', 'localhost:5000/ci:latest'],
    ['registry.example.com/a/b/c', 'registry.example.com/a/b/c:latest'],
    ['Registry.Example.com/ci:1', 'Registry.Example.com/ci:1'],
    ['my-registry:8443/x__y/a.b-c', 'my-registry:8443/x__y/a.b-c:latest'],
    ['a---b', 'docker.io/library/a---b:latest'],
    [`node:20@${DIGEST}`, `docker.io/library/node:20@${DIGEST}`],
    ['localhost', 'docker.io/library/localhost:latest'],
    [`x:${'t'.repeat(128)}`, `docker.io/library/x:${'t'.repeat(128)}`],
  ];
  it.each(normal)('%s is %s', (text, ref) => {
    expect(normalizeImage(text)).toBe(ref);
    expect(normalizeImage(ref)).toBe(ref);
  });

  const bad: [string, RegExp][] = [
    ['', /must not be empty/],
    ['Node:20', /must be lowercase/],
    ['docker.io/Library/node', /must be lowercase/],
    ['node:', /invalid tag/],
    ['node:.x', /invalid tag/],
    ['node:-x', /invalid tag/],
    [`node:${'t'.repeat(129)}`, /invalid tag/],
    ['node@sha256:abc', /digest/],
    [`node@sha512:${'a'.repeat(64)}`, /digest/],
    [`node@sha256:${'A'.repeat(64)}`, /digest/],
    ['node@', /digest/],
    ['/node', /is not an image reference/],
    ['node/', /is not an image reference/],
    ['a//b', /is not an image reference/],
    ['_node', /is not an image reference/],
    ['node_', /is not an image reference/],
    ['a...b', /is not an image reference/],
    ['no de', /is not an image reference/],
    ['http://x/y', /is not an image reference/],
    ['-bad.host/x', /is not an image reference/],
    ['host.:5000/x', /is not an image reference/],
    [':tag', /is not an image reference/],
    ['a'.repeat(64).replace(/a/g, 'f'), /64-digit hexadecimal/],
    [`a/${'b'.repeat(254)}`, /longer than 255 characters/],
    [`${'b'.repeat(250)}:1`, /names a repository longer than 255 characters/],
  ];
  it.each(bad)('refuses %j, naming the field', (text, problem) => {
    const err = thrown(() => parseImageRef(text, 'templates[0].image'));
    expect(err.message).toMatch(/^templates\[0\]\.image: /);
    expect(err.message).toMatch(problem);
    expect(err.field).toBe('templates[0].image');
  });

  it('refuses what is not a string', () => {
    expect(thrown(() => parseImageRef(3 as unknown as string)).message).toMatch(/^image: must be an image reference such as/);
  });
});
