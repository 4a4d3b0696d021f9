// The names of the audit log's actions and of webhook events: the server checks what callers send
// against them, and the web console offers them as choices (console/src/pages/Audit.tsx,
// SettingsWebhooks.tsx), so this file imports nothing.

/** Every action the log records; the webhooks' are written by src/modules/webhooks/service.ts. */
export const AUDIT_ACTIONS = [
  'environment.create',
  'environment.delete',
  'environment.keepalive',
  'exec.run',
  'preview.create',
  'quota.set',
  'template.set',
  'template.delete',
  'token.create',
  'token.revoke',
  'key.create',
  'key.revoke',
  'sandbox.register',
  'sandbox.join',
  'sandbox.remove',
  'node.create',
  'node.remove',
  'node.cordon',
  'node.uncordon',
  'node.connect',
  'node.leave',
  'artifact.create',
  'artifact.delete',
  'artifact.link',
  'artifact.links.revoke',
  'project.shred',
  'webhook.create',
  'webhook.delete',
] as const;

export type AuditAction = (typeof AUDIT_ACTIONS)[number];

/** The event types a webhook may subscribe to (docs/operations.md#webhooks). */
export const WEBHOOK_EVENTS = [
  'environment.created',
  'environment.state',
  'artifact.created',
  'artifact.deleted',
  'snapshot.created',
  'project.shredded',
  'template.changed',
] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

/** A template was put, deleted, or its image built (or failed to). */
export const TEMPLATE_CHANGED: WebhookEvent = 'template.changed';
