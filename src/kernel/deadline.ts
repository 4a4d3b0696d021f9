/** `work`'s outcome, or the error `late()` makes when `ms` pass first; the timer never outlives the race. */
export function beforeDeadline<T>(work: Promise<T>, ms: number, late: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(late()), ms);
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}
