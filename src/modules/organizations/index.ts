export { admitStorage, hotNodesFor, orgLimits, StorageQuotaError, setOrgLimits, storageRoom } from './limits';
export { createOrganization, ensureDefaultOrganization, issueAdminToken } from './service';
