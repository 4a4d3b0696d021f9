// GraphQL over HTTP: a root field that fails (not found, forbidden, a bad argument) is null, its
// error in `errors`, beside its siblings' data (every root query and mutation field is nullable:
// src/edges/schema/nullable-roots.ts). Pages read answers through these hooks, so that an answer
// missing a root field is their error state, with that field's error, and never data with a
// hole in it.
import { type AnyVariables, CombinedError, type DocumentInput, type OperationContext } from '@urql/core';
import { useCallback, useMemo } from 'react';
import { type UseQueryArgs, type UseQueryExecute, useMutation, useQuery } from 'urql';

/** An answer's data with every root field there. */
export type Complete<Data> = { [Key in keyof Data]: NonNullable<Data[Key]> };

/** What a page shows of an answer: its data only when complete, and every error that came. */
export interface Answer<Data> {
  data?: Complete<Data>;
  error?: CombinedError;
  fetching: boolean;
}

/**
 * `result` with its data only when every root field came back; otherwise no data and the error
 * of the fields that did not (Berth always says why a root field is null; should it not, the
 * answer still says which field is missing).
 */
export function complete<Data>(result: { data?: Data | null; error?: CombinedError; fetching?: boolean }): Answer<Data> {
  const answer = { error: result.error, fetching: result.fetching ?? false };
  if (!result.data) return answer;
  const missing = Object.entries(result.data).flatMap(([key, value]) => (value === null ? [key] : []));
  if (!missing.length) return { ...answer, data: result.data as Complete<Data> };
  return { ...answer, error: result.error ?? new CombinedError({ graphQLErrors: [`Berth answered no ${missing.join(', ')}`] }) };
}

/** urql's `useQuery`, answering through `complete`. */
export function useQueryAnswer<Data, Variables extends AnyVariables>(args: UseQueryArgs<Variables, Data>): [Answer<Data>, UseQueryExecute] {
  const [result, refetch] = useQuery(args);
  const answer = useMemo(() => complete(result), [result]);
  return [answer, refetch];
}

/** urql's `useMutation`, its state and each result through `complete`. */
export function useMutationAnswer<Data, Variables extends AnyVariables>(
  mutation: DocumentInput<Data, Variables>,
): [Answer<Data>, (variables: Variables, context?: Partial<OperationContext>) => Promise<Answer<Data>>] {
  const [state, execute] = useMutation(mutation);
  const answer = useMemo(() => complete(state), [state]);
  const run = useCallback(
    async (variables: Variables, context?: Partial<OperationContext>) => complete(await execute(variables, context)),
    [execute],
  );
  return [answer, run];
}
