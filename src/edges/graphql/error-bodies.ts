import type { Plugin } from 'graphql-yoga';
import { codeForStatus, type ErrorCode } from '../../kernel/error-codes';
import { MAX_JSON_BODY_BYTES } from '../http/text';

// yoga answers transport errors (405, 406, 415, …) with an empty body or a GraphQL `errors` list.
// Every error a client can get carries `{error, code}`, so those answers get it, with the
// `errors` list beside it for GraphQL clients. GraphQL answers (400, 401, 403, 429 with `errors`)
// and event streams pass through untouched. Each status's code is its generic one.
const TRANSPORT: Record<number, string> = {
  404: 'no GraphQL endpoint here',
  405: 'GraphQL takes GET and POST',
  406: 'GraphQL answers application/graphql-response+json, application/json or text/event-stream; the Accept header allows none of them',
  413: `request bodies are limited to ${MAX_JSON_BODY_BYTES} bytes`,
  415: 'send the GraphQL request as application/json',
};

/** An error answer's body: `{error, code}`, and the same as a GraphQL `errors` list. */
export const errorBody = (error: string, code: ErrorCode) => ({ error, code, errors: [{ message: error, extensions: { code } }] });

export function useErrorBodies(): Plugin {
  return {
    onResponse({ response, setResponse, fetchAPI }) {
      const json = (response.headers.get('content-type') ?? '').includes('json');
      const transport = TRANSPORT[response.status];
      if (response.status < 400 || (json && !transport)) return;
      const error = transport ?? (response.statusText || 'bad request');
      const code: ErrorCode = (transport && codeForStatus(response.status)) || 'bad_request';
      const headers = new fetchAPI.Headers(response.headers);
      const text = JSON.stringify(errorBody(error, code));
      headers.set('content-type', 'application/json; charset=utf-8');
      // Sized: a 413 reaches a client still sending its body whole, before the connection closes.
      headers.set('content-length', String(Buffer.byteLength(text)));
      setResponse(new fetchAPI.Response(text, { status: response.status, headers }));
    },
  };
}
