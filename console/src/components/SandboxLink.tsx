// A sandbox shown by its name, linked to its page. Environments carry only the sandbox's id; the
// names come from one query that every link on a page shares (urql answers them from one request).
import { useQuery } from 'urql';
import { Link } from 'wouter';
import { graphql } from '../generated/gql';

const SandboxNames = graphql(`
  query SandboxNames {
    sandboxes(removed: true) {
      sandbox { id name }
    }
  }
`);

export function SandboxLink({ id }: { id: string }) {
  // Cached, and asked again in the background on each page, so a sandbox registered since is named too.
  const [{ data }] = useQuery({ query: SandboxNames, requestPolicy: 'cache-and-network' });
  const name = data?.sandboxes?.find((s) => s.sandbox.id === id)?.sandbox.name;
  return (
    <Link href={`/sandboxes/${id}`} title={id}>
      {name ?? id}
    </Link>
  );
}
