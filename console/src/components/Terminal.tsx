// The environment's shell in the page (docs/console.md, "Terminal"): xterm.js on the session API
// (docs/agents.md, "Sessions"), loaded only when opened. Its text is readable by assistive
// technology (xterm's screen-reader mode keeps an accessible copy of the rows), and the keyboard
// goes to the shell: Tab and Ctrl-C included, so Escape then Tab leaves the terminal.
import { FitAddon } from '@xterm/addon-fit';
import { Terminal as XTerm } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'react';

const PROTOCOL = 'berth.exec.v1';

/** A new shell's session URL, or with `session` that running session's (to attach to it again). */
export function sessionUrl(
  environment: string,
  size: { rows: number; cols: number },
  location: Location = window.location,
  session?: string,
): string {
  const base = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/environments/${encodeURIComponent(environment)}`;
  if (session) return `${base}/sessions/${encodeURIComponent(session)}`;
  const query = new URLSearchParams({ tty: '1', rows: String(size.rows), cols: String(size.cols) });
  return `${base}/exec?${query}`;
}

/** Waits between attempts to attach again after a drop: doubling from the first, at most the second. */
const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 5000;

/** Whether the session still runs (false: it ended; undefined: the server could not be asked). */
async function stillRuns(environment: string, session: string, token: string): Promise<boolean | undefined> {
  try {
    const res = await fetch(`/v1/environments/${encodeURIComponent(environment)}/sessions`, {
      headers: { authorization: `Bearer ${token}` },
    });
    if (!res.ok) return res.status >= 500 ? undefined : false;
    const body = (await res.json()) as { sessions: { id: string }[] };
    return body.sessions.some((s) => s.id === session);
  } catch {
    return undefined;
  }
}

/** What xterm's <style> elements become while a terminal is open (see adoptStyles). */
const STYLE_TAG = 'berth-terminal-style';
let patched = 0;
let createElement: typeof document.createElement | undefined;

/**
 * xterm writes its layout into <style> elements, which this page's Content-Security-Policy refuses
 * (no inline styles). While a terminal is open, the <style> elements the page makes are inert
 * elements instead, and their text is applied as constructed style sheets, which the policy allows.
 */
function adoptStyles(root: HTMLElement): () => void {
  if (patched++ === 0) {
    createElement = document.createElement;
    const original = createElement;
    document.createElement = ((tag: string, options?: ElementCreationOptions) =>
      original.call(document, tag.toLowerCase() === 'style' ? STYLE_TAG : tag, options)) as typeof document.createElement;
  }
  const sheets = new Map<Element, CSSStyleSheet>();
  const sync = () => {
    for (const element of root.querySelectorAll(STYLE_TAG)) {
      let sheet = sheets.get(element);
      if (!sheet) {
        sheet = new CSSStyleSheet();
        sheets.set(element, sheet);
        document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
      }
      sheet.replaceSync(element.textContent ?? '');
    }
  };
  const observer = new MutationObserver(sync);
  observer.observe(root, { subtree: true, childList: true, characterData: true });
  sync();
  return () => {
    observer.disconnect();
    const mine = new Set(sheets.values());
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => !mine.has(s));
    if (--patched === 0 && createElement) document.createElement = createElement;
  };
}

export default function Terminal({
  environment,
  token,
  session,
  onEnd,
  leave,
}: {
  environment: string;
  token: string;
  /** A running session to attach to, instead of a new shell. */
  session?: string;
  onEnd: (why: string) => void;
  /** Set when the terminal closes: the shell is left running (else it ends). */
  leave?: { current: boolean };
}) {
  const box = useRef<HTMLElement>(null);
  const [status, setStatus] = useState('Connecting…');
  useEffect(() => {
    const element = box.current;
    if (!element) return;
    const unstyle = adoptStyles(element);
    const term = new XTerm({ screenReaderMode: true, cursorBlink: true, fontSize: 14, rows: 24, cols: 80 });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(element);
    fit.fit();
    const encoder = new TextEncoder();
    let ended = false;
    let sessionId = session;
    // Output bytes shown so far: the replay after a drop starts earlier, and that much of it is skipped.
    let shown = 0;
    let skip = 0;
    let wait = RETRY_FIRST_MS;
    let retry: ReturnType<typeof setTimeout> | undefined;
    let ws: WebSocket;
    const end = (why: string) => {
      if (ended) return;
      ended = true;
      setStatus(why);
      onEnd(why);
    };
    const connect = () => {
      const socket = new WebSocket(sessionUrl(environment, { rows: term.rows, cols: term.cols }, window.location, sessionId), [
        PROTOCOL,
        `berth.bearer.${token}`,
      ]);
      ws = socket;
      socket.binaryType = 'arraybuffer';
      socket.onopen = () => {
        wait = RETRY_FIRST_MS;
        setStatus('Connected: the keyboard goes to the shell (Escape, then Tab, leaves it).');
        // Attached again: the terminal may have another size than the session's.
        if (sessionId) socket.send(JSON.stringify({ type: 'resize', rows: term.rows, cols: term.cols }));
        term.focus();
      };
      socket.onmessage = (event: MessageEvent<ArrayBuffer | string>) => {
        if (typeof event.data !== 'string') {
          let bytes = new Uint8Array(event.data, 1);
          if (skip > 0) {
            const dropped = Math.min(skip, bytes.length);
            skip -= dropped;
            bytes = bytes.subarray(dropped);
          }
          shown += bytes.length;
          if (bytes.length) term.write(bytes);
          return;
        }
        const message = JSON.parse(event.data) as { type: string; exitCode?: number; error?: string; session?: string; offset?: number };
        if (message.type === 'session') {
          sessionId = message.session;
          skip = Math.max(0, shown - (message.offset ?? shown));
        } else if (message.type === 'exit') end(`The shell ended with exit code ${message.exitCode}.`);
        else if (message.type === 'error') end(`The session failed: ${message.error}`);
      };
      socket.onclose = (event) => {
        if (ended) return;
        if (event.code === 4401) return end('Closed: the sign-in was revoked or expired.');
        if (!sessionId || event.code === 4400 || event.code === 1011) return end(`Closed${event.reason ? `: ${event.reason}` : '.'}`);
        // A drop: the shell runs on for a while; attached again, the screen comes back.
        setStatus('The connection dropped: attaching to the shell again…');
        const again = async () => {
          const runs = await stillRuns(environment, sessionId!, token);
          if (ended) return;
          if (runs === false) return end('The shell ended while the connection was away.');
          if (runs === undefined) {
            retry = setTimeout(() => void again(), wait);
            wait = Math.min(RETRY_MAX_MS, wait * 2);
            return;
          }
          connect();
        };
        retry = setTimeout(() => void again(), wait);
        wait = Math.min(RETRY_MAX_MS, wait * 2);
      };
    };
    connect();
    const input = term.onData((data) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(data));
    });
    const resized = term.onResize(({ rows, cols }) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'resize', rows, cols }));
    });
    // Escape then Tab moves the focus on, as a terminal otherwise keeps Tab for itself.
    let escaped = false;
    term.attachCustomKeyEventHandler((event) => {
      if (event.type !== 'keydown') return true;
      if (event.key === 'Tab' && escaped) {
        escaped = false;
        return false;
      }
      escaped = event.key === 'Escape';
      return true;
    });
    const onWindowResize = () => fit.fit();
    window.addEventListener('resize', onWindowResize);
    return () => {
      window.removeEventListener('resize', onWindowResize);
      input.dispose();
      resized.dispose();
      ended = true;
      clearTimeout(retry);
      // 1000 ends the shell; any other code leaves it running, to be attached to again.
      if (leave?.current) ws.close(4000, 'left running in the console');
      else ws.close(1000, 'closed in the console');
      term.dispose();
      unstyle();
    };
  }, [environment, token, session, onEnd, leave]);
  return (
    <div className="terminal">
      <p role="status" className="muted">
        {status}
      </p>
      <section ref={box} className="terminal-screen" aria-label="Terminal" />
    </div>
  );
}
