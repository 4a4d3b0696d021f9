export * from './catalog';
export * from './service';
