import { expect } from 'vitest';
import { ValidationError } from '../../src/kernel/errors';

/** The ValidationError `fn` throws; fails the test when it throws nothing or something else. */
export function thrown(fn: () => unknown): ValidationError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ValidationError);
    return err as ValidationError;
  }
  throw new Error('expected a ValidationError');
}
