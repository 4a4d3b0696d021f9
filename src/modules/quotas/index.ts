export { admitUnderQuota, quotasFor } from './service';
