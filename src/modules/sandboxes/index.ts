export * from './service';
export * from './wiring';
