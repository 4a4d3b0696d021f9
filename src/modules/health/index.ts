export { readiness } from './readiness';
