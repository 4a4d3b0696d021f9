export * from './shredding';
