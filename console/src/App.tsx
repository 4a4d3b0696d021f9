import { Provider } from 'urql';
import { Link, Redirect, Route, Switch, useLocation } from 'wouter';
import { Loading, Page } from './components/ui';
import { ArtifactPage } from './pages/Artifact';
import { ArtifactsPage } from './pages/Artifacts';
import { AuditPage } from './pages/Audit';
import { EnvironmentPage } from './pages/Environment';
import { EnvironmentsPage } from './pages/Environments';
import { NewEnvironmentPage } from './pages/NewEnvironment';
import { NodesPage } from './pages/Nodes';
import { QuotasPage } from './pages/Quotas';
import { SandboxPage } from './pages/Sandbox';
import { SandboxesPage } from './pages/Sandboxes';
import { SettingsPage } from './pages/Settings';
import { SignInPage } from './pages/SignIn';
import { SnapshotPage } from './pages/Snapshot';
import { SnapshotsPage } from './pages/Snapshots';
import { TemplatePage } from './pages/Template';
import { TemplatesPage } from './pages/Templates';
import { SessionProvider, useSession, useSessionState } from './session';

export function App() {
  const { session, notice, restoring, signIn } = useSessionState();
  if (restoring) return <Loading what="your session" />;
  if (!session) return <SignInPage onSignIn={signIn} notice={notice} />;
  return (
    <SessionProvider value={session}>
      <Provider value={session.api.client}>
        <Shell />
      </Provider>
    </SessionProvider>
  );
}

const NAV: { href: string; label: string; admin?: boolean }[] = [
  { href: '/environments', label: 'Environments' },
  { href: '/templates', label: 'Templates' },
  { href: '/sandboxes', label: 'Sandboxes' },
  { href: '/nodes', label: 'Nodes' },
  { href: '/artifacts', label: 'Artifacts' },
  { href: '/snapshots', label: 'Snapshots' },
  { href: '/settings', label: 'Settings' },
  { href: '/quotas', label: 'Quotas', admin: true },
  { href: '/audit', label: 'Audit', admin: true },
];

function Shell() {
  const { viewer, signOut } = useSession();
  const [location] = useLocation();
  return (
    <>
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="top">
        <Link href="/environments" className="brand">
          Berth
        </Link>
        <nav aria-label="Main">
          <ul>
            {NAV.filter((item) => !item.admin || viewer.admin).map((item) => (
              <li key={item.href}>
                <Link href={item.href} aria-current={location.startsWith(item.href) ? 'page' : undefined}>
                  {item.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div className="who">
          <span>
            {viewer.name}
            {viewer.admin ? ' (admin)' : ''} · {viewer.organization.name}
          </span>
          <button type="button" onClick={() => signOut()}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main">
        <Switch>
          <Route path="/">
            <Redirect to="/environments" replace />
          </Route>
          <Route path="/environments" component={EnvironmentsPage} />
          <Route path="/environments/new" component={NewEnvironmentPage} />
          <Route path="/environments/:id">{(params) => <EnvironmentPage id={decode(params.id)} />}</Route>
          <Route path="/templates" component={TemplatesPage} />
          <Route path="/templates/:name">{(params) => <TemplatePage name={decode(params.name)} />}</Route>
          <Route path="/sandboxes" component={SandboxesPage} />
          <Route path="/sandboxes/:id">{(params) => <SandboxPage id={decode(params.id)} />}</Route>
          <Route path="/nodes" component={NodesPage} />
          <Route path="/artifacts" component={ArtifactsPage} />
          <Route path="/artifacts/:id">{(params) => <ArtifactPage id={decode(params.id)} />}</Route>
          <Route path="/snapshots" component={SnapshotsPage} />
          <Route path="/snapshots/:project/*">
            {(params) => <SnapshotPage project={decode(params.project)} snapshotKey={decode(params['*'])} />}
          </Route>
          <Route path="/settings" component={SettingsPage} />
          <Route path="/quotas">{viewer.admin ? <QuotasPage /> : <AdminsOnly what="manage quotas" />}</Route>
          <Route path="/quotas/:template">
            {(params) => (viewer.admin ? <QuotasPage template={decode(params.template)} /> : <AdminsOnly what="manage quotas" />)}
          </Route>
          <Route path="/audit">{viewer.admin ? <AuditPage /> : <AdminsOnly what="read the audit log" />}</Route>
          <Route>
            <Page title="Not found">
              <p>
                There is no such page. <Link href="/environments">Go to the environments</Link>.
              </p>
            </Page>
          </Route>
        </Switch>
      </main>
    </>
  );
}

function AdminsOnly({ what }: { what: string }) {
  return (
    <Page title="Admins only">
      <p>Only admins of the organization {what}.</p>
    </Page>
  );
}

/** Route parameters arrive as they are in the address bar (wouter leaves `%2F` and the like). */
function decode(param: string | undefined): string {
  try {
    return decodeURIComponent(param ?? '');
  } catch {
    return param ?? '';
  }
}
