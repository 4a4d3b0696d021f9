// An environment's log (docs/console.md, "Log"): what its template's lifecycle commands printed,
// each command under a header naming it, followed live through the environmentLog subscription
// (what the log holds first, then each piece as it is stored) until the environment ends.
import { useLayoutEffect, useRef, useState } from 'react';
import { graphql } from '../generated/gql';
import { useEvents } from '../live';
import { Empty, Failure } from './ui';

const LogUpdates = graphql(`
  subscription EnvironmentLogUpdates($id: String!) {
    environmentLog(id: $id) { text cursor }
  }
`);

export function EnvironmentLog({ environment, live }: { environment: string; live: boolean }) {
  // undefined until the subscription's first part (what the log holds now) arrives.
  const [text, setText] = useState<string>();
  const box = useRef<HTMLPreElement>(null);
  // Whether the reader is at the end: new lines then keep it there.
  const following = useRef(true);
  // The cursor of the last part shown: a part delivered again (as urql may) is not shown twice.
  const shown = useRef(-1n);
  const error = useEvents(
    LogUpdates,
    { id: environment },
    ({ environmentLog: part }) => {
      const cursor = BigInt(part.cursor);
      if (cursor <= shown.current) return;
      shown.current = cursor;
      setText((now) => (now ?? '') + part.text);
    },
    {
      // The subscription starts again after a dropped connection, with the whole log.
      resync: () => {
        shown.current = -1n;
        setText(undefined);
      },
    },
  );
  // biome-ignore lint/correctness/useExhaustiveDependencies: it follows each change of the text
  useLayoutEffect(() => {
    const el = box.current;
    if (el && following.current) el.scrollTop = el.scrollHeight;
  }, [text]);
  if (error && text === undefined) return <Failure error={error} what="the log" />;
  if (text === undefined) return <p className="muted">Loading the log…</p>;
  if (!text) {
    return (
      <Empty>
        {live
          ? 'Nothing yet: what its lifecycle commands print shows here as they print it.'
          : 'Empty: its template ran no lifecycle commands, or they printed nothing.'}
      </Empty>
    );
  }
  return (
    <pre
      ref={box}
      className="log"
      // A live region of the kind for logs: new lines are announced, not the whole text again.
      role="log"
      aria-label="Log"
      // biome-ignore lint/a11y/noNoninteractiveTabindex: a scrolling region is reached by keyboard too
      tabIndex={0}
      onScroll={(e) => {
        const el = e.currentTarget;
        following.current = el.scrollTop + el.clientHeight >= el.scrollHeight - 4;
      }}
    >
      {text}
    </pre>
  );
}
