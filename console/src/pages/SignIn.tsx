import { type FormEvent, useEffect, useState } from 'react';
import { Field } from '../components/ui';

export function SignInPage({ onSignIn, notice }: { onSignIn(token: string): Promise<string | undefined>; notice?: string }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    document.title = 'Sign in · Berth';
  }, []);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    const value = token.trim();
    if (!value) {
      setError('Paste a CLI token (bct_…) or an API key (bak_…).');
      return;
    }
    setBusy(true);
    setError(undefined);
    const refused = await onSignIn(value);
    setBusy(false);
    if (refused) setError(refused);
  };

  return (
    <main id="main" className="sign-in">
      <h1>Berth</h1>
      <p className="muted">Build environment leasing: sign in with a CLI token or an API key of your organization.</p>
      {notice ? (
        <p className="notice" role="status">
          {notice}
        </p>
      ) : null}
      <form onSubmit={submit} noValidate>
        <Field
          label="Token"
          error={error}
          hint="It stays in this browser tab only (session storage) and is forgotten when you sign out or close the tab."
        >
          {(props) => (
            <input
              {...props}
              type="password"
              autoComplete="off"
              spellCheck={false}
              value={token}
              onChange={(e) => setToken(e.target.value)}
              // biome-ignore lint/a11y/noAutofocus: the one field of the page
              autoFocus
            />
          )}
        </Field>
        {error ? (
          <p role="alert" className="sr-only">
            {error}
          </p>
        ) : null}
        <button type="submit" className="primary" disabled={busy} aria-busy={busy}>
          Sign in
        </button>
      </form>
      <p className="muted small">
        An admin token is printed on Berth's first start; <code>POST /v1/tokens</code> makes more, and so does Settings here.
      </p>
    </main>
  );
}
