/** The longest part of a caller's value an error message repeats. */
const SHOWN = 100;

/**
 * A value the caller sent, as an error message shows it: quoted (control characters escaped),
 * and cut after SHOWN characters so that a huge value does not make a huge answer.
 */
export function show(text: string): string {
  return JSON.stringify(text.length > SHOWN ? `${text.slice(0, SHOWN)}…` : text);
}
