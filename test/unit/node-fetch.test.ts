import { execFile } from 'node:child_process';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { webApi } from '@slack/bolt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nodeFetch } from '../../src/http/node-fetch.ts';
import { buildDist, ROOT } from '../harness/dist.ts';

const run = promisify(execFile);

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

let server: Server;
let base = '';
const seen: Seen[] = [];
let answer: (res: ServerResponse, n: number) => void = (res) => res.end('{}');

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      });
      answer(res, seen.length);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

describe('nodeFetch, the Web API clients HTTP', () => {
  it('sends the method, headers and string body; answers status, headers, text, JSON and bytes', async () => {
    answer = (res) => {
      res.writeHead(201, 'Made', { 'content-type': 'application/json', 'x-oauth-scopes': 'chat:write' });
      res.end('{"ok":true,"ü":"ö"}');
    };
    const r = await nodeFetch(`${base}/api/chat.postMessage`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: 'Bearer xoxb-test' },
      body: 'channel=C1&text=h%C3%A9',
    });
    const s = seen.at(-1);
    expect(s).toMatchObject({ method: 'POST', url: '/api/chat.postMessage', body: 'channel=C1&text=h%C3%A9' });
    expect(s?.headers.authorization).toBe('Bearer xoxb-test');
    expect(s?.headers['content-length']).toBe('23');
    expect([r.ok, r.status, r.statusText, r.url]).toEqual([true, 201, 'Made', `${base}/api/chat.postMessage`]);
    expect(r.headers.get('X-OAuth-Scopes')).toBe('chat:write');
    expect(r.headers.get('retry-after')).toBeNull();
    expect(Object.fromEntries(r.headers.entries())['content-type']).toBe('application/json');
    expect(await r.text()).toBe('{"ok":true,"ü":"ö"}');
    expect(await r.json()).toEqual({ ok: true, ü: 'ö' });
    expect(Buffer.from(await r.arrayBuffer()).toString()).toBe('{"ok":true,"ü":"ö"}');
  });

  it('a refused connection, an aborted call, a redirect and a multipart body are errors, not answers', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    await expect(nodeFetch(`http://127.0.0.1:${port}/api/auth.test`, { method: 'POST' })).rejects.toMatchObject({
      code: 'ECONNREFUSED',
    });
    answer = () => undefined; // never answers
    await expect(nodeFetch(`${base}/api/slow`, { method: 'POST', signal: AbortSignal.timeout(200) })).rejects.toThrow(
      /abort|timeout/i,
    );
    answer = (res) => {
      res.writeHead(302, { location: 'https://example.org/' });
      res.end();
    };
    await expect(nodeFetch(`${base}/api/moved`, { method: 'POST', redirect: 'error' })).rejects.toThrow(
      /answered a redirect \(HTTP 302\)/,
    );
    await expect(nodeFetch(`${base}/api/files`, { method: 'POST', body: new FormData() })).rejects.toThrow(
      /only a string body/,
    );
  });

  it("WebClient on it: a call's result, and a 429 with Retry-After waited out and retried", async () => {
    const before = seen.length;
    answer = (res, n) => {
      if (n === before + 1) {
        res.writeHead(429, { 'retry-after': '1' });
        res.end();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true,"user_id":"U0BOT","bot_id":"B0BOT"}');
    };
    const client = new webApi.WebClient('xoxb-test', {
      slackApiUrl: `${base}/api/`,
      fetch: nodeFetch,
      retryConfig: { retries: 2, minTimeout: 10, maxTimeout: 20 },
    });
    const limited: number[] = [];
    client.on(webApi.WebClientEvent.RATE_LIMITED, (sec: number) => limited.push(sec));
    const r = await client.auth.test();
    expect(r).toMatchObject({ ok: true, user_id: 'U0BOT', bot_id: 'B0BOT' });
    expect(limited).toEqual([1]);
    expect(seen.slice(before).map((s) => s.url)).toEqual(['/api/auth.test', '/api/auth.test']);
  });
});

/** A fresh node process makes three WebClient calls, with `fetch` or with nodeFetch, and says what it compiled. */
async function childCalls(which: 'globalThis.fetch' | 'nodeFetch'): Promise<{ wasm: number }> {
  const script = `
    let wasm = 0;
    for (const k of ['compile', 'instantiate']) { const o = WebAssembly[k]; WebAssembly[k] = function (...a) { wasm++; return o.apply(this, a); }; }
    const { createServer } = await import('node:http');
    const { WebClient } = await import('@slack/web-api');
    const { nodeFetch } = await import(${JSON.stringify(join(ROOT, 'dist/src/http/node-fetch.js'))});
    const s = createServer((q, r) => { q.resume(); q.on('end', () => { r.setHeader('content-type', 'application/json'); r.end('{"ok":true}'); }); });
    await new Promise((r) => s.listen(0, '127.0.0.1', r));
    const c = new WebClient('xoxb-test', { slackApiUrl: 'http://127.0.0.1:' + s.address().port + '/api/', ${which === 'nodeFetch' ? 'fetch: nodeFetch' : ''} });
    for (let i = 0; i < 3; i++) await c.auth.test();
    console.log(JSON.stringify({ wasm }));
    s.closeAllConnections(); s.close(); process.exit(0);
  `;
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, timeout: 30_000 });
  return JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as { wasm: number };
}

describe("the bot's first Web API calls", () => {
  beforeAll(async () => {
    await buildDist();
  }, 120_000);

  it('compile no WebAssembly on nodeFetch, where the same calls on fetch do', async () => {
    const [viaFetch, viaNode] = [await childCalls('globalThis.fetch'), await childCalls('nodeFetch')];
    expect(viaFetch.wasm).toBeGreaterThan(0);
    expect(viaNode.wasm).toBe(0);
  }, 60_000);
});
