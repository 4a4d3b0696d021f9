import { type DocumentNode, type ExecutionResult, execute, type GraphQLSchema, Kind, type OperationDefinitionNode } from 'graphql';
import { compileQuery, isCompiledQuery } from 'graphql-jit';
import type { Context } from '../../app/context';

/**
 * One operation of a validated document, compiled once (graphql-jit) and run per request. The
 * schema's own resolvers and scalars run as under graphql-js; only the walk over the selection is
 * generated code. What graphql-jit cannot compile runs under graphql-js `execute`.
 */
export interface CompiledOperation {
  kind: OperationDefinitionNode['operation'];
  run(context: Context, variables: Record<string, unknown> | undefined): Promise<ExecutionResult>;
}

/** The document's operations by name, and under '' when it has exactly one. */
export function compileOperations(schema: GraphQLSchema, document: DocumentNode): Map<string, CompiledOperation> {
  const operations = document.definitions.filter((d): d is OperationDefinitionNode => d.kind === Kind.OPERATION_DEFINITION);
  const compiled = new Map<string, CompiledOperation>();
  for (const op of operations) {
    const name = op.name?.value;
    // Only queries are run this way (src/edges/graphql/post.ts, src/edges/rest/adapter.ts).
    const run = op.operation === 'query' ? compileOperation(schema, document, name) : interpret(schema, document, name);
    const entry: CompiledOperation = { kind: op.operation, run };
    if (name) compiled.set(name, entry);
    if (operations.length === 1) compiled.set('', entry);
  }
  return compiled;
}

function interpret(schema: GraphQLSchema, document: DocumentNode, operationName: string | undefined): CompiledOperation['run'] {
  return async (contextValue, variableValues) => execute({ schema, document, operationName, contextValue, variableValues });
}

/**
 * Compiled on its first run, not before: nothing is compiled at start, nor for a document whose
 * caller never authenticates (the first run comes after authentication).
 */
function compileOperation(schema: GraphQLSchema, document: DocumentNode, operationName: string | undefined): CompiledOperation['run'] {
  let run: CompiledOperation['run'] | undefined;
  return (context, variables) => {
    run ??= compileNow(schema, document, operationName);
    return run(context, variables);
  };
}

function compileNow(schema: GraphQLSchema, document: DocumentNode, operationName: string | undefined): CompiledOperation['run'] {
  const interpreted = interpret(schema, document, operationName);
  let jit: ReturnType<typeof compileQuery<Record<string, unknown>, Record<string, unknown>>>;
  try {
    jit = compileQuery<Record<string, unknown>, Record<string, unknown>>(schema, document, operationName, {
      disablingCapturingStackErrors: true,
    });
  } catch {
    return interpreted;
  }
  if (!isCompiledQuery(jit)) return interpreted;
  return async (context, variables) => jit.query(undefined, context, variables ?? {}) as ExecutionResult | Promise<ExecutionResult>;
}
