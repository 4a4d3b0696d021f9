// Small building blocks every page uses: the page frame, states, fields, tables, copying.
import type { CombinedError } from '@urql/core';
import { Fragment, type ReactNode, useEffect, useId, useRef, useState } from 'react';
import { type ErrorPart, errorMessage, errorParts } from '../api';

/** A page: its title in the tab and as the heading, which takes focus so readers announce it. */
export function Page({ title, actions, children }: { title: string; actions?: ReactNode; children: ReactNode }) {
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    document.title = `${title} · Berth`;
    heading.current?.focus({ preventScroll: true });
  }, [title]);
  return (
    <>
      <div className="page-head">
        <h1 ref={heading} tabIndex={-1}>
          {title}
        </h1>
        {actions ? <div className="actions">{actions}</div> : null}
      </div>
      {children}
    </>
  );
}

/** A part of a page under its heading (not a landmark: the tables in it are the named regions). */
export function Section({ title, children }: { title: string; children: ReactNode }) {
  return (
    <section>
      <h2>{title}</h2>
      {children}
    </section>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p className="muted" role="status">
      Loading {what}…
    </p>
  );
}

/** What went wrong (a query, a mutation, a form), announced; with a retry when there is one. */
export function Failure({ error, retry, what }: { error: CombinedError | Error | string; retry?: () => void; what?: string }) {
  const parts: ErrorPart[] = typeof error === 'string' ? [{ message: error }] : errorParts(error);
  return (
    <div className="failure" role="alert">
      <p>
        {what ? `Could not load ${what}: ` : null}
        {parts.map((part, i) => (
          <Fragment key={`${part.code}\u0000${part.message}`}>
            {i ? '; ' : null}
            {part.message}
            {part.code ? (
              <>
                {' '}
                (<code>{part.code}</code>)
              </>
            ) : null}
          </Fragment>
        ))}
      </p>
      {retry ? (
        <button type="button" onClick={retry}>
          Try again
        </button>
      ) : null}
    </div>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}

/** Shows what a query gives: loading, error (with retry), empty, or the content. */
export function QueryState<T>({
  what,
  result,
  retry,
  isEmpty,
  empty,
  children,
}: {
  what: string;
  result: { data?: T; error?: CombinedError; fetching: boolean };
  retry: () => void;
  isEmpty?: (data: T) => boolean;
  empty?: ReactNode;
  children: (data: T) => ReactNode;
}) {
  if (result.error && !result.data) return <Failure what={what} error={result.error} retry={retry} />;
  if (!result.data) return <Loading what={what} />;
  if (isEmpty?.(result.data)) return <Empty>{empty}</Empty>;
  return (
    <>
      {result.error ? <Failure what={what} error={result.error} retry={retry} /> : null}
      {children(result.data)}
    </>
  );
}

interface ControlProps {
  id: string;
  'aria-invalid': boolean | undefined;
  'aria-describedby': string | undefined;
}

/** A labelled control with its hint and the server's error for it right below. */
export function Field({
  label,
  hint,
  error,
  children,
}: {
  label: string;
  hint?: ReactNode;
  error?: string;
  children: (props: ControlProps) => ReactNode;
}) {
  const id = useId();
  const described = [hint ? `${id}-hint` : '', error ? `${id}-error` : ''].filter(Boolean).join(' ') || undefined;
  return (
    <div className={error ? 'field invalid' : 'field'}>
      <label htmlFor={id}>{label}</label>
      {children({ id, 'aria-invalid': error ? true : undefined, 'aria-describedby': described })}
      {hint ? (
        <small id={`${id}-hint`} className="hint">
          {hint}
        </small>
      ) : null}
      {error ? (
        <small id={`${id}-error`} className="error">
          {error}
        </small>
      ) : null}
    </div>
  );
}

/** A table in a frame that scrolls sideways on narrow screens instead of the page. */
export function Table({ label, head, children }: { label: string; head: string[]; children: ReactNode }) {
  return (
    // biome-ignore lint/a11y/noNoninteractiveTabindex: a scrolling region must be reachable by keyboard
    <section className="table-frame" aria-label={label} tabIndex={0}>
      <table>
        <thead>
          <tr>
            {head.map((h) => (
              <th key={h} scope="col">
                {h}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
    </section>
  );
}

/** Forward paging over cursors: the cursors of the pages before this one are kept to go back. */
export function usePager() {
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  return {
    after: cursors.at(-1) ?? null,
    page: cursors.length,
    next: (cursor: string | null | undefined) => cursor && setCursors((c) => [...c, cursor]),
    previous: () => setCursors((c) => (c.length > 1 ? c.slice(0, -1) : c)),
    reset: () => setCursors([null]),
  };
}

export function Pager({
  pager,
  hasNext,
  nextCursor,
}: {
  pager: ReturnType<typeof usePager>;
  hasNext: boolean;
  nextCursor?: string | null;
}) {
  if (pager.page === 1 && !hasNext) return null;
  return (
    <nav className="pager" aria-label="Pages">
      <button type="button" onClick={pager.previous} disabled={pager.page === 1}>
        Previous page
      </button>
      <span>Page {pager.page}</span>
      <button type="button" onClick={() => pager.next(nextCursor)} disabled={!hasNext}>
        Next page
      </button>
    </nav>
  );
}

/** A value shown in full with a button that copies it (`Copy <what>`). */
export function Copyable({ what, value, multiline }: { what: string; value: string; multiline?: boolean }) {
  const [copied, setCopied] = useState<string>();
  const field = useRef<HTMLInputElement & HTMLTextAreaElement>(null);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(value);
      setCopied('Copied');
    } catch {
      // No clipboard (an http:// page not on localhost): select it for the reader to copy.
      field.current?.select();
      setCopied('Selected: press Ctrl+C to copy');
    }
  };
  const props = { ref: field, readOnly: true, value, 'aria-label': what, onFocus: () => field.current?.select() };
  return (
    <div className="copyable">
      {multiline ? <textarea rows={2} {...props} /> : <input {...props} />}
      <button type="button" onClick={copy}>
        Copy {what.toLowerCase()}
      </button>
      <span role="status" className="muted">
        {copied}
      </span>
    </div>
  );
}

/** A secret shown once, at creation. */
export function ShownOnce({ title, children }: { title: string; children: ReactNode }) {
  const id = useId();
  return (
    <section className="shown-once" aria-labelledby={id}>
      <h3 id={id}>{title}</h3>
      <p>Shown only now: Berth keeps only a hash of it. Copy it somewhere safe.</p>
      {children}
    </section>
  );
}

/** A pair list (`<dl>`) of an item's fields. */
export function Fields({ items }: { items: [string, ReactNode][] }) {
  return (
    <dl className="fields">
      {items.map(([name, value]) => (
        <div key={name}>
          <dt>{name}</dt>
          <dd>{value === null || value === undefined || value === '' ? '–' : value}</dd>
        </div>
      ))}
    </dl>
  );
}

export function Labels({ labels }: { labels: Record<string, unknown> | null | undefined }) {
  const entries = Object.entries(labels ?? {});
  if (!entries.length) return <>–</>;
  return (
    <ul className="labels">
      {entries.map(([k, v]) => (
        <li key={k}>
          {k}={String(v)}
        </li>
      ))}
    </ul>
  );
}

export function StateBadge({ state }: { state: string }) {
  return <span className={`state state-${state}`}>{state}</span>;
}

/** Says so when a live feed stopped (the page still shows what it loaded). */
export function LiveNotice({ error }: { error: CombinedError | undefined }) {
  if (!error) return null;
  return (
    <p className="notice" role="status">
      Live updates stopped: {errorMessage(error)}. Reload the page to resume them.
    </p>
  );
}

type FormValues = Record<string, string | boolean>;

/** A form's values, with the props that bind a text control or a checkbox to one of them. */
export function useForm<T extends FormValues>(initial: T) {
  const [form, setForm] = useState(initial);
  return {
    form,
    reset: () => setForm(initial),
    text: (key: keyof T) => ({
      value: String(form[key]),
      onChange: (e: { target: { value: string } }) => setForm((f) => ({ ...f, [key]: e.target.value })),
    }),
    check: (key: keyof T) => ({
      checked: Boolean(form[key]),
      onChange: (e: { target: { checked: boolean } }) => setForm((f) => ({ ...f, [key]: e.target.checked })),
    }),
  };
}

/** A destructive action asked twice: the button, then the question with its confirmation. */
export function ConfirmAction({
  label,
  question,
  confirm,
  busy,
  onConfirm,
}: {
  label: string;
  question: string;
  confirm: string;
  busy?: boolean;
  onConfirm(): Promise<unknown>;
}) {
  const [asking, setAsking] = useState(false);
  const confirmButton = useRef<HTMLButtonElement>(null);
  // The button pressed is gone: the focus goes to the question's answer, not to the page's start.
  useEffect(() => {
    if (asking) confirmButton.current?.focus();
  }, [asking]);
  if (!asking) {
    return (
      <button type="button" className="danger" onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  }
  return (
    <>
      <span>{question}</span>
      <button
        ref={confirmButton}
        type="button"
        className="danger"
        disabled={busy}
        onClick={async () => {
          await onConfirm();
          setAsking(false);
        }}
      >
        {confirm}
      </button>
      <button type="button" onClick={() => setAsking(false)}>
        Cancel
      </button>
    </>
  );
}
