export { shredJob } from './shredding';
