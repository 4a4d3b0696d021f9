import { expect } from 'vitest';
import { ValidationError } from '../../src/kernel/errors';

/**
 * The ValidationError `fn` throws; fails the test when it throws nothing or something else. `kind`
 * is the class as the code under test loaded it (a file that loads its modules again passes its own).
 */
export function thrown(fn: () => unknown, kind: typeof ValidationError = ValidationError): ValidationError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(kind);
    return err as ValidationError;
  }
  throw new Error('expected a ValidationError');
}
