// Artifact bytes go over REST (GraphQL carries no file bodies): uploads with XMLHttpRequest for
// upload progress, downloads with fetch. Both send the bearer header; no token ever goes in a URL.

export interface UploadOptions {
  token: string;
  file: Blob;
  params: URLSearchParams;
  onProgress(sent: number, total: number): void;
  signal: AbortSignal;
}

export interface RestError {
  status: number;
  code?: string;
  message: string;
}

export interface Uploaded {
  artifact: { id: string; name: string };
  link?: { url: string; expires: string };
}

export function uploadArtifact({ token, file, params, onProgress, signal }: UploadOptions): Promise<Uploaded> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', `/v1/artifacts?${params}`);
    xhr.setRequestHeader('authorization', `Bearer ${token}`);
    xhr.setRequestHeader('content-type', 'application/octet-stream');
    xhr.responseType = 'json';
    xhr.upload.onprogress = (event) => onProgress(event.loaded, event.lengthComputable ? event.total : file.size);
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) resolve(xhr.response as Uploaded);
      else reject(restError(xhr.status, xhr.response));
    };
    xhr.onerror = () => reject({ status: 0, message: 'the upload failed: Berth did not answer' } satisfies RestError);
    xhr.onabort = () => reject({ status: 0, code: 'aborted', message: 'upload cancelled' } satisfies RestError);
    signal.addEventListener('abort', () => xhr.abort(), { once: true });
    xhr.send(file);
  });
}

function restError(status: number, body: unknown): RestError {
  const b = (body ?? {}) as { error?: string; code?: string };
  return { status, code: b.code, message: b.error ?? `HTTP ${status}` };
}

/** Fetches the artifact's bytes with the bearer header, then hands them to the browser to save. */
export async function downloadArtifact(token: string, id: string, name: string): Promise<void> {
  const res = await fetch(`/v1/artifacts/${encodeURIComponent(id)}/content`, { headers: { authorization: `Bearer ${token}` } });
  if (!res.ok) throw restError(res.status, await res.json().catch(() => undefined));
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  // The browser has taken the blob once the click's navigation started.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
