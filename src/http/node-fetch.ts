/**
 * The HTTP under the bot's outgoing calls (Slack's Web API, Alertmanager's silences). @slack/web-api
 * calls `fetch`, and in the bot `fetch` went through npm undici's dispatcher (Bolt loads it with
 * Socket Mode, and it makes itself fetch's global dispatcher), whose first connection compiles its
 * HTTP parser to WebAssembly on the main thread: a 30–40 MiB transient right after start, most of
 * the bot's peak RSS (bench/results/2026-12.md, bot memory). This is the part of fetch those callers use (a
 * request with a string body; status, headers, the body as text, JSON or bytes), over `node:http`,
 * whose parser is native. Pure transport: no retry here (WebClient retries, the poster decides which).
 */
import { Agent as HttpAgent, type IncomingHttpHeaders, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { webApi } from '@slack/bolt';

type FetchResponse = Awaited<ReturnType<webApi.FetchFunction>>;
type FetchHeaders = FetchResponse['headers'];

/** Connections kept open between calls, as fetch keeps them. */
const agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

function headersOf(raw: IncomingHttpHeaders): FetchHeaders {
  const map = new Map<string, string>();
  for (const [k, v] of Object.entries(raw)) if (v !== undefined) map.set(k, Array.isArray(v) ? v.join(', ') : v);
  return {
    get: (name: string) => map.get(name.toLowerCase()) ?? null,
    entries: () => map.entries(),
  };
}

export const nodeFetch: webApi.FetchFunction = (input, init = {}) =>
  new Promise<FetchResponse>((resolve, reject) => {
    const url = typeof input === 'string' ? new URL(input) : input;
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      reject(new TypeError(`nodeFetch: ${url.protocol} is not http or https`));
      return;
    }
    if (init.body !== undefined && typeof init.body !== 'string') {
      // Multipart bodies come only from file uploads, which gpu-medic never makes.
      reject(new TypeError('nodeFetch: only a string body is supported (no file uploads)'));
      return;
    }
    const signal = init.signal;
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const body = init.body === undefined ? undefined : Buffer.from(init.body);
    const https = url.protocol === 'https:';
    const req = (https ? httpsRequest : httpRequest)(url, {
      method: init.method ?? 'GET',
      headers: { ...init.headers, ...(body ? { 'content-length': String(body.length) } : {}) },
      agent: https ? agents.https : agents.http,
      ...(signal ? { signal } : {}),
    });
    req.once('error', reject);
    req.once('response', (res) => {
      const status = res.statusCode ?? 0;
      // WebClient asks for redirect: 'error' (Slack's Web API never redirects a call).
      if (status >= 300 && status < 400 && init.redirect !== 'manual') {
        res.resume();
        reject(new TypeError(`nodeFetch: ${url.origin}${url.pathname} answered a redirect (HTTP ${status})`));
        return;
      }
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.once('error', reject);
      res.once('end', () => {
        const bytes = Buffer.concat(chunks);
        resolve({
          ok: status >= 200 && status < 300,
          status,
          statusText: res.statusMessage ?? '',
          url: url.href,
          headers: headersOf(res.headers),
          text: async () => bytes.toString('utf8'),
          json: async (): Promise<unknown> => JSON.parse(bytes.toString('utf8')),
          arrayBuffer: async () => new Uint8Array(bytes).buffer,
        });
      });
    });
    req.end(body);
  });
