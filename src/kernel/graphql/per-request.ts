import type { Context } from '../../app/context';

/**
 * One value per request (its Context), made on first use: a DataLoader that batches what a list's
 * fields ask for into one query, and is gone with the request.
 */
export function perRequest<T extends object>(make: (ctx: Context) => T): (ctx: Context) => T {
  const made = new WeakMap<Context, T>();
  return (ctx) => {
    let value = made.get(ctx);
    if (!value) {
      value = make(ctx);
      made.set(ctx, value);
    }
    return value;
  };
}
