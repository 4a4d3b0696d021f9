export { assertNotBlocked, authenticate, loadAddressLocks, pruneAuthFailures, recordFailure } from './auth';
export { CredentialCache } from './cache';
export { issueCliToken, normalizeEmail, viewer } from './service';
