// Atoll dashboard: a small single-page app over the coordinator's REST API (/api, see
// /api/openapi.json). The token lives in sessionStorage; live updates come from the
// server-sent event stream, read with fetch so the token travels in a header, not in the URL.
// Charts, number formats and exports: charts.js.
//
// Rounds are numbered as the coordinator's log and the API's round records number them, from 0
// ("round 0 committed" is the first round). The charts' x is a count instead, rounds completed:
// round r's values are at x = r + 1 (x = 0: the initial parameters); roundAtX goes back.
'use strict';

const TOKEN_KEY = 'atoll.token';
const NEXT_KEY = 'atoll.next';  // where a sign-in continues (a deep link opened signed out)
const MODEL_PRESETS = {
  tiny: { dim: 64, layers: 2, heads: 4, ffn_hidden: 192, seq_len: 128 },
  small: { dim: 128, layers: 4, heads: 4, ffn_hidden: 384, seq_len: 128 },
  base: { dim: 256, layers: 6, heads: 8, ffn_hidden: 768, seq_len: 256 },
  large: { dim: 512, layers: 8, heads: 8, ffn_hidden: 1536, seq_len: 256 },
};
const POLL_MS = 5000;    // heartbeat progress of a running live experiment (not an event)
const LOG_MAX = 2000;    // log lines kept in the page

const $ = (sel, root = document) => root.querySelector(sel);
const state = {
  role: null, view: null, stream: null, refreshTimer: null, pollTimer: null, tickTimer: null,
  selected: new Set(), compare: [], xAxis: 'round', online: true, lastOk: 0, groups: {},
  listData: null, listSort: { key: null, dir: 1 },
  createdId: null,    // the experiment just created, confirmed once on the list
  customModel: null,  // a clone's model sizes that match no preset (the form's "custom")
  experiment: null, tab: 'overview', x: null, logs: [], logKeys: new Set(), charts: {},
  logView: { rebuild: true, filter: null, shown: 0, pending: false },  // what #log-lines shows
};

// ---- small helpers ---------------------------------------------------------------------------
function fmtAgo(ms) {
  if (!ms) return '–';
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return `${s.toFixed(0)} s ago`;
  if (s < 3600) return `${(s / 60).toFixed(0)} min ago`;
  return new Date(ms).toLocaleString();
}
const CLOCK = { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' };
function fmtClock(ms) { return new Date(ms).toLocaleTimeString(undefined, CLOCK); }
// Today: the time of day; otherwise date and time.
function fmtTime(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  return d.toDateString() === new Date().toDateString() ? fmtClock(ms) : d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short', hourCycle: 'h23' });
}
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null) continue;
    if (k === 'class') e.className = v;
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null && c !== '') e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function show(node, visible) { node.hidden = !visible; }
function showError(node, message) { node.textContent = message || ''; show(node, !!message); }
function setTitle(...parts) { document.title = [...parts, 'Atoll'].join(' · '); }
const last = s => (s && s.length ? s[s.length - 1][1] : null);
// The round (0-based, as the API's records) that brought the count of rounds completed to x.
const roundAtX = x => x - 1;
// Points after at least one committed round: x = 0 is the initial parameters', no result.
const afterRounds = s => (s || []).filter(p => p[0] > 0);
const sumSeries = (s, bucket) => (s || []).reduce((a, p) => a + (p[1] || 0), 0) * (bucket || 1);

// ---- API and connection state ----------------------------------------------------------------
class ApiError extends Error {
  // errors: every error of a refused config ([{error, field}]), when the server lists them.
  constructor(status, message, field, errors) { super(message); this.status = status; this.field = field; this.errors = errors; }
}
function authHeader() { return { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ''}` }; }
// `body`: a value sent as JSON, or a JSON text already built (`bodyText`, see createBodyText).
async function api(path, { method = 'GET', body, bodyText } = {}) {
  const headers = authHeader();
  const text = bodyText !== undefined ? bodyText : body === undefined ? undefined : JSON.stringify(body);
  if (text !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, { method, headers, body: text });
  } catch (_) {
    setOnline(false);
    throw new ApiError(0, `cannot reach the coordinator at ${location.host}`);
  }
  setOnline(true);
  let data = null;
  try { data = await res.json(); } catch (_) { /* not JSON */ }
  if (!res.ok) {
    if (res.status === 401) logout(data && data.error, true);
    throw new ApiError(res.status, (data && data.error) || `HTTP ${res.status}`, data && data.field, data && data.errors);
  }
  return data;
}
// A server that stopped answering gets a banner (announced: role alert), not a small
// "Failed to fetch"; the page keeps what it showed and retries through the event stream.
function setOnline(ok) {
  if (ok) state.lastOk = Date.now();
  if (ok === state.online) return;
  state.online = ok;
  const banner = $('#conn-banner');
  if (!ok) {
    banner.textContent = `Cannot reach the coordinator at ${location.host}: it has stopped or the network is down. ` +
      `Retrying every 2 s; the page shows what it had at ${fmtTime(state.lastOk || Date.now())}.`;
    const ind = $('#live-indicator');
    ind.className = 'live down';
    ind.textContent = 'offline';
  }
  show(banner, !ok);
  if (state.view === 'experiment') renderStats();  // its live figures follow the connection (liveData)
}

// ---- live events (server-sent events over fetch) ---------------------------------------------
function setLive(on) {
  const ind = $('#live-indicator');
  ind.className = on ? 'live on' : state.online ? 'live off' : 'live down';
  ind.textContent = state.online ? 'live' : 'offline';
}
function stopStream() {
  if (state.stream) { state.stream.abort(); state.stream = null; }
  setLive(false);
}
// onEvent(kind, {experiment, data}); onConnect() after every (re)connection, to catch up.
function startStream(path, onEvent, onConnect) {
  stopStream();
  const ctrl = new AbortController();
  state.stream = ctrl;
  const run = async () => {
    let first = true;
    while (!ctrl.signal.aborted) {
      try {
        let res;
        try {
          res = await fetch(path, { headers: authHeader(), signal: ctrl.signal });
        } catch (e) {
          if (!ctrl.signal.aborted) setOnline(false);
          throw e;
        }
        if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
        setOnline(true);
        setLive(true);
        if (!first && onConnect) onConnect();
        first = false;
        await readEvents(res.body, onEvent);
      } catch (_) { /* reconnect below */ }
      if (ctrl.signal.aborted) return;
      setLive(false);
      await new Promise(r => setTimeout(r, 2000));
    }
  };
  run();
}
async function readEvents(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let kind = 'message', data = '';
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) kind = line.slice(7);
        else if (line.startsWith('data: ')) data += line.slice(6);
      }
      if (data) {
        let msg = null;
        try { msg = JSON.parse(data); } catch (_) { /* ignore */ }
        if (msg) onEvent(kind, msg);
      }
    }
  }
}
// At most one refresh per `delay` ms however many events arrive (a busy run sends several per
// round; a debounce would never fire).
function scheduleRefresh(fn, delay = 1000) {
  if (state.refreshTimer) return;
  state.refreshTimer = setTimeout(() => { state.refreshTimer = null; fn(); }, delay);
}
function clearTimers() {
  clearTimeout(state.refreshTimer); state.refreshTimer = null;
  clearTimeout(state.pollTimer); state.pollTimer = null;
  clearInterval(state.tickTimer); state.tickTimer = null;
}

// ---- session --------------------------------------------------------------------------------
function logout(message, remember = false) {
  if (remember && !/^#\/login/.test(location.hash)) sessionStorage.setItem(NEXT_KEY, location.hash || '#/');
  sessionStorage.removeItem(TOKEN_KEY);
  state.role = null;
  document.body.classList.remove('is-admin');
  $('#role').textContent = '';
  show($('#logout'), false);
  stopStream();
  if (message) showError($('#login-error'), message);
  location.hash = '#/login';
}
// true: signed in; false: no valid token; throws ApiError(0) when the server cannot be reached.
async function ensureSession() {
  if (state.role) return true;
  if (!sessionStorage.getItem(TOKEN_KEY)) return false;
  try {
    const who = await api('api/whoami');
    state.role = who.role;
  } catch (e) {
    if (e.status === 0) throw e;
    return false;
  }
  document.body.classList.toggle('is-admin', state.role === 'admin');
  $('#role').textContent = state.role;
  show($('#logout'), true);
  return true;
}

// ---- router ---------------------------------------------------------------------------------
function parseHash(hash) {
  if (hash === '#/login') return { view: 'login' };
  if (hash === '#/new') return { view: 'new' };
  const clone = hash.match(/^#\/new\/([A-Za-z0-9._-]{1,64})$/);
  if (clone) return { view: 'new', from: clone[1] };
  const m = hash.match(/^#\/e\/([A-Za-z0-9._-]{1,64})(?:\/(config|logs))?$/);
  if (m) return { view: 'experiment', id: m[1], tab: m[2] || 'overview' };
  const c = hash.match(/^#\/compare\/([A-Za-z0-9._,-]{1,1000})$/);
  if (c) return { view: 'compare', ids: c[1].split(',').filter(Boolean) };
  return { view: 'list' };
}
async function route() {
  const hash = location.hash || '#/';
  const r = parseHash(hash);
  if (r.view === 'login') { leaveView(); return showLogin(); }
  let signedIn;
  try { signedIn = await ensureSession(); } catch (_) {
    setTimeout(route, 2000);  // the banner says why; try again
    return;
  }
  if (!signedIn) {
    sessionStorage.setItem(NEXT_KEY, hash);
    location.hash = '#/login';
    return;
  }
  if (r.view === 'experiment' && state.view === 'experiment' && state.experiment === r.id)
    return selectTab(r.tab);  // same experiment, another tab: nothing to fetch
  leaveView();
  if (r.view === 'experiment') return showExperiment(r.id, r.tab);
  if (r.view === 'compare') return showCompare(r.ids);
  if (r.view === 'new') return showCreate(r.from);
  return showList();
}
function leaveView() {
  clearTimers();
  stopStream();
  state.view = null;
  state.experiment = null;
  for (const v of document.querySelectorAll('.view')) show(v, false);
}
function showLogin() {
  show($('#view-login'), true);
  setTitle('Sign in');
  $('#token-input').focus();
}

// ---- experiments list -----------------------------------------------------------------------
async function showList() {
  state.view = 'list';
  show($('#view-list'), true);
  // The confirmation of a Create, shown once, on the list it leads to.
  const created = state.createdId;
  state.createdId = null;
  $('#list-created').replaceChildren(...(created ? ['Created experiment ', el('a', { href: `#/e/${created}` }, created), '.'] : []));
  show($('#list-created'), !!created);
  setTitle('Experiments');
  await renderList();
  // Every change (rounds, nodes, states, new experiments) is an event: no polling.
  startStream('api/events', () => scheduleRefresh(renderList), renderList);
}
// A refused action's error stays until the user's next action or a successful one: on the
// experiment page it has its own line, which the page's refreshes (the one after the action
// included) leave alone.
async function act(id, action) {
  if ((action === 'stop' || action === 'delete') &&
      !confirm(`${action === 'stop' ? 'Stop' : 'Delete'} experiment ${id}? This cannot be undone.`)) return;
  const target = state.view === 'experiment' ? $('#x-action-error') : $('#list-error');
  showError(target, '');
  try {
    if (action === 'delete') await api(`api/experiments/${id}`, { method: 'DELETE' });
    else await api(`api/experiments/${id}/${action}`, { method: 'POST' });
    showError(target, '');
  } catch (e) {
    if (e.status !== 0) showError(target, `${action}: ${e.message}`);
  }
  if (state.view === 'experiment') refreshExperiment(); else renderList();
}
function actionsFor(x) {
  const acts = [];
  // Not live: starting it makes it live, when the live experiment is not running.
  if (x.state === 'created') acts.push('start');
  if (x.state === 'running') acts.push('pause');
  if (x.state === 'paused') acts.push('resume');
  if (x.state !== 'finished' && x.state !== 'failed') acts.push('stop');
  if (!x.live) acts.push('delete');
  return acts;
}
async function renderList() {
  if (state.view !== 'list') return;
  let data;
  try { data = await api('api/experiments'); } catch (e) {
    if (e.status !== 0) showError($('#list-error'), e.message);
    return;
  }
  if (state.view !== 'list') return;
  const ids = new Set(data.experiments.map(x => x.id));
  for (const id of [...state.selected]) if (!ids.has(id)) state.selected.delete(id);
  state.listData = data.experiments;
  renderListRows();
}
// Sort keys of the list's columns (numbers sort numerically; missing values last).
const LIST_SORT = {
  id: x => x.id, state: x => x.state, rounds: x => x.current_round, bpb: x => x.final_val_bpb,
  duration: x => (x.started_unix_ms ? x.duration_s : null), params: x => x.params,
  codec: x => x.config.train.codec, created: x => x.created_unix_ms,
};
function renderListRows() {
  const all = state.listData || [];
  const words = $('#list-filter').value.trim().toLowerCase().split(/\s+/).filter(Boolean);
  const want = $('#list-state').value;
  const text = x => [x.id, x.state, x.config.train.codec, x.config.algorithm, x.live ? 'live' : ''].join(' ').toLowerCase();
  let rows = all.filter(x => (!want || x.state === want) && words.every(w => text(x).includes(w)));
  const { key, dir } = state.listSort;
  if (key) {
    const k = LIST_SORT[key];
    rows = rows.slice().sort((a, b) => {
      const va = k(a), vb = k(b);
      if (va == null || vb == null) return va == null ? (vb == null ? 0 : 1) : -1;
      return (typeof va === 'number' ? va - vb : String(va).localeCompare(String(vb))) * dir;
    });
  }
  for (const th of document.querySelectorAll('#experiments-table th[data-sort]')) {
    if (th.dataset.sort === key) th.setAttribute('aria-sort', dir > 0 ? 'ascending' : 'descending');
    else th.removeAttribute('aria-sort');
  }
  $('#list-count').textContent = rows.length === all.length ? `${all.length} experiments` : `${rows.length} of ${all.length} experiments`;
  const tbody = $('#experiments-table tbody');
  tbody.replaceChildren(...rows.map(x => el('tr', { dataset: { id: x.id } },
    el('td', { class: 'pick' }, pickBox(x.id)),
    el('td', {}, el('a', { href: `#/e/${x.id}` }, x.id), x.live ? el('span', { class: 'muted' }, ' · live') : ''),
    el('td', {}, el('span', { class: `state ${x.state}` }, x.state)),
    el('td', { class: 'num' }, `${x.current_round} / ${x.rounds}`),
    el('td', { class: 'num', dataset: { value: x.final_val_bpb == null ? '' : String(x.final_val_bpb) } }, fmtNum(x.final_val_bpb)),
    el('td', { class: 'num', dataset: { value: x.started_unix_ms ? String(x.duration_s) : '' } }, x.started_unix_ms ? fmtDuration(x.duration_s) : '–'),
    el('td', { class: 'num' }, fmtCount(x.params)),
    el('td', { class: 'mono' }, x.config.train.codec),
    el('td', { class: 'num' }, x.live ? `${x.active_nodes} active` : `${x.config.diloco.min_nodes}`),
    el('td', {}, new Date(x.created_unix_ms).toLocaleString()),
    el('td', { class: 'admin-only actions' }, ...actionsFor(x).map(a =>
      el('button', { class: `small ${a === 'stop' || a === 'delete' ? 'danger' : ''}`, onclick: () => act(x.id, a) }, a))),
  )));
  show($('#list-empty'), all.length === 0);
  show($('#list-none'), all.length > 0 && rows.length === 0);
  updateCompareButton();
}
function onSortClick(th) {
  const key = th.dataset.sort;
  state.listSort = state.listSort.key === key ? { key, dir: -state.listSort.dir } : { key, dir: 1 };
  renderListRows();
}
function pickBox(id) {
  const box = el('input', { type: 'checkbox', 'aria-label': `select ${id} to compare`, dataset: { pick: id } });
  box.checked = state.selected.has(id);
  box.addEventListener('change', () => {
    if (box.checked) state.selected.add(id); else state.selected.delete(id);
    updateCompareButton();
  });
  return box;
}
function updateCompareButton() {
  const b = $('#compare-button');
  b.disabled = state.selected.size < 2;
  b.textContent = state.selected.size >= 2 ? `Compare ${state.selected.size}` : 'Compare selected';
}

// ---- create ---------------------------------------------------------------------------------
// `from`: clone that experiment: its whole stored config in the TOML editor, under a new name.
async function showCreate(from) {
  state.view = 'new';
  const form = $('#create-form');
  clearFormErrors(form);
  show($('#view-new'), true);
  setTitle(from ? `Clone ${from}` : 'New experiment');
  $('#new-title').textContent = from ? `Clone ${from}` : 'New experiment';
  showError($('#create-error'), state.role !== 'admin' ? 'Creating experiments needs an admin token.' : '');
  $('#f-toml').value = '';
  $('#toml-editor').open = false;
  setCustomModel(null);
  syncTomlMode();
  if (from) {
    let x;
    try { x = await api(`api/experiments/${from}`); } catch (e) {
      if (e.status !== 0) showError($('#create-error'), `clone: ${e.message}`);
      return;
    }
    if (state.view !== 'new') return;
    const name = `${from}-2`.slice(0, 64);
    fillForm(x.config, name);
    // The seed as stored, digit for digit: x.config.seed went through a JS number, which rounds
    // integers above 2^53.
    const seed = x.config_toml.match(/^seed = (\d+)$/m);
    if (seed) $('#f-seed').value = seed[1];
    $('#f-toml').value = x.config_toml.replace(/^name = .*$/m, `name = ${JSON.stringify(name)}`);
    syncTomlMode();
    $('#toml-editor').open = true;
    $('#f-toml').focus();
    return;
  }
  $('#f-name').focus();
}
// The form's fields from a config (a clone's): what the TOML editor holds, field by field. A
// model that is not one of the presets in every field is "custom", with its own sizes.
function fillForm(c, name) {
  const preset = Object.entries(MODEL_PRESETS).find(([, p]) => Object.entries(p).every(([k, v]) => c.model[k] === v));
  if (!preset) setCustomModel(Object.fromEntries(Object.keys(MODEL_PRESETS.small).map(k => [k, c.model[k]])));
  const values = {
    name, seed: c.seed, algorithm: c.algorithm, nodes: c.diloco.min_nodes, rounds: c.diloco.rounds,
    inner_steps: c.diloco.inner_steps, lr: c.train.lr, outer_lr: c.diloco.outer_lr,
    outer_momentum: c.diloco.outer_momentum, codec: c.train.codec, pull_codec: c.diloco.pull_codec,
    split: c.data.split, model: preset ? preset[0] : 'custom',
  };
  for (const [k, v] of Object.entries(values)) {
    const input = $('#create-form').querySelector(`[name="${k}"]`);
    if (input && v != null) input.value = String(v);
  }
}
// The model select's "custom" option: a clone's model sizes that match no preset (null: none).
function setCustomModel(model) {
  state.customModel = model;
  const select = $('#f-model');
  const old = select.querySelector('option[value="custom"]');
  if (old) old.remove();
  if (!model) return;
  select.append(el('option', { value: 'custom' }, 'custom (the clone\'s sizes)'));
}
// Every size the chosen model sends, under the select (the options name the presets only, so
// that they fit a phone's width).
function showModelSizes() {
  const choice = $('#f-model').value;
  const m = choice === 'custom' ? state.customModel : MODEL_PRESETS[choice];
  $('#f-model-sizes').textContent = m ? `dim ${m.dim} · ${m.layers} layers · ${m.heads} heads · ffn ${m.ffn_hidden} · seq ${m.seq_len}` : '';
}
// A TOML text is sent instead of the fields (submitCreate): while the editor holds one, the
// fields are disabled and a note says so, so that what Create sends is what the page shows.
function syncTomlMode() {
  showModelSizes();
  const fromToml = $('#f-toml').value.trim() !== '';
  for (const input of $('#create-form').querySelectorAll('input, select')) input.disabled = fromToml;
  show($('#f-toml-active'), fromToml);
}
const FIELD_OF_KEY = [
  [/^name$/, 'name'], [/^seed$/, 'seed'], [/^algorithm$/, 'algorithm'], [/^model\./, 'model'],
  [/^diloco\.(min|max)_nodes$/, 'nodes'], [/^diloco\.rounds$/, 'rounds'], [/^diloco\.inner_steps$/, 'inner_steps'],
  [/^train\.lr$/, 'lr'], [/^diloco\.outer_lr$/, 'outer_lr'], [/^diloco\.outer_momentum$/, 'outer_momentum'],
  [/^train\.codec$/, 'codec'], [/^diloco\.pull_codec$/, 'pull_codec'], [/^data\.split$/, 'split'],
];
function clearFormErrors(form) {
  for (const p of form.querySelectorAll('.error[data-for]')) p.replaceChildren();
  for (const i of form.querySelectorAll('[aria-invalid]')) i.removeAttribute('aria-invalid');
  showError($('#create-error'), '');
}
// Every error the server found (`errors`, or the one `error`): under its form field, or listed
// under the TOML editor when the config came from there, or in the form's error line.
function showCreateErrors(form, e, fromToml) {
  const errors = e.errors && e.errors.length ? e.errors : [{ error: e.message, field: e.field }];
  const text = m => m.replace(/^(request|config): /, '');
  const rest = [];
  let first = null;
  for (const err of errors) {
    const hit = !fromToml && err.field && FIELD_OF_KEY.find(([re]) => re.test(err.field));
    const input = hit && form.querySelector(`[name="${hit[1]}"]`);
    if (!input) { rest.push(text(err.error)); continue; }
    const p = form.querySelector(`.error[data-for="${hit[1]}"]`);
    p.textContent = p.textContent ? `${p.textContent} ${text(err.error)}` : text(err.error);
    input.setAttribute('aria-invalid', 'true');
    first = first || input;
  }
  if (fromToml) {
    $('#f-toml-error').replaceChildren(...rest.map(m => el('li', {}, m)));
    $('#f-toml').setAttribute('aria-invalid', 'true');
    first = $('#f-toml');
  } else if (rest.length) {
    showError($('#create-error'), rest.join(' · '));
  }
  if (first) first.focus();
}
function numOrRaw(v) { const t = v.trim(); return t !== '' && isFinite(Number(t)) ? Number(t) : v; }
function intOrRaw(v) { return /^-?\d+$/.test(v.trim()) ? Number(v) : v; }
// The create body's JSON text with the seed exactly as typed: a JS number holds integers exactly
// only up to 2^53 (9007199254740993 would be sent as ...992), and seeds go up to 2^63 − 1. An
// integer is written as its digits (BigInt drops leading zeros, which JSON forbids); anything
// else goes as a string, which the server refuses in one line.
function createBodyText(fields, seedText) {
  const t = seedText.trim();
  const seed = /^-?\d+$/.test(t) ? BigInt(t).toString() : JSON.stringify(seedText);
  const rest = JSON.stringify(fields);
  return `{"seed":${seed}${rest === '{}' ? '}' : `,${rest.slice(1)}`}`;
}
async function submitCreate(ev) {
  ev.preventDefault();
  const form = ev.target;
  clearFormErrors(form);
  const f = Object.fromEntries(new FormData(form).entries());
  const fromToml = f.config_toml.trim() !== '';
  const nodes = fromToml ? null : intOrRaw(f.nodes);  // disabled fields are not in the form data
  const fields = fromToml ? null : {
    name: f.name.trim(),
    algorithm: f.algorithm,
    model: f.model === 'custom' ? state.customModel : MODEL_PRESETS[f.model],
    train: { codec: f.codec.trim(), lr: numOrRaw(f.lr) },
    diloco: {
      rounds: intOrRaw(f.rounds), inner_steps: intOrRaw(f.inner_steps), min_nodes: nodes, max_nodes: nodes,
      outer_lr: numOrRaw(f.outer_lr), outer_momentum: numOrRaw(f.outer_momentum), pull_codec: f.pull_codec,
    },
    data: { split: f.split },
  };
  const bodyText = fromToml ? JSON.stringify({ config_toml: f.config_toml }) : createBodyText(fields, f.seed);
  $('#create-submit').disabled = true;
  try {
    const created = await api('api/experiments', { method: 'POST', bodyText });
    form.reset();
    state.createdId = created.id;  // the list confirms it (showList)
    location.hash = '#/';
  } catch (e) {
    if (e.status !== 0) showCreateErrors(form, e, fromToml);
  } finally {
    $('#create-submit').disabled = false;
  }
}

// ---- experiment page ------------------------------------------------------------------------
const TAB_NAMES = { overview: 'Overview', config: 'Config', logs: 'Logs' };
// The smoothing slider, linear/log select and "Reset zoom" button of a page's chart group
// (prefix "x" on the experiment page, "c" on the compare page).
function chartControls(prefix) {
  const group = new ChartGroup(view => {
    $(`#${prefix}-smoothing`).value = String(view.smoothing);
    $(`#${prefix}-smoothing-value`).textContent = String(view.smoothing);
    $(`#${prefix}-yscale`).value = view.logY ? 'log' : 'linear';
    show($(`#${prefix}-zoom-reset`), !!view.zoom);
  });
  $(`#${prefix}-smoothing`).addEventListener('input', ev => group.update({ smoothing: Number(ev.target.value) }));
  $(`#${prefix}-yscale`).addEventListener('change', ev => group.update({ logY: ev.target.value === 'log' }));
  $(`#${prefix}-zoom-reset`).addEventListener('click', () => group.resetZoom());
  return group;
}
function ensureCharts() {
  if (state.charts.bpb) return;
  state.groups.x = chartControls('x');
  const make = (key, o) => {
    state.charts[key] = new LineChart($(`figure[data-chart="${key}"]`), { ...o, group: state.groups.x, file: () => `${state.experiment}-${key}` });
  };
  make('bpb', { id: 'chart-bpb', caption: 'Validation bits per byte (global model)', yTitle: 'bits per byte' });
  make('loss', { id: 'chart-loss', caption: 'Inner training loss per node', yTitle: 'loss (nats)' });
  make('bytes', { id: 'chart-bytes', caption: 'Bytes per round vs data-parallel', yTitle: 'bytes per round', logY: true, unit: 'bytes' });
  make('duration', { id: 'chart-duration', caption: 'Round duration', yTitle: 'seconds', unit: 'seconds' });
  make('sites', { id: 'chart-sites', caption: 'Site validation bpb (each site on its own data)', yTitle: 'bits per byte' });
  make('distill', { id: 'chart-distill', caption: 'Teacher bytes per training token, per site', yTitle: 'bytes per token' });
  make('privacy', { id: 'chart-privacy', caption: 'Privacy spent: epsilon after each round', yTitle: 'epsilon' });
}
const X_CHARTS = ['bpb', 'loss', 'bytes', 'duration', 'sites', 'distill', 'privacy'];
// Everything of the previous experiment goes before the next one is fetched, so an unknown id
// never shows the last experiment's title, numbers, charts or enabled buttons.
function resetExperiment(id) {
  state.experiment = id;
  if (state.groups.x && state.groups.x.view.zoom) state.groups.x.update({ zoom: null });
  state.x = { id, summary: null, metrics: null, nodes: [], rounds: null, subnets: null, startMs: null, started: 0, applied: 0 };
  state.logs = [];
  state.logKeys = new Set();
  state.logView = { rebuild: true, filter: null, shown: 0, pending: false };
  $('#x-title').textContent = id;
  show($('#x-state'), false);
  show($('#x-actions'), false);
  show($('#x-body'), false);
  showError($('#x-error'), '');
  showError($('#x-action-error'), '');
  $('#x-stats').replaceChildren();
  show($('#x-note'), false);
  show($('#x-waiting'), false);
  show($('#x-charts'), false);
  for (const k of X_CHARTS) if (state.charts[k]) state.charts[k].clear();
  show($('#x-sites'), false);
  $('#sites-table tbody').replaceChildren();
  show($('#x-robust'), false);
  $('#robust-reasons tbody').replaceChildren();
  show($('#x-distill'), false);
  $('#distill-table tbody').replaceChildren();
  show($('#x-privacy'), false);
  $('#nodes-table thead tr').replaceChildren();
  $('#nodes-table tbody').replaceChildren();
  show($('#x-subnets'), false);
  $('#subnet-grids').replaceChildren();
  $('#timeline').replaceChildren();
  delete $('#timeline').dataset.rounds;
  $('#rounds-table tbody').replaceChildren();
  $('#config-toml').textContent = '';
  renderLogs();
  for (const a of document.querySelectorAll('.tabs a')) {
    a.href = `#/e/${id}${a.dataset.tab === 'overview' ? '' : '/' + a.dataset.tab}`;
  }
}
function selectTab(tab) {
  state.tab = tab;
  for (const a of document.querySelectorAll('.tabs a')) {
    if (a.dataset.tab === tab) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  show($('#x-overview'), tab === 'overview');
  show($('#x-config'), tab === 'config');
  show($('#x-logs'), tab === 'logs');
  if (tab === 'logs') renderLogs();
  // Chart.js measures its box when it becomes visible again.
  if (tab === 'overview') for (const k of X_CHARTS) if (state.charts[k]) state.charts[k].chart.resize();
  setTitle(`${state.experiment} — ${TAB_NAMES[tab]}`);
}
async function showExperiment(id, tab) {
  state.view = 'experiment';
  ensureCharts();
  resetExperiment(id);
  show($('#view-experiment'), true);
  selectTab(tab);
  await refreshExperiment();
  if (state.view !== 'experiment' || state.experiment !== id || !state.x.summary) return;
  startStream(`api/experiments/${id}/events`, onExperimentEvent, refreshExperiment);
}
function onExperimentEvent(kind, msg) {
  if (msg.experiment !== state.experiment) return;
  logEvent(kind, msg.data || {});
  scheduleRefresh(refreshExperiment);
}
async function refreshExperiment() {
  const id = state.experiment;
  if (state.view !== 'experiment' || !id) return;
  clearTimeout(state.pollTimer);
  const seq = ++state.x.started;  // a slower, older refresh must not overwrite a newer one
  let x, m, n, r, sn = null, rejected = null;
  try {
    [x, m, n, r] = await Promise.all([
      api(`api/experiments/${id}`), api(`api/experiments/${id}/metrics?max_points=400`),
      api(`api/experiments/${id}/nodes`), newRounds(id),
    ]);
    if (x.config.algorithm === 'hydra') sn = await api(`api/experiments/${id}/subnets`);
    if (x.live) rejected = await rejectionsByReason();
    if (state.x.startMs == null && r.total > 0) {
      const first = r.from === 0 && r.rounds.length ? r.rounds[0]
        : (await api(`api/experiments/${id}/rounds?from=0&limit=1`)).rounds[0];
      if (first) state.x.startMs = first.committed_unix_ms - 1000 * (first.duration_s || 0);
    }
  } catch (e) {
    if (state.view !== 'experiment' || state.experiment !== id) return;
    if (e.status === 404) return showNotFound(id);
    if (e.status !== 0) showError($('#x-error'), e.message);
    return;
  }
  if (state.view !== 'experiment' || state.experiment !== id || seq < state.x.applied) return;
  state.x.applied = seq;
  Object.assign(state.x, { summary: x, metrics: m, nodes: n.nodes, rounds: r, subnets: sn, rejected });
  showError($('#x-error'), '');
  show($('#x-body'), true);
  renderExperiment();
  // Only a running live experiment changes without telling: its nodes' heartbeat progress.
  if (x.live && x.state === 'running') state.pollTimer = setTimeout(refreshExperiment, POLL_MS);
  clearInterval(state.tickTimer);
  state.tickTimer = x.state === 'running' ? setInterval(renderStats, 1000) : null;
}
// The last ROUNDS_KEPT committed rounds. Committed rounds never change: after the first page
// only the rounds after the last one known are fetched.
const ROUNDS_KEPT = 200;
async function newRounds(id) {
  const known = state.x.rounds;
  const next = known && known.rounds.length ? known.rounds[known.rounds.length - 1].round + 1 : null;
  const page = await api(`api/experiments/${id}/rounds?` + (next == null ? `limit=${ROUNDS_KEPT}` : `from=${next}&limit=${ROUNDS_KEPT}`));
  if (next == null) return page;
  if (page.total - next > ROUNDS_KEPT) return api(`api/experiments/${id}/rounds?limit=${ROUNDS_KEPT}`);  // far behind
  const rounds = known.rounds.concat(page.rounds).slice(-ROUNDS_KEPT);
  return { total: page.total, from: rounds.length ? rounds[0].round : page.total, rounds };
}
function showNotFound(id) {
  clearTimers();
  stopStream();
  state.x.summary = null;
  $('#x-title').textContent = id;
  show($('#x-body'), false);
  show($('#x-actions'), false);
  show($('#x-state'), false);
  const error = $('#x-error');
  error.replaceChildren(`There is no experiment “${id}” in this coordinator's store. It may have been deleted, ` +
    'or the link has a typo; ', el('a', { href: '#/' }, 'the experiments page'), ' lists what there is.');
  show(error, true);
  setTitle(`Not found: ${id}`);
}
function renderExperiment() {
  const { summary: x, metrics: m, nodes, rounds, subnets, rejected } = state.x;
  renderHeader(x);
  renderStats();
  renderNote(x);
  renderWaiting(x);
  const hasData = x.current_round > 0 || ((m.global || {}).val_bpb || []).length > 1;
  show($('#x-charts'), hasData);
  renderCharts();
  renderNodes(x, m, nodes);
  renderSubnets(x, subnets);
  renderSites(x, m, nodes, subnets);
  renderRobust(x, rounds, rejected);
  renderDistill(m);
  renderPrivacy(x, m, rounds);
  renderRounds(rounds);
  if (!$('#config-toml').textContent) $('#config-toml').textContent = x.config_toml;
  for (const rec of rounds.rounds) logRound(rec, true);
}
function renderHeader(x) {
  $('#x-title').textContent = x.id;
  const st = $('#x-state');
  st.textContent = x.state;
  st.className = `state ${x.state}`;
  show(st, true);
  show($('#x-actions'), true);
  // Only what applies now (start a created one, pause a running one, ...).
  for (const b of document.querySelectorAll('#x-actions button')) show(b, actionsFor(x).includes(b.dataset.action));
  $('#x-clone').href = `#/new/${x.id}`;
  $('#x-checkpoint').dataset.id = x.id;
  $('#x-checkpoint').dataset.round = x.current_round;
}
function stat(k, v, key) { return el('div', { class: 'stat', dataset: { stat: key } }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, v)); }
// Live figures (a running clock, the ETA, active nodes) need live data: the experiment served
// by this coordinator and the coordinator answering. Without it the page cannot know whether
// the run goes on, so they are not extrapolated.
const liveData = x => x.live && state.online;
// Start: the first round's start (its commit time minus its duration). ETA as the terminal
// computes it: the mean time per round so far times the rounds left, less the time since the
// last commit. Without live data, elapsed stops at the last answer of the coordinator (when it
// stopped answering) or at the last commit (when no coordinator serves the experiment).
function runTimes(x, rounds) {
  const start = state.x.startMs;
  const lastRec = rounds && rounds.rounds.length ? rounds.rounds[rounds.rounds.length - 1] : null;
  const lastCommit = lastRec ? lastRec.committed_unix_ms : null;
  const ended = x.state === 'finished' || x.state === 'failed';
  const t = { start, end: ended ? lastCommit : null, elapsed: null, eta: null };
  const running = x.state === 'running' && x.live;
  const until = t.end || (running ? (state.online ? Date.now() : state.lastOk) : lastCommit) || Date.now();
  if (start) t.elapsed = (until - start) / 1000;
  if (x.state === 'running' && liveData(x) && start && lastCommit && x.current_round > 0) {
    const perRound = (lastCommit - start) / 1000 / x.current_round;
    t.eta = Math.max(0, perRound * (x.rounds - x.current_round) - (Date.now() - lastCommit) / 1000);
  }
  return t;
}
function renderStats() {
  if (!state.x || !state.x.summary) return;
  const { summary: x, metrics: m, rounds } = state.x;
  const g = m.global || {};
  const sent = sumSeries(g.bytes, m.bucket), ddp = sumSeries(g.ddp_bytes, m.bucket);
  const t = runTimes(x, rounds);
  $('#x-stats').replaceChildren(
    stat('Rounds done', `${x.current_round} / ${x.rounds}`, 'rounds'),
    stat('Validation bpb', fmtNum(last(g.val_bpb)), 'bpb'),
    stat('Mean inner loss', fmtNum(last(g.mean_loss)), 'loss'),
    stat('Parameters', fmtCount(x.params), 'params'),
    stat('Bytes moved', fmtBytes(sent), 'bytes'),
    stat('vs data-parallel', ddp > 0 && sent > 0 ? `${(ddp / sent).toFixed(1)}× less` : '–', 'ddp'),
    stat('Codec', x.config.train.codec, 'codec'),
    stat('Active nodes', liveData(x) ? `${x.active_nodes} / ${x.config.diloco.min_nodes}` : '–', 'nodes'),
    stat('Started', t.start ? fmtTime(t.start) : 'not yet', 'started'),
    stat('Elapsed', fmtDuration(t.elapsed), 'elapsed'),
    t.end ? stat('Ended', fmtTime(t.end), 'ended') : stat('ETA', x.state === 'running' ? fmtDuration(t.eta) : '–', 'eta'),
  );
}
// Plain words for where this experiment stands when that is not obvious from the charts.
function renderNote(x) {
  let text = '';
  const admin = state.role === 'admin';
  if (x.state === 'failed') text = `This experiment failed: ${x.failure || 'no reason recorded'}.`;
  else if (!x.live && x.state === 'created')
    text = 'Not started yet.' + (admin ? ' Start makes it the experiment this coordinator serves; nodes then join it.' : '');
  else if (!x.live && (x.state === 'running' || x.state === 'paused'))
    text = 'This coordinator serves another experiment right now, so this page shows what its store keeps ' +
      '(rounds, metrics, the config), without live node progress.' +
      (admin ? ` ${x.state === 'paused' ? 'Resume' : 'Start'} makes it the served one once the current one is not running.` : '');
  else if (x.live && x.state === 'paused') text = 'Paused: nodes wait until it is resumed.';
  $('#x-note').textContent = text;
  show($('#x-note'), !!text);
}
// A running experiment without enough nodes: how many are missing and the command that adds one.
function renderWaiting(x) {
  const box = $('#x-waiting');
  const need = x.config.diloco.min_nodes - x.active_nodes;
  if (!(x.live && x.state === 'running' && need > 0)) { show(box, false); return false; }
  let addr = x.node_address || 'HOST:PORT';
  addr = addr.replace(/^(0\.0\.0\.0|\[::\]|::):/, `${location.hostname}:`);
  const cmd = `atoll node --coordinator ${addr} --tls DIR --name NAME --data brown:a,b`;
  box.replaceChildren(
    el('p', {}, el('strong', {}, `Waiting for ${need} node${need === 1 ? '' : 's'}`),
      ` — ${x.active_nodes} of ${x.config.diloco.min_nodes} joined; ` +
      (x.current_round > 0 ? 'rounds continue when enough are back.' : 'the first round starts when enough have joined.')),
    el('p', {}, 'Join with:'),
    el('pre', { class: 'code card', dataset: { command: cmd } }, cmd),
    el('p', { class: 'muted' }, 'DIR holds ca.crt and the node\'s certificate NAME.crt / NAME.key (',
      el('code', {}, 'atoll ca issue --dir DIR --name NAME'), '); --data names the node\'s own data (docs/data.md).'));
  show(box, true);
  return true;
}
function onAxisChange(ev) {
  state.xAxis = ev.target.value;
  // A zoomed range is in the old axis' units.
  for (const g of Object.values(state.groups)) if (g.view.zoom) g.update({ zoom: null });
  for (const s of document.querySelectorAll('.xaxis-select')) s.value = state.xAxis;
  if (state.view === 'experiment' && state.x && state.x.metrics) renderCharts();
  if (state.view === 'compare' && state.compareRows) renderCompareCharts(state.compareRows);
}
function renderCharts() {
  const { summary: x, metrics: m } = state.x;
  const axis = state.xAxis;
  const map = xMapper(m, axis);
  const g = m.global || {};
  const nodeLoss = (m.per_node && m.per_node.loss) || {};
  const sets = {
    bpb: [{ label: 'validation bpb', data: toPoints(g.val_bpb, map) }],
    loss: Object.keys(nodeLoss).sort().map(n => ({ label: n, data: toPoints(nodeLoss[n], map) })),
    bytes: [
      { label: 'DiLoCo (sent + received)', data: toPoints(g.bytes, map) },
      { label: 'data-parallel equivalent', data: toPoints(g.ddp_bytes, map), dash: [6, 4], color: '#94a3b8' },
    ],
    duration: [{ label: 'round duration (s)', data: toPoints(g.duration_s, map) }],
  };
  // One x range for all four: 0 to the end of the last committed round.
  const xMax = Math.max(map(m.total_rounds || 0), maxX(...Object.values(sets)));
  const note = m.bucket > 1 ? ` (${m.bucket} rounds per point)` : '';
  const empty = {
    bpb: x.config.algorithm === 'hydra'
      ? 'No global validation: Hydra sites report their own bpb (Site val bpb in the node table).'
      : 'No validation bpb for this experiment: it appears when the coordinator evaluates the global model (atoll demo; atoll coordinator --eval-data brown).',
  };
  for (const [k, s] of Object.entries(sets)) state.charts[k].set(s, axis, xMax, note, empty[k]);
  $('#x-bucket').textContent = m.bucket > 1 ? `each point averages ${m.bucket} rounds` : '';
  const canvas = $('#chart-bpb');
  canvas.dataset.points = String((g.val_bpb || []).length);
  canvas.dataset.rounds = String(m.total_rounds);
  canvas.closest('.charts').dataset.experiment = x.id;
}
// A node's "now": the round it works on (0-based, as the log) and its step, from its last heartbeat. A
// heartbeat older than the last commit (heartbeats come every second, rounds can be shorter)
// says at least the round in progress; nodes that left or were lost, and experiments that are
// not running, have no "now".
function nodeNow(x, n) {
  if (!(x.live && x.state === 'running' && n.status === 'active')) return { text: '–' };
  // Inner steps of one round: H, or H/P in Streaming DiLoCo (a round syncs one of P fragments).
  const H = Math.floor(x.config.diloco.inner_steps / (x.config.diloco.streaming_fragments || 1));
  if (n.round < x.current_round)
    return { round: x.current_round, text: `round ${x.current_round}`, title: 'waiting for this node\'s next heartbeat' };
  return { round: n.round, text: `round ${n.round} · step ${n.inner_step} / ${H}` };
}
function renderNodes(x, m, nodes) {
  const siteVal = (m.per_node && m.per_node.site_val_bpb) || {};
  const hasSiteVal = Object.keys(siteVal).length > 0;
  const heads = ['Node', 'Status', 'Device', 'Now', 'Loss', 'Tokens/s', 'Last heartbeat', 'Rounds pushed',
    ...(hasSiteVal ? ['Site val bpb'] : []), 'Sent', 'Received'];
  $('#nodes-table thead tr').replaceChildren(...heads.map(h => el('th', { scope: 'col' }, h)));
  $('#nodes-table tbody').replaceChildren(...nodes.map(n => {
    const now = nodeNow(x, n);
    const sv = siteVal[n.node_id];
    const svLast = sv && sv.length ? sv[sv.length - 1] : null;
    return el('tr', { dataset: { node: n.node_id, round: now.round == null ? '' : String(now.round) } },
      el('td', { class: 'mono' }, n.node_id),
      el('td', {}, el('span', { class: `state ${n.status}` }, n.status), n.ready ? el('span', { class: 'muted' }, ' · ready') : ''),
      el('td', {}, n.device || '–'),
      el('td', { class: 'num now', title: now.title }, now.text),
      el('td', { class: 'num' }, n.loss ? fmtNum(n.loss) : '–'),
      el('td', { class: 'num' }, n.tokens_per_s ? fmtCount(Math.round(n.tokens_per_s)) : '–'),
      el('td', {}, fmtAgo(n.last_seen_unix_ms)),
      el('td', { class: 'num' }, n.rounds),
      hasSiteVal ? el('td', { class: 'num site-val', title: svLast ? `reported with round ${roundAtX(svLast[0])}` : null }, svLast ? fmtNum(svLast[1]) : '–') : null,
      el('td', { class: 'num' }, fmtBytes(n.bytes_up)),
      el('td', { class: 'num' }, fmtBytes(n.bytes_down)),
    );
  }));
  show($('#nodes-empty'), nodes.length === 0);
  show($('#nodes-wrap'), nodes.length > 0);
}
// ---- Hydra sites and robust aggregation ----------------------------------------------------
// Hydra: each site's bpb on its own data against the base model θ_0 (its first report: round 0
// trains from θ_0) and its budget, and the curves of those bpb per round.
function renderSites(x, m, nodes, subnets) {
  const hydra = x.config.algorithm === 'hydra';
  show($('#x-sites'), hydra);
  if (!hydra) return;
  const siteVal = (m.per_node && m.per_node.site_val_bpb) || {};
  const flops = new Map(((subnets && subnets.subnets) || []).map(s => [s.node_id, s.flops_fraction]));
  const sorted = nodes.slice().sort((a, b) => a.node_id.localeCompare(b.node_id));
  // Gain over the base model, percent of its bpb (> 0: the site's data is predicted better than
  // before it joined); null until the site has reported its base model.
  const rows = sorted.map(n => {
    const sv = siteVal[n.node_id] || [];
    const base = sv.length && sv[0][0] === 1 ? sv[0][1] : null;
    const latest = sv.length ? sv[sv.length - 1] : null;
    const gain = base != null && latest ? 100 * (base - latest[1]) / base : null;
    return { n, base, latest, gain };
  });
  $('#sites-table tbody').replaceChildren(...rows.map(({ n, base, latest, gain }) => {
    const f = flops.get(n.node_id);
    const verdict = gain == null ? 'pending' : Math.abs(gain) < 0.005 ? 'same' : gain > 0 ? 'better' : 'worse';
    return el('tr', { dataset: { node: n.node_id, verdict } },
      el('th', { scope: 'row', class: 'mono' }, n.node_id),
      el('td', { class: 'num budget' }, n.budget == null ? '–' : Number(n.budget).toFixed(2)),
      el('td', { class: 'num flops' }, f == null ? '–' : `${(100 * f).toFixed(1)}%`),
      el('td', { class: 'num base', title: 'the base model θ0 on this site\'s data' }, fmtNum(base)),
      el('td', { class: 'num latest', title: latest ? `reported with round ${roundAtX(latest[0])}` : null }, latest ? fmtNum(latest[1]) : '–'),
      el('td', { class: `num gain ${verdict}`, title: 'lower bpb than the base model = positive gain' },
        gain == null ? '–' : verdict === 'same' ? '0.00% (same)' : `${gain > 0 ? '+' : '−'}${Math.abs(gain).toFixed(2)}%`));
  }));
  // Does joining pay? How many sites predict their own data better than their base model did.
  const judged = rows.filter(r => r.gain != null), better = judged.filter(r => r.gain >= 0.005);
  const worse = judged.filter(r => r.gain <= -0.005);
  const line = $('#sites-verdict');
  line.textContent = judged.length
    ? `${better.length} of ${judged.length} sites better than their base model` +
      (worse.length ? `; worse: ${worse.map(r => `${r.n.node_id} (−${Math.abs(r.gain).toFixed(2)}%)`).join(', ')}` : '') + '.'
    : 'No site has reported past its base model yet.';
  Object.assign(line.dataset, { better: String(better.length), worse: String(worse.length), judged: String(judged.length) });
  const map = xMapper(m, state.xAxis);
  const sets = sorted.map(n => ({ label: n.node_id, data: toPoints(siteVal[n.node_id], map) }));
  state.charts.sites.set(sets, state.xAxis, Math.max(map(m.total_rounds || 0), maxX(sets)), '',
    'No site has reported its validation bpb yet (nodes report it with --val-split held-out or --val-data).');
}
// Distillation runs (atoll demo --algorithm distill): their sites report teacher_bytes_per_token.
function renderDistill(m) {
  const series = (m.per_node && m.per_node.teacher_bytes_per_token) || {};
  const sites = Object.keys(series).sort();
  show($('#x-distill'), sites.length > 0);
  if (!sites.length) return;
  $('#distill-table tbody').replaceChildren(...sites.map(n => {
    const pts = series[n], lastPt = pts[pts.length - 1];
    return el('tr', { dataset: { node: n } }, el('th', { scope: 'row', class: 'mono' }, n),
      el('td', { class: 'num' }, lastPt ? fmtNum(lastPt[1], 1) : '–'), el('td', { class: 'num' }, lastPt ? String(roundAtX(lastPt[0])) : '–'));
  }));
  const map = xMapper(m, state.xAxis);
  const sets = sites.map(n => ({ label: n, data: toPoints(series[n], map) }));
  state.charts.distill.set(sets, state.xAxis, Math.max(map(m.total_rounds || 0), maxX(sets)));
}
// atoll_updates_rejected_total{reason="…"} of this coordinator's GET /metrics (the viewer
// token reads it); null when it is not served.
async function rejectionsByReason() {
  try {
    const res = await fetch('metrics', { headers: authHeader() });
    if (!res.ok) return null;
    const out = {};
    const text = await res.text();
    for (const m of text.matchAll(/^atoll_updates_rejected_total\{reason="([a-z_]+)"\} (\S+)$/gm)) out[m[1]] = Number(m[2]);
    // Screening at the commit (docs/coordinator.md): shown as "dropped: replay" and the like.
    for (const m of text.matchAll(/^atoll_updates_screened_total\{action="([a-z]+)",reason="([a-z_]+)"\} (\S+)$/gm))
      if (Number(m[3]) > 0) out[`${m[1]}: ${m[2]}`] = Number(m[3]);
    return Object.keys(out).length ? out : null;
  } catch (_) {
    return null;
  }
}
function renderRobust(x, rounds, rejected) {
  const recs = rounds ? rounds.rounds : [];
  show($('#x-robust'), recs.length > 0 || !!rejected);
  const rb = x.config.robust || {};
  $('#robust-config').textContent = `screen = ${rb.screen} (limit ${rb.norm_multiple}× the median update norm` +
    `${rb.max_norm > 0 ? `, at most ${rb.max_norm}` : ''}` +
    `${rb.screen !== 'off' && rb.replay_cosine > 0 ? `; replays at cosine ≥ ${rb.replay_cosine}` : ''}` +
    `${rb.screen !== 'off' && rb.stale_margin > 0 ? `; stale updates at margin ≥ ${rb.stale_margin}` : ''}) · aggregator = ${rb.aggregator}`;
  const count = what => recs.reduce((a, r) => a + r.participants.filter(what).length, 0);
  const clipped = count(p => p.pushed && p.screen === 'clipped'), dropped = count(p => p.pushed && p.screen === 'dropped');
  const replays = count(p => p.pushed && p.screen === 'dropped' && p.screen_reason === 'replay');
  const stale = count(p => p.pushed && p.screen === 'dropped' && p.screen_reason === 'stale');
  const why = [replays ? `${replays} as replays` : '', stale ? `${stale} as stale updates` : ''].filter(Boolean).join(', ');
  const missed = count(p => !p.pushed);
  const line = $('#robust-rounds');
  line.textContent = recs.length
    ? `In the last ${recs.length} rounds: ${clipped} update${clipped === 1 ? '' : 's'} clipped, ${dropped} dropped by screening` +
      `${why ? ` (${why})` : ''}, ${missed} missed (no update in time).`
    : '';
  Object.assign(line.dataset, { clipped: String(clipped), dropped: String(dropped), replays: String(replays), stale: String(stale), missed: String(missed) });
  show($('#robust-reasons-box'), !!rejected);
  if (!rejected) return;
  const entries = Object.entries(rejected).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  const top = Math.max(1, ...entries.map(e => e[1]));
  $('#robust-reasons tbody').replaceChildren(...entries.map(([reason, n]) => el('tr', { dataset: { reason, count: String(n) } },
    el('td', { class: 'mono' }, reason), el('td', { class: 'num' }, fmtCount(n)),
    el('td', {}, el('span', { class: 'bar', style: `width:${(100 * n / top).toFixed(1)}%`, role: 'img', 'aria-label': `${n} refused` })))));
}

// [privacy] (docs/coordinator.md, "Differential privacy"): the config and the epsilon each
// committed round's record reports (null = infinite: clipping without noise).
function renderPrivacy(x, m, rounds) {
  const pv = x.config.privacy || {};
  const on = pv.clip_norm > 0;
  show($('#x-privacy'), on);
  if (!on) return;
  const recs = rounds ? rounds.rounds : [];
  const last = recs.length ? recs[recs.length - 1] : null;
  const eps = last ? last.privacy_epsilon : undefined;
  const spent = last == null ? 'no round committed yet' : eps == null ? 'epsilon = inf (no noise)' : `epsilon = ${Number(eps).toPrecision(4)} after ${last.round + 1} rounds`;
  const para = $('#privacy-config');
  para.textContent = `clip norm ${pv.clip_norm} · noise multiplier ${pv.noise_multiplier} · delta ${pv.delta}` +
    `${pv.target_epsilon > 0 ? ` · budget ${pv.target_epsilon}` : ''} · ${spent}`;
  para.dataset.epsilon = eps == null ? '' : String(eps);
  const map = xMapper(m, state.xAxis);
  const series = recs.filter(r => r.privacy_epsilon != null).map(r => [r.round + 1, r.privacy_epsilon]);
  const sets = [{ label: 'epsilon', data: toPoints(series, map) }];
  state.charts.privacy.set(sets, state.xAxis, Math.max(map(m.total_rounds || 0), maxX(sets)), '',
    'Clipping only (noise_multiplier = 0): epsilon is infinite.');
}

// Hydra: one layers × KV groups table per site (rows = layers, columns = head units: a KV group is
// a KV head with its query heads, one head without grouped-query attention; docs/hydra.md
// "Units"), plus the layer's kept FFN blocks; cells carry a letter and a title so the grid does
// not rely on colour alone.
function renderSubnets(x, data) {
  const hydra = x.config.algorithm === 'hydra';
  show($('#x-subnets'), hydra);
  if (!hydra || !data) return;
  const subnets = data.subnets || [];
  show($('#subnets-empty'), subnets.length === 0);
  const perGroup = data.heads_per_group || 1;
  const groups = [...Array(data.kv_groups ?? data.heads).keys()];
  const groupName = g => perGroup === 1 ? `KV group ${g} (query head ${g})`
    : `KV group ${g} (query heads ${g * perGroup}–${(g + 1) * perGroup - 1})`;
  $('#subnet-grids').replaceChildren(...subnets.map(s => {
    const pct = s.flops_fraction == null ? '–' : `${(100 * s.flops_fraction).toFixed(1)}%`;
    return el('div', { class: 'table-wrap' }, el('table', { class: 'grid subnet', dataset: { node: s.node_id } },
      el('caption', { title: 'training FLOPs per token relative to the full model' },
        el('span', { class: 'mono' }, s.node_id), ` · ${pct} of full FLOPs`),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Layer'),
        ...groups.map(g => el('th', { scope: 'col', title: groupName(g) }, `KV${g}`)), el('th', { scope: 'col' }, 'FFN blocks'))),
      el('tbody', {}, ...s.layers.map((l, i) => {
        const kept = new Set(l.heads);
        return el('tr', {},
          el('th', { scope: 'row' }, `L${i}`, el('span', { class: 'muted' }, l.trained ? ' · trained' : ' · frozen')),
          ...groups.map(g => {
            const k = !kept.has(g) ? 'removed' : l.trained ? 'trained' : 'frozen';
            const what = { removed: 'removed', trained: 'kept and trained', frozen: 'kept, frozen' }[k];
            return el('td', { class: `cell ${k}`, title: `${s.node_id}: layer ${i}, ${groupName(g)}: ${what}` },
              { removed: '–', trained: 'T', frozen: 'F' }[k]);
          }),
          el('td', { class: 'num', title: `${l.ffn_blocks_kept} of ${data.ffn_blocks} FFN channel blocks kept` },
            `${l.ffn_blocks_kept} / ${data.ffn_blocks}`));
      }))));
  }));
}
// A round's participant: its id, and what screening did with its update (docs/coordinator.md,
// "Screening and robust aggregation").
function participantLabel(p) {
  if (!p.pushed) return `${p.node_id} (missed)`;
  if (p.screen === 'clipped' || p.screen === 'dropped') return `${p.node_id} (${p.screen}, norm ${p.norm == null ? "–" : Number(p.norm).toPrecision(3)})`;
  return p.node_id;
}
function renderRounds(data) {
  const rounds = data.rounds;
  show($('#rounds-empty'), rounds.length === 0);
  show($('#rounds-body'), rounds.length > 0);
  const maxD = Math.max(1e-9, ...rounds.map(r => r.duration_s || 0));
  const timeline = $('#timeline');
  timeline.replaceChildren(...rounds.map(r => {
    const partial = r.participants.some(p => !p.pushed);
    return el('div', {
      class: `tick${partial ? ' partial' : ''}`, dataset: { round: String(r.round) },
      style: `height:${Math.max(8, 44 * (r.duration_s || 0) / maxD)}px`,
      title: `round ${r.round}: ${fmtDuration(r.duration_s)}, ${r.participants.length} participants, loss ${fmtNum(r.mean_loss)}`,
    });
  }));
  timeline.dataset.rounds = String(data.total);
  timeline.setAttribute('aria-label', rounds.length
    ? `durations of rounds ${rounds[0].round} to ${rounds[rounds.length - 1].round}: from ${fmtDuration(Math.min(...rounds.map(r => r.duration_s || 0)))} to ${fmtDuration(maxD)}`
    : 'no committed round yet');
  timeline.scrollLeft = timeline.scrollWidth;
  const recent = rounds.slice(-25).reverse();
  $('#rounds-table tbody').replaceChildren(...recent.map(r => el('tr', { dataset: { round: String(r.round) } },
    el('td', { class: 'num', title: r.skipped ? 'no update could be applied: θ unchanged' : '' },
      r.skipped ? `${r.round} (skipped)` : r.round),
    el('td', { class: 'wrap' }, r.participants.map(participantLabel).join(', ')),
    el('td', { class: 'num' }, fmtNum(r.mean_loss)),
    el('td', { class: 'num' }, fmtCount(r.tokens)),
    el('td', { class: 'num', title: lateBytesDown(r) ? `${fmtBytes(lateBytesDown(r))} of it in pulls of earlier rounds that outlived them (slow nodes)` : '' },
      `${fmtBytes(r.bytes_up)} / ${fmtBytes(r.bytes_down + lateBytesDown(r))}`),
    el('td', { class: 'num' }, fmtDuration(r.duration_s)),
    el('td', {}, fmtTime(r.committed_unix_ms)),
    el('td', { class: 'mono', title: r.params_fingerprint }, r.params_fingerprint.slice(0, 16)),
  )));
}
async function downloadCheckpoint(ev) {
  ev.preventDefault();
  const id = ev.target.dataset.id;
  showError($('#x-action-error'), '');
  try {
    const res = await fetch(`api/experiments/${id}/checkpoint`, { headers: authHeader() });
    if (!res.ok) throw new Error((await res.json()).error);
    saveBlob(await res.blob(), `${id}-round${ev.target.dataset.round}.safetensors`);
  } catch (e) {
    showError($('#x-action-error'), `checkpoint: ${e.message}`);
  }
}

// ---- logs -------------------------------------------------------------------------------------
// Lines: {t (unix ms), level: info|warn|error, text, kind}. Events are appended as they arrive;
// rounds read from the store (`sorted`) go in by commit time. `key` dedupes a round seen both
// as an event and in the store.
function addLog(t, level, text, key, kind, sorted = false) {
  if (key) { if (state.logKeys.has(key)) return; state.logKeys.add(key); }
  const line = { t, level, text, kind };
  let i = state.logs.length;
  if (sorted) while (i > 0 && state.logs[i - 1].t > t) i--;
  if (i < state.logs.length) state.logView.rebuild = true;
  state.logs.splice(i, 0, line);
  // Trimmed in chunks: the list is rebuilt once per LOG_MAX / 10 lines, not on every line.
  if (state.logs.length > LOG_MAX * 1.1) {
    state.logs.splice(0, state.logs.length - LOG_MAX);
    state.logView.rebuild = true;
  }
  scheduleLogRender();
}
function scheduleLogRender() {
  if (state.logView.pending) return;
  state.logView.pending = true;
  requestAnimationFrame(() => { state.logView.pending = false; renderLogs(); });
}
function logItem(l) {
  return el('li', { class: l.level, dataset: { kind: l.kind } },
    el('span', { class: 't' }, fmtClock(l.t)), el('span', { class: 'lv' }, l.level), el('span', { class: 'm' }, l.text));
}
// Appends the lines that arrived since the last render; rebuilds the list only when lines were
// inserted before the end, trimmed, or filtered differently.
function renderLogs() {
  $('#log-count').textContent = state.logs.length ? `(${state.logs.length})` : '';
  const view = state.logView;
  if (state.tab !== 'logs') { view.rebuild = true; return; }  // rendered when the tab opens
  const list = $('#log-lines');
  const filter = $('#log-filter').value;
  const keep = l => filter !== 'warn' || l.level !== 'info';
  const follow = list.scrollTop + list.clientHeight >= list.scrollHeight - 8;
  if (view.rebuild || view.filter !== filter || view.shown > state.logs.length) {
    list.replaceChildren(...state.logs.filter(keep).map(logItem));
  } else {
    const placeholder = list.querySelector('li.empty');
    if (placeholder) placeholder.remove();
    list.append(...state.logs.slice(view.shown).filter(keep).map(logItem));
  }
  Object.assign(view, { rebuild: false, filter, shown: state.logs.length });
  if (!list.children.length)
    list.append(el('li', { class: 'empty' }, filter === 'warn' ? 'No warnings or errors.' : 'Nothing yet.'));
  if (follow) list.scrollTop = list.scrollHeight;
}
// θ bytes of slow nodes' pulls that ended after their own round closed, counted in this record.
function lateBytesDown(r) {
  return Object.values(r.late_bytes_down || {}).reduce((a, b) => a + b, 0);
}
function logRound(r, fromStore = false) {
  addLog(r.committed_unix_ms, r.participants.some(p => !p.pushed) ? 'warn' : 'info',
    `round ${r.round} committed: loss ${fmtNum(r.mean_loss)}, ${fmtCount(r.tokens)} tokens, ` +
    `up ${fmtBytes(r.bytes_up)} / down ${fmtBytes(r.bytes_down)}` +
    (lateBytesDown(r) ? ` (+${fmtBytes(lateBytesDown(r))} in pulls that outlived their round)` : '') +
    `, ${fmtDuration(r.duration_s)}` +
    r.participants.filter(p => !p.pushed).map(p => `; ${p.node_id} missed it`).join(''), `round:${r.round}`, 'round', fromStore);
}
function logEvent(kind, d) {
  const now = Date.now();
  const k = d.round == null ? '' : d.round;  // the round an event belongs to
  switch (kind) {
    case 'round': return logRound(d);
    case 'round_started':
      return addLog(now, 'info', `round ${k} started: ${(d.participants || []).join(', ')}`, `started:${d.round}`, kind);
    case 'log': {
      const what = { update_accepted: 'update accepted', update_rejected: 'update rejected', round_restarted: 'round restarted', secagg_deadline: 'secure aggregation stage closed at the deadline' }[d.event] || d.event;
      return addLog(now, d.event === 'update_accepted' ? 'info' : 'warn',
        `round ${k}${d.node_id ? ` · ${d.node_id}` : ''}: ${what}${d.message ? ` (${d.message})` : ''}`, null, kind);
    }
    case 'node':
      return addLog(now, d.event === 'lost' || d.event === 'revoked' ? 'warn' : 'info', `${d.node_id} ${d.event} (round ${k})`, null, kind);
    case 'state':
      return addLog(now, d.state === 'failed' ? 'error' : 'info',
        `experiment ${d.state}${d.message ? `: ${d.message}` : ''}`, `state:${d.state}:${d.round}`, kind);
    case 'eval':
      return addLog(now, 'info', `${d.name === 'val_bpb' ? 'validation bpb' : d.name} ${fmtNum(d.value)} ` +
        (d.round ? `after ${d.round} round${d.round === 1 ? '' : 's'}` : 'of the initial parameters'), `eval:${d.name}:${d.round}`, kind);
    case 'metrics': {
      const v = d.metrics || {};
      const parts = [v.loss != null && `loss ${fmtNum(v.loss)}`, v.tokens_per_s != null && `${fmtCount(v.tokens_per_s)} tok/s`,
        v.site_val_bpb != null && `site val ${fmtNum(v.site_val_bpb)} bpb`].filter(Boolean);
      return addLog(now, 'info', `${d.node_id} round ${k}: ${parts.join(', ')}`, `metrics:${d.node_id}:${d.round}`, kind);
    }
    default: return undefined;
  }
}
function downloadLogs() {
  const text = state.logs.map(l => `${new Date(l.t).toISOString()} ${l.level} ${l.text}`).join('\n') + '\n';
  saveBlob(new Blob([text], { type: 'text/plain' }), `${state.experiment}-log.txt`);
}

// ---- compare experiments --------------------------------------------------------------------
// Overlays each experiment's validation bpb and mean inner loss (one dataset per experiment)
// and tabulates final values, from the same metric API the experiment page uses.
function ensureCompareCharts() {
  if (state.charts.cmpBpb) return;
  const file = key => () => `compare-${state.compare.join('-')}-${key}`;
  const group = state.groups.c = chartControls('c');
  state.charts.cmpBpb = new LineChart($('figure[data-chart="cmpBpb"]'),
    { id: 'chart-compare-bpb', caption: 'Validation bits per byte (global model)', yTitle: 'bits per byte', file: file('bpb'), group });
  state.charts.cmpLoss = new LineChart($('figure[data-chart="cmpLoss"]'),
    { id: 'chart-compare-loss', caption: 'Mean inner training loss per round', yTitle: 'loss (nats)', file: file('loss'), group });
}
function clearCompare() {
  state.compareRows = null;
  for (const k of ['cmpBpb', 'cmpLoss']) if (state.charts[k]) state.charts[k].clear();
  delete $('#chart-compare-bpb').dataset.datasets;
  delete $('#chart-compare-loss').dataset.datasets;
  $('#compare-table tbody').replaceChildren();
  $('#compare-diff tbody').replaceChildren();
  $('#compare-diff-note').textContent = '';
}
async function refreshCompare() {
  const ids = state.compare;
  if (state.view !== 'compare') return;
  let rows;
  try {
    rows = await Promise.all(ids.map(async id => {
      const [x, m] = await Promise.all([api(`api/experiments/${id}`), api(`api/experiments/${id}/metrics?max_points=400`)]);
      return { x, m };
    }));
  } catch (e) {
    if (state.view !== 'compare' || state.compare !== ids || e.status === 0) return;
    // Nothing half-compared: one unknown id clears the charts and the table.
    clearCompare();
    show($('#c-body'), false);
    showError($('#c-error'), e.status === 404 ? `${e.message}: remove it from the list to compare the others.` : e.message);
    return;
  }
  if (state.view !== 'compare' || state.compare !== ids) return;
  showError($('#c-error'), '');
  show($('#c-body'), true);
  state.compareRows = rows;
  renderCompareCharts(rows);
  renderCompareTable(rows);
}
function renderCompareCharts(rows) {
  const axis = state.xAxis;
  const g = r => r.m.global || {};
  const maps = rows.map(r => xMapper(r.m, axis));
  const bpb = rows.map((r, i) => ({ label: r.x.id, data: toPoints(g(r).val_bpb, maps[i]) }));
  const loss = rows.map((r, i) => ({ label: r.x.id, data: toPoints(g(r).mean_loss, maps[i]) }));
  const xMax = Math.max(...rows.map((r, i) => maps[i](r.m.total_rounds || 0)), maxX(bpb, loss));
  state.charts.cmpBpb.set(bpb, axis, xMax);
  state.charts.cmpLoss.set(loss, axis, xMax);
  $('#chart-compare-bpb').dataset.datasets = String(bpb.length);
  $('#chart-compare-loss').dataset.datasets = String(loss.length);
}
// "key = value" lines of a stored config by "section.key" (the stored TOML is canonical: one
// key per line, sections in brackets).
function tomlEntries(text) {
  const out = new Map();
  let section = '';
  for (const line of (text || '').split('\n')) {
    const t = line.trim();
    const sec = t.match(/^\[([^\]]+)\]$/);
    if (sec) { section = sec[1]; continue; }
    const kv = t.match(/^([A-Za-z0-9_]+)\s*=\s*(.*)$/);
    if (kv) out.set(section ? `${section}.${kv[1]}` : kv[1], kv[2]);
  }
  return out;
}
// The keys whose values differ between the compared experiments (the name always differs).
function renderConfigDiff(rows) {
  const maps = rows.map(r => tomlEntries(r.x.config_toml));
  const keys = [...new Set(maps.flatMap(m => [...m.keys()]))].filter(k => k !== 'name');
  const differing = keys.filter(k => new Set(maps.map(m => m.get(k))).size > 1);
  $('#compare-diff thead tr').replaceChildren(el('th', { scope: 'col' }, 'Key'), ...rows.map(r => el('th', { scope: 'col' }, r.x.id)));
  $('#compare-diff tbody').replaceChildren(...differing.map(k => el('tr', { dataset: { key: k } },
    el('th', { scope: 'row', class: 'mono' }, k),
    ...maps.map(m => el('td', { class: 'mono diff' }, m.has(k) ? m.get(k) : '(absent)')))));
  $('#compare-diff-note').textContent = differing.length
    ? `${differing.length} of ${keys.length} keys differ (the name is not shown).`
    : `The configs are the same apart from the name (${keys.length} keys).`;
  show($('#compare-diff-wrap'), differing.length > 0);
}
function renderCompareTable(rows) {
  renderConfigDiff(rows);
  const best = s => (s && s.length ? Math.min(...s.map(p => p[1])) : null);
  $('#compare-table tbody').replaceChildren(...rows.map(({ x, m }, i) => {
    const gl = m.global || {};
    const sent = sumSeries(gl.bytes, m.bucket), ddp = sumSeries(gl.ddp_bytes, m.bucket);
    return el('tr', { dataset: { id: x.id } },
      el('td', {}, el('span', { class: 'swatch', style: `background:${seriesColor(i)}` }), ' ', el('a', { href: `#/e/${x.id}` }, x.id)),
      el('td', {}, el('span', { class: `state ${x.state}` }, x.state)),
      el('td', { class: 'num' }, `${x.current_round} / ${x.rounds}`),
      el('td', { class: 'num' }, fmtNum(last(afterRounds(gl.val_bpb)))),
      el('td', { class: 'num' }, fmtNum(best(afterRounds(gl.val_bpb)))),
      el('td', { class: 'num' }, fmtNum(last(gl.mean_loss))),
      el('td', { class: 'num' }, fmtBytes(sent)),
      el('td', { class: 'num' }, ddp > 0 && sent > 0 ? `${(ddp / sent).toFixed(1)}× less` : '–'),
      el('td', { class: 'mono' }, x.config.train.codec),
      el('td', { class: 'num' }, fmtCount(x.params)),
    );
  }));
}
async function showCompare(ids) {
  state.view = 'compare';
  state.compare = ids;
  state.selected = new Set(ids);
  ensureCompareCharts();
  clearCompare();
  $('#c-title').textContent = ids.join(' · ');
  showError($('#c-error'), '');
  show($('#view-compare'), true);
  setTitle(`Compare ${ids.join(', ')}`);
  await refreshCompare();
  startStream('api/events', (kind, msg) => {
    if (ids.includes(msg.experiment)) scheduleRefresh(refreshCompare);
  }, refreshCompare);
}

// ---- wiring ---------------------------------------------------------------------------------
$('#login-form').addEventListener('submit', async ev => {
  ev.preventDefault();
  const token = $('#token-input').value.trim();
  sessionStorage.setItem(TOKEN_KEY, token);
  state.role = null;
  let ok = false;
  try { ok = await ensureSession(); } catch (e) {
    showError($('#login-error'), `${e.message}; try again when it is back.`);
    return;
  }
  if (ok) {
    showError($('#login-error'), '');
    $('#token-input').value = '';
    const next = sessionStorage.getItem(NEXT_KEY);
    sessionStorage.removeItem(NEXT_KEY);
    location.hash = next && next !== '#/login' ? next : '#/';
  } else {
    sessionStorage.removeItem(TOKEN_KEY);
    showError($('#login-error'), 'That token was not accepted.');
  }
});
$('#logout').addEventListener('click', () => { sessionStorage.removeItem(NEXT_KEY); logout(); });
$('#compare-button').addEventListener('click', () => {
  if (state.selected.size >= 2) location.hash = `#/compare/${[...state.selected].join(',')}`;
});
$('#create-form').addEventListener('submit', submitCreate);
$('#f-toml').addEventListener('input', syncTomlMode);
$('#f-model').addEventListener('change', showModelSizes);
$('#list-filter').addEventListener('input', renderListRows);
$('#list-state').addEventListener('change', renderListRows);
for (const th of document.querySelectorAll('#experiments-table th[data-sort]'))
  th.querySelector('button').addEventListener('click', () => onSortClick(th));
for (const b of document.querySelectorAll('#x-actions button'))
  b.addEventListener('click', () => act(state.experiment, b.dataset.action));
$('#x-checkpoint').addEventListener('click', downloadCheckpoint);
for (const s of document.querySelectorAll('.xaxis-select')) {
  s.replaceChildren(...Object.entries(X_AXES).map(([k, a]) => el('option', { value: k }, a.option)));
  s.addEventListener('change', onAxisChange);
}
$('#log-filter').addEventListener('change', renderLogs);
$('#log-download').addEventListener('click', downloadLogs);
$('#config-download').addEventListener('click', () => {
  if (state.x && state.x.summary)
    saveBlob(new Blob([state.x.summary.config_toml], { type: 'text/plain' }), `${state.experiment}.toml`);
});
applyChartTheme();
darkQuery.addEventListener('change', () => {
  applyChartTheme();
  for (const c of Object.values(state.charts)) c.recolor();
});
window.addEventListener('hashchange', route);
route();
