/** Where the berth command finds Berth without BERTH_URL or --server: `npm start`'s address. */
export const DEFAULT_URL = 'http://127.0.0.1:8080';
