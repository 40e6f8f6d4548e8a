// Atoll dashboard: a small single-page app over the coordinator's REST API (/api, see
// /api/openapi.json). The token lives in sessionStorage; live updates come from the
// server-sent event stream, read with fetch so the token travels in a header, not in the URL.
'use strict';

const TOKEN_KEY = 'atoll.token';
const MODEL_PRESETS = {
  tiny: { dim: 64, layers: 2, heads: 4, ffn_hidden: 192, seq_len: 128 },
  small: { dim: 128, layers: 4, heads: 4, ffn_hidden: 384, seq_len: 128 },
  base: { dim: 256, layers: 6, heads: 8, ffn_hidden: 768, seq_len: 256 },
  large: { dim: 512, layers: 8, heads: 8, ffn_hidden: 1536, seq_len: 256 },
};
const COLORS = ['#0e7490', '#c2410c', '#7c3aed', '#15803d', '#be185d', '#1d4ed8', '#a16207',
  '#0f766e', '#9333ea', '#b91c1c', '#4d7c0f', '#0369a1', '#c026d3', '#57534e', '#ea580c'];

const $ = (sel, root = document) => root.querySelector(sel);
const state = { role: null, view: null, experiment: null, charts: {}, stream: null, refreshTimer: null, pollTimer: null, selected: new Set(), compare: [] };

// ---- formatting -----------------------------------------------------------------------------
function fmtBytes(b) {
  if (b == null || !isFinite(b)) return '–';
  const u = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (Math.abs(b) >= 1000 && i < u.length - 1) { b /= 1000; i++; }
  return `${b.toFixed(i ? 2 : 0)} ${u[i]}`;
}
function fmtNum(v, digits = 4) { return v == null || !isFinite(v) ? '–' : Number(v).toFixed(digits); }
function fmtCount(v) {
  if (v == null) return '–';
  if (v >= 1e9) return (v / 1e9).toFixed(2) + ' G';
  if (v >= 1e6) return (v / 1e6).toFixed(2) + ' M';
  if (v >= 1e3) return (v / 1e3).toFixed(1) + ' k';
  return String(v);
}
function fmtAgo(ms) {
  if (!ms) return '–';
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return `${s.toFixed(0)} s ago`;
  if (s < 3600) return `${(s / 60).toFixed(0)} min ago`;
  return new Date(ms).toLocaleString();
}
function fmtDuration(s) {
  if (s == null || !isFinite(s)) return '–';
  if (s < 1) return `${(s * 1000).toFixed(0)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  return `${(s / 60).toFixed(1)} min`;
}
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function show(node, visible) { node.hidden = !visible; }

// ---- API ------------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, message, field) { super(message); this.status = status; this.field = field; }
}
async function api(path, { method = 'GET', body } = {}) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ''}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await res.json(); } catch (_) { /* not JSON */ }
  if (!res.ok) {
    if (res.status === 401) { logout(data && data.error); }
    throw new ApiError(res.status, (data && data.error) || `HTTP ${res.status}`, data && data.field);
  }
  return data;
}

// ---- live events (server-sent events over fetch) ---------------------------------------------
function stopStream() {
  if (state.stream) { state.stream.abort(); state.stream = null; }
  $('#live-indicator').className = 'live off';
}
function startStream(path, onEvent) {
  stopStream();
  const ctrl = new AbortController();
  state.stream = ctrl;
  const run = async () => {
    while (!ctrl.signal.aborted) {
      try {
        const res = await fetch(path, { headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY)}` }, signal: ctrl.signal });
        if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
        $('#live-indicator').className = 'live on';
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
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
            if (data) { try { onEvent(kind, JSON.parse(data)); } catch (_) { /* ignore */ } }
          }
        }
      } catch (_) { /* reconnect below */ }
      if (ctrl.signal.aborted) return;
      $('#live-indicator').className = 'live off';
      await new Promise(r => setTimeout(r, 2000));
    }
  };
  run();
}
// At most one refresh per `delay` ms however many events arrive (a busy run sends several per
// round; a debounce would never fire).
function scheduleRefresh(fn, delay = 300) {
  if (state.refreshTimer) return;
  state.refreshTimer = setTimeout(() => { state.refreshTimer = null; fn(); }, delay);
}

// ---- session --------------------------------------------------------------------------------
function logout(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.role = null;
  document.body.classList.remove('is-admin');
  $('#role').textContent = '';
  show($('#logout'), false);
  stopStream();
  if (message) { $('#login-error').textContent = message; show($('#login-error'), true); }
  location.hash = '#/login';
}
async function ensureSession() {
  if (state.role) return true;
  if (!sessionStorage.getItem(TOKEN_KEY)) return false;
  try {
    const who = await api('api/whoami');
    state.role = who.role;
    document.body.classList.toggle('is-admin', who.role === 'admin');
    $('#role').textContent = who.role;
    show($('#logout'), true);
    return true;
  } catch (_) {
    return false;
  }
}

// ---- router ---------------------------------------------------------------------------------
async function route() {
  const hash = location.hash || '#/';
  clearInterval(state.pollTimer);
  for (const v of document.querySelectorAll('.view')) show(v, false);
  if (hash === '#/login') { stopStream(); show($('#view-login'), true); $('#token-input').focus(); return; }
  if (!(await ensureSession())) { location.hash = '#/login'; return; }
  const m = hash.match(/^#\/e\/([A-Za-z0-9._-]{1,64})$/);
  if (m) return showExperiment(m[1]);
  const c = hash.match(/^#\/compare\/([A-Za-z0-9._,-]{1,1000})$/);
  if (c) return showCompare(c[1].split(',').filter(Boolean));
  if (hash === '#/new') return showCreate();
  return showList();
}

// ---- experiments list -----------------------------------------------------------------------
async function showList() {
  state.view = 'list';
  show($('#view-list'), true);
  await renderList();
  startStream('api/events', () => scheduleRefresh(renderList, 400));
  state.pollTimer = setInterval(renderList, 10000);
}
async function act(id, action) {
  if ((action === 'stop' || action === 'delete') &&
      !confirm(`${action === 'stop' ? 'Stop' : 'Delete'} experiment ${id}? This cannot be undone.`)) return;
  try {
    if (action === 'delete') await api(`api/experiments/${id}`, { method: 'DELETE' });
    else await api(`api/experiments/${id}/${action}`, { method: 'POST' });
    $('#list-error').hidden = true;
    $('#x-error').hidden = true;
  } catch (e) {
    const target = state.view === 'experiment' ? $('#x-error') : $('#list-error');
    target.textContent = e.message;
    target.hidden = false;
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
    $('#list-error').textContent = e.message; show($('#list-error'), true); return;
  }
  const tbody = $('#experiments-table tbody');
  const ids = new Set(data.experiments.map(x => x.id));
  for (const id of [...state.selected]) if (!ids.has(id)) state.selected.delete(id);
  tbody.replaceChildren(...data.experiments.map(x => el('tr', { dataset: { id: x.id } },
    el('td', { class: 'pick' }, pickBox(x.id)),
    el('td', {}, el('a', { href: `#/e/${x.id}` }, x.id), x.live ? el('span', { class: 'muted' }, ' · live') : ''),
    el('td', {}, el('span', { class: `state ${x.state}` }, x.state)),
    el('td', { class: 'num' }, `${x.current_round} / ${x.rounds}`),
    el('td', { class: 'num' }, fmtCount(x.params)),
    el('td', { class: 'mono' }, x.config.train.codec),
    el('td', { class: 'num' }, x.live ? `${x.active_nodes} active` : `${x.config.diloco.min_nodes}`),
    el('td', {}, new Date(x.created_unix_ms).toLocaleString()),
    el('td', { class: 'admin-only' }, ...actionsFor(x).map(a =>
      el('button', { class: `small ${a === 'stop' || a === 'delete' ? 'danger' : ''}`, onclick: () => act(x.id, a) }, a))),
  )));
  show($('#list-empty'), data.experiments.length === 0);
  updateCompareButton();
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
function showCreate() {
  state.view = 'new';
  stopStream();
  show($('#view-new'), true);
  if (state.role !== 'admin') {
    $('#create-error').textContent = 'Creating experiments needs an admin token.';
    show($('#create-error'), true);
  }
  $('#f-name').focus();
}
const FIELD_OF_KEY = [
  [/^name$/, 'name'], [/^model\./, 'model'], [/^diloco\.(min|max)_nodes$/, 'nodes'],
  [/^diloco\.rounds$/, 'rounds'], [/^diloco\.inner_steps$/, 'inner_steps'],
  [/^train\.codec$/, 'codec'], [/^data\.split$/, 'split'],
];
function clearFormErrors(form) {
  for (const p of form.querySelectorAll('.error[data-for]')) p.textContent = '';
  for (const i of form.querySelectorAll('.invalid')) i.classList.remove('invalid');
  show($('#create-error'), false);
}
function intOrRaw(v) { return /^-?\d+$/.test(v.trim()) ? Number(v) : v; }
async function submitCreate(ev) {
  ev.preventDefault();
  const form = ev.target;
  clearFormErrors(form);
  const f = Object.fromEntries(new FormData(form).entries());
  const nodes = intOrRaw(f.nodes);
  const body = {
    name: f.name.trim(),
    model: MODEL_PRESETS[f.model],
    train: { codec: f.codec.trim() },
    diloco: { rounds: intOrRaw(f.rounds), inner_steps: intOrRaw(f.inner_steps), min_nodes: nodes, max_nodes: nodes },
    data: { split: f.split },
  };
  $('#create-submit').disabled = true;
  try {
    await api('api/experiments', { method: 'POST', body });
    form.reset();
    location.hash = '#/';
  } catch (e) {
    const hit = e.field && FIELD_OF_KEY.find(([re]) => re.test(e.field));
    if (hit) {
      const p = form.querySelector(`.error[data-for="${hit[1]}"]`);
      p.textContent = e.message.replace(/^(request|config): /, '');
      const input = form.querySelector(`[name="${hit[1]}"]`);
      if (input) { input.classList.add('invalid'); input.focus(); }
    } else {
      $('#create-error').textContent = e.message;
      show($('#create-error'), true);
    }
  } finally {
    $('#create-submit').disabled = false;
  }
}

// ---- experiment page ------------------------------------------------------------------------
function lineChart(canvas, { logY = false, yTitle = '', bar = false } = {}) {
  return new Chart(canvas, {
    type: bar ? 'bar' : 'line',
    data: { datasets: [] },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
      interaction: { mode: 'nearest', intersect: false },
      plugins: { legend: { display: true, labels: { boxWidth: 10 } } },
      elements: { point: { radius: 2 }, line: { borderWidth: 2, tension: 0.2 } },
      scales: {
        x: { type: 'linear', title: { display: true, text: 'round' }, ticks: { precision: 0 } },
        y: {
          type: logY ? 'logarithmic' : 'linear', title: { display: !!yTitle, text: yTitle },
          ticks: logY ? { callback: v => { const m = v / 10 ** Math.floor(Math.log10(v)); return [1, 2, 5].some(k => Math.abs(m - k) < 1e-6) ? fmtBytes(v) : ''; } } : {},
        },
      },
    },
  });
}
function ensureCharts() {
  if (state.charts.bpb) return;
  state.charts.bpb = lineChart($('#chart-bpb'), { yTitle: 'bits per byte' });
  state.charts.loss = lineChart($('#chart-loss'), { yTitle: 'loss (nats)' });
  state.charts.bytes = lineChart($('#chart-bytes'), { logY: true, yTitle: 'bytes per round' });
  state.charts.duration = lineChart($('#chart-duration'), { bar: true, yTitle: 'seconds' });
}
const pts = s => (s || []).map(([x, y]) => ({ x, y }));
function setDatasets(chart, sets) {
  chart.data.datasets = sets.map((s, i) => ({
    backgroundColor: s.color || COLORS[i % COLORS.length], borderColor: s.color || COLORS[i % COLORS.length], ...s,
  }));
  chart.update('none');
}
function renderCharts(m) {
  ensureCharts();
  const g = m.global || {};
  setDatasets(state.charts.bpb, [{ label: 'validation bpb', data: pts(g.val_bpb) }]);
  const nodeLoss = (m.per_node && m.per_node.loss) || {};
  setDatasets(state.charts.loss, Object.keys(nodeLoss).sort().map(n => ({ label: n, data: pts(nodeLoss[n]) })));
  setDatasets(state.charts.bytes, [
    { label: 'DiLoCo (sent + received)', data: pts(g.bytes) },
    { label: 'data-parallel equivalent', data: pts(g.ddp_bytes), borderDash: [6, 4], color: '#94a3b8' },
  ]);
  setDatasets(state.charts.duration, [{ label: 'round duration (s)', data: pts(g.duration_s), barPercentage: 0.9 }]);
  const canvas = $('#chart-bpb');
  canvas.dataset.points = String((g.val_bpb || []).length);
  canvas.dataset.rounds = String(m.total_rounds);
  if (m.bucket > 1) $('#chart-bpb').closest('figure').querySelector('figcaption').textContent =
    `Validation bits per byte (global model; ${m.bucket} rounds per point)`;
}
function stat(k, v) { return el('div', { class: 'stat' }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, v)); }
function renderSummary(x, m) {
  $('#x-title').textContent = x.id;
  const st = $('#x-state');
  st.textContent = x.state + (x.live ? '' : ' · not served here');
  st.className = `state ${x.state}`;
  const g = m.global || {};
  const last = s => (s && s.length ? s[s.length - 1][1] : null);
  const sum = s => (s || []).reduce((a, p) => a + (p[1] || 0), 0);
  const sent = sum(g.bytes) * (m.bucket || 1), ddp = sum(g.ddp_bytes) * (m.bucket || 1);
  $('#x-stats').replaceChildren(
    stat('Round', `${x.current_round} / ${x.rounds}`),
    stat('Validation bpb', fmtNum(last(g.val_bpb))),
    stat('Mean inner loss', fmtNum(last(g.mean_loss))),
    stat('Parameters', fmtCount(x.params)),
    stat('Bytes moved', fmtBytes(sent)),
    stat('vs data-parallel', ddp > 0 && sent > 0 ? `${(ddp / sent).toFixed(1)}× less` : '–'),
    stat('Codec', x.config.train.codec),
    stat('Active nodes', x.live ? String(x.active_nodes) : '–'),
  );
  for (const b of document.querySelectorAll('#x-actions button')) {
    b.disabled = !actionsFor(x).includes(b.dataset.action);
  }
  $('#x-checkpoint').dataset.id = x.id;
  $('#x-checkpoint').dataset.round = x.current_round;
}
function renderNodes(nodes) {
  $('#nodes-table tbody').replaceChildren(...nodes.map(n => el('tr', { dataset: { node: n.node_id } },
    el('td', { class: 'mono' }, n.node_id),
    el('td', {}, el('span', { class: `state ${n.status}` }, n.status), n.ready ? el('span', { class: 'muted' }, ' · ready') : ''),
    el('td', {}, n.device || '–'),
    el('td', { class: 'num' }, `${n.round} · ${n.inner_step}`),
    el('td', { class: 'num' }, n.loss ? fmtNum(n.loss) : '–'),
    el('td', { class: 'num' }, n.tokens_per_s ? fmtCount(Math.round(n.tokens_per_s)) : '–'),
    el('td', {}, fmtAgo(n.last_seen_unix_ms)),
    el('td', { class: 'num' }, n.rounds),
    el('td', { class: 'num' }, fmtBytes(n.bytes_up)),
    el('td', { class: 'num' }, fmtBytes(n.bytes_down)),
  )));
}
// Hydra: one layers × heads table per site (rows = layers, columns = heads), plus the layer's
// kept FFN blocks; cells carry a letter and a title so the grid does not rely on colour alone.
function renderSubnets(x, data) {
  const hydra = x.config.algorithm === 'hydra';
  show($('#x-subnets'), hydra);
  if (!hydra) return;
  const subnets = data.subnets || [];
  show($('#subnets-empty'), subnets.length === 0);
  const heads = [...Array(data.heads).keys()];
  $('#subnet-grids').replaceChildren(...subnets.map(s => {
    const pct = s.flops_fraction == null ? '–' : `${(100 * s.flops_fraction).toFixed(1)}%`;
    return el('table', { class: 'grid subnet', dataset: { node: s.node_id } },
      el('caption', { title: 'training FLOPs per token relative to the full model' },
        el('span', { class: 'mono' }, s.node_id), ` · ${pct} of full FLOPs`),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Layer'),
        ...heads.map(h => el('th', { scope: 'col' }, `H${h}`)), el('th', { scope: 'col' }, 'FFN blocks'))),
      el('tbody', {}, ...s.layers.map((l, i) => {
        const kept = new Set(l.heads);
        return el('tr', {},
          el('th', { scope: 'row' }, `L${i}`, el('span', { class: 'muted' }, l.trained ? ' · trained' : ' · frozen')),
          ...heads.map(h => {
            const k = !kept.has(h) ? 'removed' : l.trained ? 'trained' : 'frozen';
            const what = { removed: 'removed', trained: 'kept and trained', frozen: 'kept, frozen' }[k];
            return el('td', { class: `cell ${k}`, title: `${s.node_id}: layer ${i}, head ${h}: ${what}` },
              { removed: '–', trained: 'T', frozen: 'F' }[k]);
          }),
          el('td', { class: 'num', title: `${l.ffn_blocks_kept} of ${data.ffn_blocks} FFN channel blocks kept` },
            `${l.ffn_blocks_kept} / ${data.ffn_blocks}`));
      })));
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
  const maxD = Math.max(1e-9, ...rounds.map(r => r.duration_s || 0));
  const timeline = $('#timeline');
  timeline.replaceChildren(...rounds.map(r => {
    const partial = r.participants.some(p => !p.pushed);
    return el('div', {
      class: `tick${partial ? ' partial' : ''}`,
      style: `height:${Math.max(8, 44 * (r.duration_s || 0) / maxD)}px`,
      title: `round ${r.round}: ${fmtDuration(r.duration_s)}, ${r.participants.length} participants, loss ${fmtNum(r.mean_loss)}`,
    });
  }));
  timeline.dataset.rounds = String(data.total);
  timeline.scrollLeft = timeline.scrollWidth;
  const recent = rounds.slice(-25).reverse();
  $('#rounds-table tbody').replaceChildren(...recent.map(r => el('tr', {},
    el('td', { class: 'num', title: r.skipped ? 'no update could be applied: θ unchanged' : '' },
      r.skipped ? `${r.round} (skipped)` : r.round),
    el('td', {}, r.participants.map(participantLabel).join(', ')),
    el('td', { class: 'num' }, fmtNum(r.mean_loss)),
    el('td', { class: 'num' }, fmtCount(r.tokens)),
    el('td', { class: 'num' }, `${fmtBytes(r.bytes_up)} / ${fmtBytes(r.bytes_down)}`),
    el('td', { class: 'num' }, fmtDuration(r.duration_s)),
    el('td', { class: 'mono', title: r.params_fingerprint }, r.params_fingerprint.slice(0, 16)),
  )));
}
async function refreshExperiment() {
  const id = state.experiment;
  if (state.view !== 'experiment' || !id) return;
  try {
    const [x, m, n, r, sn] = await Promise.all([
      api(`api/experiments/${id}`), api(`api/experiments/${id}/metrics?max_points=400`),
      api(`api/experiments/${id}/nodes`), api(`api/experiments/${id}/rounds?limit=200`),
      api(`api/experiments/${id}/subnets`),
    ]);
    if (state.view !== 'experiment' || state.experiment !== id) return;
    renderSummary(x, m);
    renderCharts(m);
    renderNodes(n.nodes);
    renderSubnets(x, sn);
    renderRounds(r);
  } catch (e) {
    $('#x-error').textContent = e.status === 404 ? `Experiment ${id} does not exist.` : e.message;
    show($('#x-error'), true);
  }
}
async function showExperiment(id) {
  state.view = 'experiment';
  state.experiment = id;
  show($('#x-error'), false);
  show($('#view-experiment'), true);
  await refreshExperiment();
  startStream(`api/experiments/${id}/events`, () => scheduleRefresh(refreshExperiment));
  state.pollTimer = setInterval(refreshExperiment, 5000);  // heartbeats are not events
}
async function downloadCheckpoint(ev) {
  ev.preventDefault();
  const id = ev.target.dataset.id;
  try {
    const res = await fetch(`api/experiments/${id}/checkpoint`, { headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY)}` } });
    if (!res.ok) throw new Error((await res.json()).error);
    const url = URL.createObjectURL(await res.blob());
    const a = el('a', { href: url, download: `${id}-round${ev.target.dataset.round}.safetensors` });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) {
    $('#x-error').textContent = `checkpoint: ${e.message}`; show($('#x-error'), true);
  }
}

// ---- compare experiments --------------------------------------------------------------------
// Overlays each experiment's validation bpb and mean inner loss (one dataset per experiment)
// and tabulates final values, from the same metric API the experiment page uses.
function ensureCompareCharts() {
  if (state.charts.cmpBpb) return;
  state.charts.cmpBpb = lineChart($('#chart-compare-bpb'), { yTitle: 'bits per byte' });
  state.charts.cmpLoss = lineChart($('#chart-compare-loss'), { yTitle: 'loss (nats)' });
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
    $('#c-error').textContent = e.message;
    show($('#c-error'), true);
    return;
  }
  if (state.view !== 'compare' || state.compare !== ids) return;
  show($('#c-error'), false);
  ensureCompareCharts();
  const g = r => r.m.global || {};
  setDatasets(state.charts.cmpBpb, rows.map(r => ({ label: r.x.id, data: pts(g(r).val_bpb) })));
  setDatasets(state.charts.cmpLoss, rows.map(r => ({ label: r.x.id, data: pts(g(r).mean_loss) })));
  $('#chart-compare-bpb').dataset.datasets = String(state.charts.cmpBpb.data.datasets.length);
  $('#chart-compare-loss').dataset.datasets = String(state.charts.cmpLoss.data.datasets.length);
  const last = s => (s && s.length ? s[s.length - 1][1] : null);
  const best = s => (s && s.length ? Math.min(...s.map(p => p[1])) : null);
  const sum = (s, b) => (s || []).reduce((a, p) => a + (p[1] || 0), 0) * (b || 1);
  $('#compare-table tbody').replaceChildren(...rows.map(({ x, m }, i) => {
    const gl = m.global || {};
    const sent = sum(gl.bytes, m.bucket), ddp = sum(gl.ddp_bytes, m.bucket);
    return el('tr', { dataset: { id: x.id } },
      el('td', {}, el('span', { class: 'swatch', style: `background:${COLORS[i % COLORS.length]}` }), ' ', el('a', { href: `#/e/${x.id}` }, x.id)),
      el('td', {}, el('span', { class: `state ${x.state}` }, x.state)),
      el('td', { class: 'num' }, `${x.current_round} / ${x.rounds}`),
      el('td', { class: 'num' }, fmtNum(last(gl.val_bpb))),
      el('td', { class: 'num' }, fmtNum(best(gl.val_bpb))),
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
  $('#c-title').textContent = ids.join(' · ');
  show($('#view-compare'), true);
  await refreshCompare();
  startStream('api/events', () => scheduleRefresh(refreshCompare, 1000));
  state.pollTimer = setInterval(refreshCompare, 10000);
}

// ---- wiring ---------------------------------------------------------------------------------
$('#login-form').addEventListener('submit', async ev => {
  ev.preventDefault();
  const token = $('#token-input').value.trim();
  sessionStorage.setItem(TOKEN_KEY, token);
  state.role = null;
  if (await ensureSession()) {
    show($('#login-error'), false);
    $('#token-input').value = '';
    location.hash = '#/';
  } else {
    sessionStorage.removeItem(TOKEN_KEY);
    $('#login-error').textContent = 'That token was not accepted.';
    show($('#login-error'), true);
  }
});
$('#logout').addEventListener('click', () => logout());
$('#compare-button').addEventListener('click', () => {
  if (state.selected.size >= 2) location.hash = `#/compare/${[...state.selected].join(',')}`;
});
$('#create-form').addEventListener('submit', submitCreate);
for (const b of document.querySelectorAll('#x-actions button'))
  b.addEventListener('click', () => act(state.experiment, b.dataset.action));
$('#x-checkpoint').addEventListener('click', downloadCheckpoint);
window.addEventListener('hashchange', route);
route();
