import { type ASTNode, type ASTVisitor, GraphQLError, Kind, type ValidationContext } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { findTextIssue, textProblem } from '../http/text';
import { requestError } from './request-errors';

/** The first variable holding a string that cannot be stored (or nested too deeply), as a request error. */
export function variablesError(variables: unknown): GraphQLError | undefined {
  if (variables === null || typeof variables !== 'object') return undefined;
  for (const [name, value] of Object.entries(variables)) {
    const issue = findTextIssue(value, `$${name}`);
    if (issue) return requestError(`${issue.field}: ${issue.problem}`, 'invalid');
  }
  return undefined;
}

/** The argument or input field a literal belongs to (its parent, or further up in a list), for the message. */
function fieldOf(parent: ASTNode | readonly ASTNode[] | undefined, ancestors: readonly (ASTNode | readonly ASTNode[])[]): string {
  for (const node of [parent, ...[...ancestors].reverse()]) {
    if (node && 'kind' in node && (node.kind === Kind.ARGUMENT || node.kind === Kind.OBJECT_FIELD)) return node.name.value;
  }
  return 'a string literal';
}

/** Validation rule: string literals of the document pass the same check as variables. */
export function StorableStringsRule(context: ValidationContext): ASTVisitor {
  return {
    StringValue(node, _key, parent, _path, ancestors) {
      const problem = textProblem(node.value);
      if (problem) {
        context.reportError(
          new GraphQLError(`${fieldOf(parent, ancestors)}: ${problem}`, { nodes: node, extensions: { code: 'invalid' } }),
        );
      }
    },
  };
}

/** yoga: variables over HTTP are checked before anything runs; literals in validation (HTTP and WebSocket). */
export function useStorableInput(): Plugin {
  return {
    onParams({ params }) {
      const error = variablesError(params.variables);
      if (error) throw error;
    },
    onValidate({ addValidationRule }) {
      addValidationRule(StorableStringsRule);
    },
  };
}
