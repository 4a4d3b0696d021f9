export { auditRow, checkAudited, pruneAuditEvents, recordAudit } from './service';
