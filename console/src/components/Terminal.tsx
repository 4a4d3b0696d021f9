// The environment's shell in the page (docs/console.md, "Terminal"): xterm.js on the session API
// (docs/agents.md, "Sessions"), loaded only when opened. Its text is readable by assistive
// technology (xterm's screen-reader mode keeps an accessible copy of the rows), and the keyboard
// goes to the shell: Tab and Ctrl-C included, so Escape then Tab leaves the terminal.
import { FitAddon } from '@xterm/addon-fit';
import { Terminal as XTerm } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'react';

const PROTOCOL = 'berth.exec.v1';

export function sessionUrl(environment: string, size: { rows: number; cols: number }, location: Location = window.location): string {
  const query = new URLSearchParams({ tty: '1', rows: String(size.rows), cols: String(size.cols) });
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/environments/${encodeURIComponent(environment)}/exec?${query}`;
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

export default function Terminal({ environment, token, onEnd }: { environment: string; token: string; onEnd: (why: string) => void }) {
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
    const ws = new WebSocket(sessionUrl(environment, { rows: term.rows, cols: term.cols }), [PROTOCOL, `berth.bearer.${token}`]);
    ws.binaryType = 'arraybuffer';
    const encoder = new TextEncoder();
    let ended = false;
    const end = (why: string) => {
      if (ended) return;
      ended = true;
      setStatus(why);
      onEnd(why);
    };
    ws.onopen = () => {
      setStatus('Connected: the keyboard goes to the shell (Escape, then Tab, leaves it).');
      term.focus();
    };
    ws.onmessage = (event: MessageEvent<ArrayBuffer | string>) => {
      if (typeof event.data !== 'string') return term.write(new Uint8Array(event.data, 1));
      const message = JSON.parse(event.data) as { type: string; exitCode?: number; error?: string };
      if (message.type === 'exit') end(`The shell ended with exit code ${message.exitCode}.`);
      else if (message.type === 'error') end(`The session failed: ${message.error}`);
    };
    ws.onclose = (event) =>
      end(event.code === 4401 ? 'Closed: the sign-in was revoked or expired.' : `Closed${event.reason ? `: ${event.reason}` : '.'}`);
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
      ws.close(1000, 'closed in the console');
      term.dispose();
      unstyle();
    };
  }, [environment, token, onEnd]);
  return (
    <div className="terminal">
      <p role="status" className="muted">
        {status}
      </p>
      <section ref={box} className="terminal-screen" aria-label="Terminal" />
    </div>
  );
}
