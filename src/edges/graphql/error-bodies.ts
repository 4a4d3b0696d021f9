import type { Plugin } from 'graphql-yoga';
import { codeForStatus, type ErrorCode } from '../../kernel/error-codes';

// yoga answers transport errors (405, 406, 415, …) with an empty body or a GraphQL `errors` list.
// Every error a client can get carries `{error, code}`, so those answers get it, with the
// `errors` list beside it for GraphQL clients. GraphQL answers (400, 401, 403, 429 with `errors`)
// and event streams pass through untouched. Each status's code is its generic one.
const TRANSPORT: Record<number, string> = {
  404: 'no GraphQL endpoint here',
  405: 'GraphQL takes GET and POST',
  406: 'GraphQL answers application/graphql-response+json, application/json or text/event-stream; the Accept header allows none of them',
  413: 'the request body is too large',
  415: 'send the GraphQL request as application/json',
};

export function useErrorBodies(): Plugin {
  return {
    onResponse({ response, setResponse, fetchAPI }) {
      const json = (response.headers.get('content-type') ?? '').includes('json');
      const transport = TRANSPORT[response.status];
      if (response.status < 400 || (json && !transport)) return;
      const error = transport ?? (response.statusText || 'bad request');
      const code: ErrorCode = (transport && codeForStatus(response.status)) || 'bad_request';
      const headers = new fetchAPI.Headers(response.headers);
      headers.set('content-type', 'application/json; charset=utf-8');
      headers.delete('content-length');
      const body = { error, code, errors: [{ message: error, extensions: { code } }] };
      setResponse(new fetchAPI.Response(JSON.stringify(body), { status: response.status, headers }));
    },
  };
}
