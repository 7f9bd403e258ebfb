/**
 * The demo: a scenario's fleet with the real bot, worker and Redis, our fake Slack, and a tiny
 * local web page (node:http, no framework) on 127.0.0.1 where a person acts as any user of the
 * scenario: type `/gpu ...`, click the buttons of approval cards, read the threads.
 *
 * Routes: GET / (the page), GET /state (channel, threads, alerts and their threads, each user's App
 * Home, private answers, GPU memory as JSON), POST /command {user, text} (queues the slash command,
 * answers 202), POST /click {user, ts, which} (an approval card), POST /action {user, ts, actionId,
 * blockId, value?, option?} (any other control of a message: an alert's Status, Unstick, Snooze),
 * POST /home {user} (opens that user's Home tab: Slack's app_home_opened, the bot publishes).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { StoredMessage } from '../harness/slack/fake-slack-api.ts';
import {
  appHomeOpenedPayload,
  blockActionPayload,
  sendEvent,
  sendInteraction,
  staticSelectPayload,
} from '../harness/slack/signed-request.ts';
import { alertControls, cardButtons, ScenarioRuntime } from './run-scenario.ts';
import { loadScenario, type Scenario } from './schema.ts';
import { demoBlocksHtml } from './demo-blocks.ts';

export interface PrivateNote {
  at: number;
  user: string;
  kind: 'ack' | 'ephemeral' | 'response' | 'click' | 'error';
  text: string;
}

export interface DemoMessage {
  ts: string;
  user: string;
  text: string;
  blocks: unknown[];
  edits: number;
  /** An approval card's Approve/Deny (the terminal demo's `click`); the page draws every control from `blocks`. */
  buttons: Array<{ which: 'approve' | 'deny'; text: string }>;
}

/** A user's App Home as the bot last published it (views.publish to the fake Slack). */
export interface DemoHome {
  user: string;
  id: string;
  publishes: number;
  blocks: unknown[];
}

export interface DemoState {
  scenario: { name: string; description: string | null; pending: string | null };
  channel: string;
  /** The watchdog's alerts channel (settings.watch), and its top-level messages: one per alert, edited in place. */
  alertsChannel: string | null;
  alerts: Array<DemoMessage & { replies: DemoMessage[] }>;
  home: DemoHome[];
  users: Array<{ name: string; id: string }>;
  threads: Array<{ parent: DemoMessage; replies: DemoMessage[] }>;
  private: PrivateNote[];
  gpuMemory: Record<string, Array<{ index: number; usedMiB: number; totalMiB: number }>>;
  processes: Array<{ name: string; machine: string; kind: string; cmdline: string; hostPid: number }>;
}

export interface Demo {
  url: string;
  runtime: ScenarioRuntime;
  state(): DemoState;
  /** Types a command as a user; resolves when Bolt acked (the answer lands in `private`). */
  command(user: string, text: string): Promise<PrivateNote>;
  /** Clicks a button of the card with this ts (default: the latest card of the latest thread). */
  click(user: string, which: 'approve' | 'deny', ts?: string): Promise<PrivateNote>;
  /** Uses a control of the message with this ts as Slack would deliver it: a button, or an option of a select. */
  press(user: string, ts: string, c: { actionId: string; blockId: string; option?: string }): Promise<PrivateNote>;
  /** Opens a user's Home tab (Slack's app_home_opened); the bot answers with views.publish. */
  openHome(user: string): Promise<PrivateNote>;
  close(): Promise<void>;
}

function view(m: StoredMessage): DemoMessage {
  return {
    ts: m.ts,
    user: m.user,
    text: m.text,
    blocks: m.blocks ?? [],
    edits: m.history.length,
    buttons: cardButtons(m.blocks).map((b) => ({ which: b.which, text: b.text })),
  };
}

function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > 64 * 1024) {
        reject(new Error('body too large'));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => {
      try {
        const v: unknown = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
        resolve(typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {});
      } catch (e) {
        reject(e);
      }
    });
    req.on('error', reject);
  });
}

function send(res: ServerResponse, status: number, body: unknown, type = 'application/json'): void {
  const text = type === 'application/json' ? JSON.stringify(body) : String(body);
  res.writeHead(status, { 'content-type': `${type}; charset=utf-8`, 'cache-control': 'no-store' });
  res.end(text);
}

export async function startDemo(input: string | Scenario, o: { port?: number } = {}): Promise<Demo> {
  const scenario = typeof input === 'string' ? loadScenario(input) : input;
  const rt = await ScenarioRuntime.start(scenario);
  const notes: PrivateNote[] = [];
  const userOfUrl = new Map<string, string>();
  const nameOf = new Map(Object.entries(rt.users).map(([n, id]) => [id, n]));

  const note = (n: Omit<PrivateNote, 'at'>): PrivateNote => {
    const full = { at: Date.now(), ...n };
    notes.push(full);
    return full;
  };

  const state = (): DemoState => {
    const slack = rt.stack.slack;
    const threads = slack.messages(scenario.channel).map((p) => {
      const t = slack.thread(scenario.channel, p.ts);
      return { parent: view(p), replies: t.slice(1).map(view) };
    });
    const priv: PrivateNote[] = [...notes];
    for (const e of slack.ephemerals())
      priv.push({ at: e.at, user: nameOf.get(e.user) ?? e.user, kind: 'ephemeral', text: e.text });
    for (const r of slack.responses()) {
      const user = userOfUrl.get(r.url);
      if (user !== undefined && typeof r.body.text === 'string')
        priv.push({ at: r.at, user, kind: 'response', text: r.body.text });
    }
    priv.sort((a, b) => a.at - b.at);
    const gpuMemory: DemoState['gpuMemory'] = {};
    for (const h of scenario.fleet.hosts) gpuMemory[h.id] = rt.stack.fleet.gpuMemory(h.id);
    return {
      scenario: { name: scenario.name, description: scenario.description ?? null, pending: scenario.pending ?? null },
      channel: scenario.channel,
      alertsChannel: rt.alertsChannel,
      alerts:
        rt.alertsChannel === null
          ? []
          : slack.messages(rt.alertsChannel).map((p) => ({
              ...view(p),
              replies: slack
                .thread(rt.alertsChannel ?? '', p.ts)
                .slice(1)
                .map(view),
            })),
      home: Object.entries(rt.users).flatMap(([name, id]) => {
        const h = slack.homeView(id);
        return h
          ? [{ user: name, id, publishes: h.publishes, blocks: Array.isArray(h.view.blocks) ? h.view.blocks : [] }]
          : [];
      }),
      users: Object.entries(rt.users).map(([name, id]) => ({ name, id })),
      threads,
      private: priv,
      gpuMemory,
      processes: [...rt.processes].map(([name, { kind, p }]) => ({
        name,
        machine: p.machine,
        kind,
        cmdline: p.cmdline,
        hostPid: p.hostPid,
      })),
    };
  };

  const command = async (user: string, text: string): Promise<PrivateNote> => {
    if (rt.users[user] === undefined) return note({ user, kind: 'error', text: `unknown user ${user}` });
    try {
      const r = await rt.slash(user, text);
      userOfUrl.set(r.responseUrl, user);
      return note({ user, kind: 'ack', text: `${text.trim()}\n→ ${r.ackText || `HTTP ${r.status}`}` });
    } catch (e) {
      return note({ user, kind: 'error', text: `${text}: ${e instanceof Error ? e.message : String(e)}` });
    }
  };

  const click = async (user: string, which: 'approve' | 'deny', ts?: string): Promise<PrivateNote> => {
    if (rt.users[user] === undefined) return note({ user, kind: 'error', text: `unknown user ${user}` });
    let card = ts === undefined ? null : rt.cardAt(scenario.channel, ts);
    if (ts !== undefined && !card && rt.alertsChannel !== null) card = rt.cardAt(rt.alertsChannel, ts);
    if (ts === undefined) {
      for (let i = rt.incidents.length - 1; i >= 0 && !card; i--) {
        const inc = rt.incidents[i];
        if (inc) card = rt.latestCard(inc);
      }
    }
    if (!card)
      return note({ user, kind: 'error', text: `no approval card to click${ts === undefined ? '' : ` at ${ts}`}` });
    const url = rt.stack.slack.newResponseUrl();
    userOfUrl.set(url, user);
    const r = await rt.click(user, which, card, url);
    return note({
      user,
      kind: 'click',
      text: r.sent ? `clicked ${which} on card ${card.ts} → HTTP ${r.status}` : r.reason,
    });
  };

  /** The message with this ts in the scenario's channel or the alerts channel, top level or in a thread. */
  const messageAt = (ts: string): { m: StoredMessage; threadTs: string | null } | null => {
    for (const channel of [scenario.channel, rt.alertsChannel]) {
      if (channel === null) continue;
      for (const p of rt.stack.slack.messages(channel)) {
        if (p.ts === ts) return { m: p, threadTs: null };
        const r = rt.stack.slack.thread(channel, p.ts).find((x) => x.ts === ts);
        if (r) return { m: r, threadTs: p.ts };
      }
    }
    return null;
  };

  const press = async (
    user: string,
    ts: string,
    c: { actionId: string; blockId: string; option?: string },
  ): Promise<PrivateNote> => {
    if (rt.users[user] === undefined) return note({ user, kind: 'error', text: `unknown user ${user}` });
    const at = messageAt(ts);
    if (!at) return note({ user, kind: 'error', text: `no message at ${ts}` });
    // Only a control the message really carries, as the bot sent it (the page's data is not trusted).
    const ctl = alertControls(at.m.blocks).find((x) => x.actionId === c.actionId && x.blockId === c.blockId);
    if (!ctl) return note({ user, kind: 'error', text: `the message at ${ts} has no control ${c.actionId}` });
    const option = c.option === undefined ? null : ctl.options.find((o) => o.value === c.option);
    if (c.option !== undefined && !option)
      return note({ user, kind: 'error', text: `${c.actionId} has no option ${c.option}` });
    const responseUrl = rt.stack.slack.newResponseUrl();
    userOfUrl.set(responseUrl, user);
    const common = {
      user: rt.userId(user),
      userName: user,
      channel: at.m.channel,
      messageTs: at.m.ts,
      ...(at.threadTs !== null ? { threadTs: at.threadTs } : {}),
      actionId: ctl.actionId,
      blockId: ctl.blockId,
      responseUrl,
      messageText: at.m.text,
      messageBlocks: at.m.blocks ?? [],
    };
    const placeholder =
      typeof ctl.placeholder === 'object' && ctl.placeholder !== null && 'text' in ctl.placeholder
        ? String(ctl.placeholder.text)
        : null;
    const payload = option
      ? staticSelectPayload({
          ...common,
          selected: { text: option.text.text, value: option.value },
          ...(placeholder !== null ? { placeholder } : {}),
        })
      : blockActionPayload({ ...common, value: ctl.value ?? '', buttonText: ctl.text });
    const r = await sendInteraction(rt.stack.eventsUrl, rt.stack.signingSecret, payload);
    return note({
      user,
      kind: 'click',
      text: `clicked ${option ? `${ctl.text}: ${option.text.text}` : ctl.text} on ${ts} → HTTP ${r.status}`,
    });
  };

  const openHome = async (user: string): Promise<PrivateNote> => {
    if (rt.users[user] === undefined) return note({ user, kind: 'error', text: `unknown user ${user}` });
    const r = await sendEvent(
      rt.stack.eventsUrl,
      rt.stack.signingSecret,
      appHomeOpenedPayload({ user: rt.userId(user) }),
    );
    return note({ user, kind: 'click', text: `opened the App Home → HTTP ${r.status}` });
  };

  const server: Server = createServer((req, res) => {
    void (async () => {
      try {
        const url = new URL(req.url ?? '/', 'http://127.0.0.1');
        if (req.method === 'GET' && url.pathname === '/') return send(res, 200, PAGE, 'text/html');
        if (req.method === 'GET' && url.pathname === '/state') return send(res, 200, state());
        if (req.method === 'POST' && url.pathname === '/command') {
          const b = await readJson(req);
          const user = typeof b.user === 'string' ? b.user : '';
          const text = typeof b.text === 'string' ? b.text : '';
          if (rt.users[user] === undefined) return send(res, 400, { error: `unknown user "${user}"` });
          if (!/^\s*\/gpu\b/.test(text) && text.trim() !== '') {
            return send(res, 400, { error: 'type a /gpu command, e.g. /gpu status kpro5' });
          }
          void command(user, text);
          return send(res, 202, { queued: true, user, text });
        }
        if (req.method === 'POST' && url.pathname === '/click') {
          const b = await readJson(req);
          const user = typeof b.user === 'string' ? b.user : '';
          const which = b.which === 'approve' || b.which === 'deny' ? b.which : null;
          if (rt.users[user] === undefined || which === null)
            return send(res, 400, { error: 'need user and which (approve|deny)' });
          const n = await click(user, which, typeof b.ts === 'string' ? b.ts : undefined);
          return send(res, n.kind === 'error' ? 409 : 200, n);
        }
        if (req.method === 'POST' && url.pathname === '/action') {
          const b = await readJson(req);
          const user = typeof b.user === 'string' ? b.user : '';
          const ts = typeof b.ts === 'string' ? b.ts : '';
          const actionId = typeof b.actionId === 'string' ? b.actionId : '';
          const blockId = typeof b.blockId === 'string' ? b.blockId : '';
          if (rt.users[user] === undefined || ts === '' || actionId === '')
            return send(res, 400, { error: 'need user, ts, actionId and blockId' });
          const n = await press(user, ts, {
            actionId,
            blockId,
            ...(typeof b.option === 'string' ? { option: b.option } : {}),
          });
          return send(res, n.kind === 'error' ? 409 : 200, n);
        }
        if (req.method === 'POST' && url.pathname === '/home') {
          const b = await readJson(req);
          const user = typeof b.user === 'string' ? b.user : '';
          if (rt.users[user] === undefined) return send(res, 400, { error: `unknown user "${user}"` });
          return send(res, 200, await openHome(user));
        }
        send(res, 404, { error: 'not found' });
      } catch (e) {
        send(res, 400, { error: e instanceof Error ? e.message : String(e) });
      }
    })();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  let closed = false;
  return {
    url: `http://127.0.0.1:${port}/`,
    runtime: rt,
    state,
    command,
    click,
    press,
    openHome,
    async close() {
      if (closed) return;
      closed = true;
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await rt.stop();
    },
  };
}

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpu-medic demo</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;display:flex;height:100vh}
main{flex:2;overflow:auto;padding:12px 18px;border-right:1px solid #ddd}
aside{flex:1;overflow:auto;padding:12px 18px;background:#fafafa}
.msg{border:1px solid #e3e3e3;border-radius:6px;padding:8px 10px;margin:6px 0;background:#fff;white-space:pre-wrap}
.thread{margin:14px 0;padding-left:8px;border-left:3px solid #4a154b}
.reply{margin-left:22px}
table{border-collapse:collapse;margin:6px 0;font:12px monospace}td{border:1px solid #ccc;padding:2px 6px}
.meta{color:#888;font-size:12px}
button{margin-right:6px}
form{position:sticky;top:0;background:#fff;padding:8px 0;border-bottom:1px solid #eee}
input[type=text]{width:55%}
.note{font-size:12px;border-bottom:1px dotted #ccc;padding:4px 0;white-space:pre-wrap}
.error{color:#b00}
.alerts{margin:10px 0;padding:6px 10px;background:#fff8f0;border-left:3px solid #e01e5a}
.ctl{display:inline-block;margin:4px 6px 0 0;padding:1px 8px;border:1px solid #bbb;border-radius:4px;font-size:12px;background:#f4f4f4}
.ctx{color:#666;font-size:12px}
code{background:#f3f3f3;border:1px solid #e1e1e1;border-radius:3px;padding:0 2px;font-size:12px;color:#c01343}
pre{background:#f8f8f8;border:1px solid #e1e1e1;border-radius:4px;padding:6px;margin:4px 0;font-size:12px;white-space:pre-wrap}
pre code{border:0;background:none;color:inherit}
.mention{background:#e8f5fa;color:#1264a3;border-radius:3px;padding:0 2px}
.rich ul{margin:2px 0;padding-left:22px}
.actions{margin:4px 0}
button.act,select.act{margin:4px 6px 0 0;padding:2px 10px;border:1px solid #bbb;border-radius:4px;font-size:13px;background:#fff;cursor:pointer}
button.act.primary{background:#007a5a;color:#fff;border-color:#007a5a}
button.act.danger{color:#e01e5a;border-color:#e01e5a}
.home{border:1px solid #ddd;border-radius:6px;background:#fff;padding:6px 10px;white-space:pre-wrap}
</style></head><body>
<main>
<form id="f">as <select id="user"></select>
<input id="text" type="text" value="/gpu status" autocomplete="off"> <button>Send</button></form>
<h3 id="title"></h3><div id="desc" class="meta"></div>
<div id="alerts"></div>
<div id="threads"></div>
</main>
<aside><h4>App Home <button id="openHome" type="button">Open as the chosen user</button></h4><div id="home" class="meta"></div>
<h4>Only visible to you (acks, ephemeral answers)</h4><div id="private"></div>
<h4>GPU memory (fleet truth)</h4><div id="gpus"></div><h4>Processes</h4><div id="procs" class="meta"></div></aside>
<script>
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]));
// Message text is Slack mrkdwn, already escaped once by src/render/escape.ts: show it as Slack would,
// gpu-medic's own <@U…> mentions as @U…, Slack's three entities decoded once, then HTML-escaped once.
const slackText = (s) => esc(String(s).replace(/<@([UW][A-Z0-9]+)>/g, '@$1').replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&'));
let usersSet = false;
// A message is drawn from its blocks as Slack draws them (test/scenarios/demo-blocks.ts, the same function);
// one without blocks shows its text.
const __name = (f) => f;
${demoBlocksHtml.toString()}
// Its buttons and selects too, as the bot sent them: a click sends what Slack would (POST /click for an
// approval card's Approve/Deny, POST /action for any other control).
function blocksHtml(m) {
  return m.blocks && m.blocks.length > 0 ? demoBlocksHtml(m.blocks) : slackText(m.text);
}
function msgHtml(m, cls) {
  return '<div class="msg ' + cls + '" data-ts="' + esc(m.ts) + '"><div class="meta">' + esc(m.ts) + (m.edits ? ' · edited ' + m.edits + '×' : '') + '</div>' + blocksHtml(m) + '</div>';
}
async function refresh() {
  // An open select would close under a redraw: wait until it is left.
  if (document.activeElement && document.activeElement.matches('select.act')) return;
  const s = await (await fetch('/state')).json();
  document.getElementById('title').textContent = s.scenario.name + ' · channel ' + s.channel;
  document.getElementById('desc').textContent = (s.scenario.description || '') + (s.scenario.pending ? ' [pending: ' + s.scenario.pending + ']' : '');
  if (!usersSet) {
    document.getElementById('user').innerHTML = s.users.map((u) => '<option value="' + esc(u.name) + '">' + esc(u.name) + ' (' + esc(u.id) + ')</option>').join('');
    usersSet = true;
  }
  document.getElementById('alerts').innerHTML = s.alertsChannel ? '<div class="alerts"><b>#alerts</b> <span class="meta">(' + esc(s.alertsChannel) + ', the watchdog: one message per alert, edited in place)</span>' + (s.alerts.map((m) => '<div class="thread">' + msgHtml(m, '') + m.replies.map((r) => msgHtml(r, 'reply')).join('') + '</div>').join('') || '<p class="meta">No alerts yet.</p>') + '</div>' : '';
  document.getElementById('threads').innerHTML = s.threads.map((t) => '<div class="thread">' + msgHtml(t.parent, '') + t.replies.map((r) => msgHtml(r, 'reply')).join('') + '</div>').join('') || '<p class="meta">No messages yet. Type a command above.</p>';
  const me = document.getElementById('user').value;
  const home = s.home.find((h) => h.user === me);
  document.getElementById('home').innerHTML = home ? '<div class="home">' + demoBlocksHtml(home.blocks) + '</div><div class="meta">published ' + home.publishes + '× for ' + esc(home.user) + '</div>' : esc(me) + ' has not opened the Home tab yet.';
  document.getElementById('private').innerHTML = s.private.slice().reverse().map((n) => '<div class="note ' + (n.kind === 'error' ? 'error' : '') + '"><b>' + esc(n.user) + '</b> ' + esc(n.kind) + ': ' + slackText(n.text) + '</div>').join('');
  document.getElementById('gpus').innerHTML = Object.entries(s.gpuMemory).map(([h, g]) => '<b>' + esc(h) + '</b><table>' + g.map((x) => '<tr><td>' + x.index + '</td><td>' + x.usedMiB + ' / ' + x.totalMiB + ' MiB</td></tr>').join('') + '</table>').join('');
  document.getElementById('procs').innerHTML = s.processes.map((p) => esc(p.name + ' on ' + p.machine + ' (' + p.kind + ', host PID ' + p.hostPid + '): ' + p.cmdline)).join('<br>');
}
document.getElementById('f').addEventListener('submit', async (e) => {
  e.preventDefault();
  const user = document.getElementById('user').value, text = document.getElementById('text').value;
  const r = await fetch('/command', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ user, text }) });
  if (!r.ok) alert((await r.json()).error);
  setTimeout(refresh, 300);
});
const post = (path, body) => fetch(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
// A control of a message: its confirm dialog first (as Slack shows one), then what a click sends.
async function act(el, option) {
  const msg = el.closest('.msg[data-ts]');
  if (!msg) return;
  if (el.dataset.confirm && !confirm(el.dataset.confirm)) return;
  const user = document.getElementById('user').value, d = el.dataset;
  const which = d.actionId === 'gpu_approve' ? 'approve' : d.actionId === 'gpu_deny' ? 'deny' : null;
  const r = which !== null ? await post('/click', { user, ts: msg.dataset.ts, which })
    : await post('/action', Object.assign({ user, ts: msg.dataset.ts, actionId: d.actionId, blockId: d.blockId }, option === undefined ? {} : { option }));
  if (!r.ok) alert((await r.json()).text || r.status);
  setTimeout(refresh, 300);
}
document.body.addEventListener('click', (e) => {
  const b = e.target.closest('button.act');
  if (b) void act(b);
});
document.body.addEventListener('change', (e) => {
  const sel = e.target.closest('select.act');
  if (sel && sel.value !== '') { const v = sel.value; sel.blur(); void act(sel, v); }
});
document.getElementById('openHome').addEventListener('click', async () => {
  await post('/home', { user: document.getElementById('user').value });
  setTimeout(refresh, 500);
});
refresh();
setInterval(refresh, 1000);
</script></body></html>
`;
