export { type AuditWho, auditRow, checkAudited, pruneAuditEvents, recordAudit, whoOf } from './service';
