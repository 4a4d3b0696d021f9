// Where the berth command finds Berth without --server, BERTH_URL or a login: `npm start`'s address,
// or, for a berth installed by a server's /install.sh, that server's. The single-file CLI declares
// BERTH_INSTALLED_URL on its second line, and the installer writes the URL there
// (scripts/build-cli-standalone.mjs); elsewhere it is not declared at all.
declare const BERTH_INSTALLED_URL: string | undefined;

export const DEFAULT_URL = (typeof BERTH_INSTALLED_URL === 'string' && BERTH_INSTALLED_URL) || 'http://127.0.0.1:8080';
