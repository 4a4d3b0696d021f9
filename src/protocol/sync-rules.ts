// Sync rules as they cross the wire (src/kernel/sync-rules.ts holds what they mean): the relay
// job and the node channel carry SyncRules, the sandbox configuration its own shape with the same
// include patterns. The bounds are validateInclude's, so rules the server validated always pass.
import { z } from 'zod';
import { MAX_INCLUDE_PATTERNS, MAX_PATTERN_LENGTH } from '../kernel/sync-rules';

/** Include patterns: at most MAX_INCLUDE_PATTERNS, none empty or longer than MAX_PATTERN_LENGTH. */
export const IncludePatterns = z.array(z.string().min(1).max(MAX_PATTERN_LENGTH)).max(MAX_INCLUDE_PATTERNS);

/** Which files a share's sync carries (SyncRules). */
export const SyncRulesSchema = z.object({
  include: IncludePatterns.readonly(),
  noIgnore: z.boolean(),
  files: z.record(z.string(), z.string()).optional(),
});
