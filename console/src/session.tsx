// Who is signed in, and signing in and out. The token lives in this tab's session storage only:
// closing the tab or "Sign out" forgets it, and signing out closes the WebSocket.
import { createContext, useCallback, useContext, useEffect, useRef, useState } from 'react';
import { type Complete, complete } from './answers';
import { type Api, createApi, errorCode, errorMessage } from './api';
import { graphql } from './generated/gql';
import type { SessionViewerQuery } from './generated/gql/graphql';

const KEY = 'berth.token';

const ViewerQuery = graphql(`
  query SessionViewer {
    viewer { kind name admin organization { name } }
  }
`);

export type Viewer = Complete<SessionViewerQuery>['viewer'];

export interface Session {
  api: Api;
  viewer: Viewer;
  signOut(notice?: string): void;
}

const SessionContext = createContext<Session | null>(null);

export function useSession(): Session {
  const session = useContext(SessionContext);
  if (!session) throw new Error('useSession outside a signed-in console');
  return session;
}

export const SessionProvider = SessionContext.Provider;

/** Checks a token by asking Berth who it acts as; answers why not, for people, when refused. */
async function check(api: Api): Promise<{ viewer: Viewer } | { refused: string }> {
  const result = complete(await api.client.query(ViewerQuery, {}, { requestPolicy: 'network-only' }).toPromise());
  const code = errorCode(result.error);
  if (code === 'unauthorized') return { refused: 'Berth refused this token: it is unknown, expired or revoked.' };
  if (code === 'rate_limited') return { refused: `Too many failed sign-ins from this address. ${errorMessage(result.error)}` };
  if (result.error || !result.data) return { refused: `Could not sign in: ${errorMessage(result.error)}` };
  if (result.data.viewer.kind === 'sandbox') {
    return { refused: "This is a sandbox's own credential; sign in with a CLI token or an API key." };
  }
  return { viewer: result.data.viewer };
}

export function useSessionState() {
  const [session, setSession] = useState<Session | null>(null);
  const [notice, setNotice] = useState<string>();
  const [restoring, setRestoring] = useState(() => sessionStorage.getItem(KEY) !== null);
  const current = useRef<Session | null>(null);

  const signOut = useCallback((message?: string) => {
    current.current?.api.dispose();
    current.current = null;
    sessionStorage.removeItem(KEY);
    setSession(null);
    setNotice(message);
  }, []);

  const signIn = useCallback(
    async (token: string): Promise<string | undefined> => {
      const api: Api = createApi(token, (end) => {
        if (current.current?.api === api) signOut(`You were signed out: ${end.message}`);
      });
      const checked = await check(api);
      if ('refused' in checked) {
        api.dispose();
        return checked.refused;
      }
      sessionStorage.setItem(KEY, token);
      const next = { api, viewer: checked.viewer, signOut };
      current.current = next;
      setSession(next);
      setNotice(undefined);
      return undefined;
    },
    [signOut],
  );

  // A reload keeps the session of this tab: the stored token is checked again.
  const restored = useRef(false);
  useEffect(() => {
    if (restored.current) return;
    restored.current = true;
    const token = sessionStorage.getItem(KEY);
    if (!token) return;
    void signIn(token).then((refused) => {
      if (refused) signOut(refused);
      setRestoring(false);
    });
  }, [signIn, signOut]);

  return { session, notice, restoring, signIn };
}
