export { checkAudited, pruneAuditEvents, recordAudit } from './service';
