// Browser end-to-end test of the dashboard: a real `atoll demo` (embedded coordinator, dev CA,
// TLS 1.3, node processes) and Debian's headless Chromium driven by playwright-core, at a
// desktop size (1440×900) and a phone size (390×844).
//   a deep link opened signed out survives the sign-in → the running demo's page: rounds arrive
//   live, the node table and the charts agree with the header and the rounds table, the charts'
//   x-axes line up, the x-axis switch (bytes sent) and CSV export, the run times, the logs and
//   config tabs, no horizontal overflow on the phone → an unknown experiment clears the page →
//   stop the demo: a finished experiment is not polled; light and dark colours have contrast
//   ≥ 4.5:1 → create an experiment (the server's message inline, aria-invalid) → compare, then
//   compare with an unknown id → start the created experiment: "waiting for 2 nodes" with the
//   join command, which the test runs → the coordinator stops: a banner says so →
//   a Hydra demo: one layers × KV groups grid per site, and no node "now" once it has finished.
// Every view is screenshot at both sizes into ATOLL_ARTIFACTS (dashboard-<view>-<size>.png).
// Run from the repository root: node tests/e2e/dashboard.spec.mjs
// Environment: ATOLL_BINARY (default build/atoll), ATOLL_ARTIFACTS (default build/test-artifacts),
// CHROMIUM (default /usr/bin/chromium).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const ATOLL = process.env.ATOLL_BINARY || 'build/atoll';
const ARTIFACTS = process.env.ATOLL_ARTIFACTS || 'build/test-artifacts';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TOTAL_BUDGET_MS = 170000;  // CTest's TIMEOUT is 200 s
const DESKTOP = { width: 1440, height: 900 };
const PHONE = { width: 390, height: 844 };
const started = Date.now();
const left = () => Math.max(1000, TOTAL_BUDGET_MS - (Date.now() - started));

function die(message) {
  console.error(`dashboard e2e: FAIL: ${message}`);
  process.exit(1);
}
const step = message => console.log(`[${((Date.now() - started) / 1000).toFixed(1)}s] ${message}`);
function check(ok, message) { if (!ok) throw new Error(message); }

if (!fs.existsSync(CHROMIUM))
  die(`no browser at ${CHROMIUM}: install Debian's chromium (deploy/install-deps.sh or apt-get install chromium)`);
if (!fs.existsSync(ATOLL)) die(`no atoll binary at ${ATOLL}: build it first (make build)`);
if (!fs.existsSync('node_modules/chart.js/dist/chart.umd.js'))
  die('node_modules/chart.js is missing: run `npm ci` in the repository root');

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'atoll-e2e-'));
fs.mkdirSync(ARTIFACTS, { recursive: true });

// A small model and many short rounds: rounds keep arriving while the browser watches; the test
// stops the experiment from the page, then the demo (which would serve a bounded time after).
let demo = spawn(ATOLL, [
  'demo', '--nodes', '2', '--rounds', '400', '--inner-steps', '12', '--dim', '48', '--layers', '2',
  '--heads', '2', '--ffn', '96', '--seq', '48', '--batch', '4', '--eval-tokens', '2048',
  '--store', path.join(tmp, 'run'), '--http', '127.0.0.1:0', '--serve-after-done-s', '60',
], { stdio: ['ignore', 'pipe', 'pipe'] });
let demoOut = '';
let demoExited = false;
function watch(proc) {
  demoOut = '';
  demoExited = false;
  proc.stdout.on('data', d => { demoOut += d; });
  proc.stderr.on('data', d => { demoOut += d; });
  proc.on('exit', () => { demoExited = true; });
}
watch(demo);
async function stopDemo() {
  if (!demoExited) demo.kill('SIGINT');
  const t = Date.now();
  while (!demoExited && Date.now() - t < 10000) await new Promise(r => setTimeout(r, 50));
  if (!demoExited) demo.kill('SIGKILL');
}
const extraNodes = [];  // the nodes the test starts with the page's join command
let nodesOut = '';

let context = null;
async function cleanup() {
  if (context) await context.close().catch(() => {});
  for (const n of extraNodes) if (n.exitCode === null) n.kill('SIGKILL');
  await stopDemo();
  fs.rmSync(tmp, { recursive: true, force: true });
}
const watchdog = setTimeout(async () => {
  console.error(demoOut);
  await cleanup();
  die(`did not finish within ${TOTAL_BUDGET_MS / 1000} s`);
}, TOTAL_BUDGET_MS + 5000);

async function waitFor(cond, what, timeoutMs) {
  const t = Date.now();
  for (;;) {
    const v = cond();
    if (v) return v;
    if (demoExited) throw new Error(`atoll demo exited while waiting for ${what}`);
    if (Date.now() - t > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise(r => setTimeout(r, 50));
  }
}

// A GET outside the browser (the demo's certificate is from its own dev CA): status, headers and
// the raw (still compressed) body.
function rawGet(url, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { headers, rejectUnauthorized: false }, res => {
      const chunks = [];
      res.on('data', c => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
  });
}

// ---- checks that run inside the page ------------------------------------------------------------
// Text whose contrast against its (blended) background is under 4.5:1 (WCAG AA), skipping
// disabled controls and chart canvases (no DOM text).
function lowContrastText() {
  const parse = c => {
    const m = c.match(/rgba?\(([^)]+)\)/);
    if (!m) return null;
    const v = m[1].split(/[\s,/]+/).filter(Boolean).map(Number);
    return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
  };
  const over = (top, bottom) => [0, 1, 2].map(i => top[i] * top[3] + bottom[i] * (1 - top[3])).concat(1);
  const lum = c => {
    const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const backdrop = e => {
    const layers = [];
    for (let a = e; a; a = a.parentElement) {
      const c = parse(getComputedStyle(a).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let bg = [255, 255, 255, 1];
    for (let i = layers.length - 1; i >= 0; i--) bg = over(layers[i], bg);
    return bg;
  };
  const fails = [];
  const seen = new Set();
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const text = walk.currentNode.textContent.trim();
    const e = walk.currentNode.parentElement;
    if (!text || seen.has(e)) continue;
    seen.add(e);
    if (!e.getClientRects().length || e.closest('option, script, style, button:disabled')) continue;
    let opacity = 1;
    for (let a = e; a; a = a.parentElement) opacity *= Number(getComputedStyle(a).opacity);
    if (opacity < 1) continue;
    const bg = backdrop(e);
    const fg = over(parse(getComputedStyle(e).color), bg);
    const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    const ratio = (hi + 0.05) / (lo + 0.05);
    if (ratio < 4.5) fails.push(`${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''} "${text.slice(0, 24)}" ${ratio.toFixed(2)}:1`);
  }
  return fails;
}
// Nothing wider than the viewport, and the header as wide as the page.
function overflow() {
  const header = document.querySelector('header.top').getBoundingClientRect();
  const items = [...document.querySelectorAll('header.top > *')].filter(e => e.getClientRects().length);
  return {
    scrollWidth: document.scrollingElement.scrollWidth,
    header: header.width,
    headerItemsRight: Math.max(...items.map(e => e.getBoundingClientRect().right)),
  };
}
// [min, max] of each experiment chart's x scale, and the last x of its data.
function chartAxes() {
  return ['bpb', 'loss', 'bytes', 'duration'].map(k => {
    const c = Chart.getChart(document.querySelector(`#chart-${k}`));
    const xs = c.data.datasets.flatMap(d => d.data.map(p => p.x));
    return { chart: k, min: c.scales.x.min, max: c.scales.x.max, lastX: xs.length ? Math.max(...xs) : null };
  });
}
const frames = page => page.evaluate(() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))));

async function phoneChecks(page, view) {
  const o = await page.evaluate(overflow);
  check(o.scrollWidth <= PHONE.width, `${view} at ${PHONE.width} px: the page is ${o.scrollWidth} px wide`);
  check(o.header >= o.scrollWidth && o.headerItemsRight <= o.header + 0.5,
    `${view} at ${PHONE.width} px: the header is ${o.header} px wide, its items end at ${o.headerItemsRight} px`);
}
// Screenshots of the current view at both sizes (phone: no horizontal overflow), back at desktop.
async function shoot(page, view, { fullPage = true } = {}) {
  await page.screenshot({ path: path.join(ARTIFACTS, `dashboard-${view}-desktop.png`), fullPage });
  await page.setViewportSize(PHONE);
  await frames(page);
  await phoneChecks(page, view);
  await page.screenshot({ path: path.join(ARTIFACTS, `dashboard-${view}-phone.png`), fullPage });
  await page.setViewportSize(DESKTOP);
  await frames(page);
}
// The create form at phone width: labels that wrap beside a one-line label misalign their inputs,
// and a select narrower than its chosen text cuts it off.
function formFits() {
  const ctx = document.createElement('canvas').getContext('2d');
  const labels = [...document.querySelectorAll('#create-form .field > label')].filter(l => l.getClientRects().length);
  const wrapped = labels.filter(l => l.getBoundingClientRect().height > 1.8 * parseFloat(getComputedStyle(l).fontSize)).map(l => l.textContent);
  const cut = [...document.querySelectorAll('#create-form select')].filter(sel => {
    const cs = getComputedStyle(sel);
    ctx.font = `${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    const text = sel.options[sel.selectedIndex].textContent;
    return ctx.measureText(text).width + parseFloat(cs.paddingLeft) + 24 > sel.clientWidth;  // 24: the arrow
  }).map(sel => sel.options[sel.selectedIndex].textContent);
  return { labels: labels.length, wrapped, cut };
}
async function contrastChecks(page, view) {
  const bad = await page.evaluate(lowContrastText);
  check(!bad.length, `${view}: text below 4.5:1 contrast: ${bad.slice(0, 6).join(' | ')}`);
}

try {
  const [, url] = await waitFor(() => demoOut.match(/^dashboard: (https:\/\/\S+)$/m), 'the dashboard: line', 25000);
  const [, token] = await waitFor(() => demoOut.match(/^token: (atl_[0-9a-f]{64})$/m), 'the token: line', 5000);
  const [, grpc] = await waitFor(() => demoOut.match(/^coordinator (\S+?),/m), 'the coordinator line', 5000);
  step(`demo serves ${url}`);

  // ---- static files: gzip when accepted, ETag, 304 on If-None-Match -----------------------------
  const plainJs = await rawGet(`${url}app.js`);
  const gzJs = await rawGet(`${url}app.js`, { 'Accept-Encoding': 'gzip' });
  check(plainJs.status === 200 && !plainJs.headers['content-encoding'], `app.js without Accept-Encoding: ${plainJs.status} ${plainJs.headers['content-encoding']}`);
  check(gzJs.headers['content-encoding'] === 'gzip' && gzJs.body.length < plainJs.body.length / 2,
    `app.js with Accept-Encoding: gzip: encoding "${gzJs.headers['content-encoding']}", ${gzJs.body.length} of ${plainJs.body.length} bytes`);
  const { gunzipSync } = await import('node:zlib');
  check(gunzipSync(gzJs.body).equals(plainJs.body), 'the gzip form of app.js does not decompress to the file');
  check(/^"[0-9a-f]{32}-gz"$/.test(gzJs.headers.etag || '') && gzJs.headers.vary === 'Accept-Encoding',
    `app.js ETag "${gzJs.headers.etag}", Vary "${gzJs.headers.vary}"`);
  const revalidated = await rawGet(`${url}app.js`, { 'Accept-Encoding': 'gzip', 'If-None-Match': gzJs.headers.etag });
  check(revalidated.status === 304 && revalidated.body.length === 0, `If-None-Match with the current ETag: ${revalidated.status}, ${revalidated.body.length} bytes`);
  check((await rawGet(`${url}app.js`, { 'If-None-Match': '"stale"' })).status === 200, 'a stale ETag did not get the file');
  step(`static files: gzip ${gzJs.body.length}/${plainJs.body.length} bytes, ETag, 304`);

  context = await chromium.launchPersistentContext(path.join(tmp, 'profile'), {
    executablePath: CHROMIUM,
    headless: true,
    ignoreHTTPSErrors: true,  // the demo's certificate is signed by its own fresh dev CA
    viewport: DESKTOP,
    acceptDownloads: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(20000);
  const pageErrors = [];
  const requests = [];
  page.on('pageerror', e => pageErrors.push(String(e)));
  page.on('console', m => { if (m.type() === 'error') pageErrors.push(m.text()); });
  page.on('response', r => { if (r.status() >= 500) pageErrors.push(`${r.status()} ${r.url()}`); });
  page.on('request', r => requests.push(new URL(r.url()).pathname));
  page.on('dialog', d => d.accept());  // "Stop experiment demo? This cannot be undone."

  // ---- a deep link opened signed out: sign in, land where the link pointed ------------------------
  await page.goto(`${url}#/e/demo`);
  await page.waitForSelector('#view-login:not([hidden])');
  check(!(await page.isVisible('#logout')), '"Log out" is shown while signed out');
  check(/Sign in/.test(await page.title()), `the login page's title is "${await page.title()}"`);
  await page.fill('#token-input', 'atl_' + '0'.repeat(64));
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#login-error:not([hidden])');  // an unknown token is refused
  check((await page.getAttribute('#login-error', 'role')) === 'alert', 'the login error is not announced (role=alert)');
  const favicons = requests.filter(p => p.endsWith('/favicon.svg')).length;
  check(favicons <= 1, `favicon.svg fetched ${favicons} times while loading the page`);
  await shoot(page, 'login');
  pageErrors.length = 0;  // the refused login logs its 401
  await page.fill('#token-input', token);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#view-experiment:not([hidden])');
  const hash = await page.evaluate(() => location.hash);
  check(hash === '#/e/demo', `signing in from a link to #/e/demo landed on ${hash}`);
  check((await page.textContent('#role')) === 'admin', 'the demo token is not an admin token');
  check((await page.title()).startsWith('demo'), `the experiment page's title is "${await page.title()}"`);
  step('signed in through a deep link');

  // ---- the running demo -----------------------------------------------------------------------------
  await page.waitForFunction(() => Number(document.querySelector('#chart-bpb').dataset.points || 0) >= 2);
  const first = Number(await page.getAttribute('#timeline', 'data-rounds'));
  const firstPoints = Number(await page.getAttribute('#chart-bpb', 'data-points'));
  // Live: more rounds and chart points arrive without reloading the page.
  await page.waitForFunction(
    ([r, p]) => Number(document.querySelector('#timeline').dataset.rounds) >= r + 3 &&
      Number(document.querySelector('#chart-bpb').dataset.points) >= p + 3,
    [first, firstPoints], { timeout: Math.min(30000, left()) });
  const nodeRows = await page.$$eval('#nodes-table tbody tr', rows => rows.length);
  check(nodeRows === 2, `node table has ${nodeRows} rows, expected 2`);
  check(!(await page.isVisible('#x-subnets')), 'Hydra subnetworks shown for a DiLoCo experiment');
  check(/\bon\b/.test(await page.getAttribute('#live-indicator', 'class')), 'the live event stream is not connected');
  step(`rounds arrived live: ${first} -> ${await page.getAttribute('#timeline', 'data-rounds')}`);

  // Each active node works on the round after the header's completed ones (numbered from 0, as
  // the rounds table and the log: with N rounds done, round N): not on a round already done.
  const progress = await page.evaluate(() => ({
    done: parseInt(document.querySelector('#x-stats .stat .v').textContent, 10),
    nodes: [...document.querySelectorAll('#nodes-table tbody tr')].map(r => r.cells[3].textContent),
  }));
  for (const n of progress.nodes) {
    const r = parseInt(n.replace(/^\D*/, ''), 10);
    check(r >= progress.done && r <= progress.done + 1,
      `node progress "${n}" with ${progress.done} rounds done (expected round ${progress.done})`);
  }
  // The nodes hold validation data of their own: their latest site bpb is in the table.
  await page.waitForFunction(() => document.querySelectorAll('#nodes-table tbody td.site-val').length === 2 &&
    [...document.querySelectorAll('#nodes-table tbody td.site-val')].every(td => /^\d+\.\d{4}$/.test(td.textContent)));
  // A round in the rounds table is the same round on the charts (same duration): round k (from
  // 0) is drawn at x = k + 1 rounds completed. The table may hold a round the metrics did not
  // have yet (separate requests): skipped.
  const compared = await page.evaluate(() => {
    const chart = Chart.getChart(document.querySelector('#chart-duration'));
    const pts = chart.data.datasets[0].data;
    return [...document.querySelectorAll('#rounds-table tbody tr')].slice(0, 8).map(r => {
      const k = parseInt(r.cells[0].textContent, 10);
      const p = pts.find(q => q.x === k + 1);
      if (!p) return null;
      return fmtDuration(p.y) === r.cells[5].textContent ? 'same' : `row "${k}" says ${r.cells[5].textContent}, the chart at x=${k + 1} ${fmtDuration(p.y)}`;
    }).filter(Boolean);
  });
  const mismatched = compared.filter(c => c !== 'same');
  check(compared.length >= 5 && !mismatched.length,
    `rounds table and duration chart disagree (${compared.length} rounds compared): ${mismatched.join('; ')}`);
  const sameAxes = async size => {
    const axes = await page.evaluate(chartAxes);
    const want = axes.find(a => a.chart === 'duration');
    for (const a of axes)
      check(a.min === 0 && a.max === want.max && a.max === want.lastX,
        `${size}: x-axis of the ${a.chart} chart is [${a.min}, ${a.max}], expected [0, ${want.lastX}] like the others`);
  };
  await sameAxes('desktop');
  // Run times: started, elapsed, ETA while running.
  const times = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#x-stats .stat')]
    .map(s => [s.dataset.stat, s.querySelector('.v').textContent])));
  check(/\d/.test(times.started || '') && /\d/.test(times.elapsed || '') && /\d/.test(times.eta || ''),
    `run times missing: started "${times.started}", elapsed "${times.elapsed}", ETA "${times.eta}"`);
  // Each chart has a text alternative.
  const alts = await page.$$eval('#x-charts canvas', cs => cs.map(c => [c.getAttribute('role'), c.getAttribute('aria-label')]));
  check(alts.length === 4 && alts.every(([role, label]) => role === 'img' && /\d+ points, last/.test(label || '')),
    `chart text alternatives: ${JSON.stringify(alts)}`);
  step(`node progress ${progress.nodes.join(', ')} at ${progress.done} rounds done; tables, charts and axes agree`);

  // ---- x-axis: bytes sent; CSV of what the chart shows -------------------------------------------------
  await page.selectOption('#x-xaxis', 'bytes');
  const byBytes = await page.evaluate(async t => {
    const chart = Chart.getChart(document.querySelector('#chart-bpb'));
    const pts = chart.data.datasets[0].data.map(p => ({ x: p.x, round: p.round }));
    const m = await (await fetch('api/experiments/demo/metrics?max_points=5000', { headers: { Authorization: `Bearer ${t}` } })).json();
    const sent = r => m.global.bytes.filter(([x]) => x <= r).reduce((a, [, y]) => a + y, 0);
    return { title: chart.options.scales.x.title.text, pts, want: pts.map(p => sent(p.round)) };
  }, token);
  check(/bytes sent/.test(byBytes.title), `x-axis title after choosing bytes: "${byBytes.title}"`);
  byBytes.pts.forEach((p, i) => check(Math.abs(p.x - byBytes.want[i]) <= 1e-6 * Math.max(1, byBytes.want[i]),
    `bpb after round ${p.round} is drawn at ${p.x} bytes; the rounds so far sent ${byBytes.want[i]}`));
  await sameAxes('desktop, bytes');
  const [download] = await Promise.all([page.waitForEvent('download'),
    page.click('figure[data-chart="bpb"] button[data-export="csv"]')]);
  const csv = fs.readFileSync(await download.path(), 'utf8').trim().split('\n');
  check(csv[0] === 'rounds_completed,bytes_sent,validation bpb', `CSV header "${csv[0]}"`);
  check(csv.length - 1 >= byBytes.pts.length, `CSV has ${csv.length - 1} rows for ${byBytes.pts.length} points`);
  const [r0, b0, v0] = csv[1].split(',').map(Number);
  check(r0 === 0 && b0 === 0 && v0 > 0, `CSV first row "${csv[1]}" (expected the initial bpb at 0 bytes)`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-experiment-bytes-desktop.png') });
  await page.selectOption('#x-xaxis', 'time');
  check(/wall time/.test(await page.evaluate(() => Chart.getChart(document.querySelector('#chart-loss')).options.scales.x.title.text)),
    'x-axis title after choosing wall time');
  await page.selectOption('#x-xaxis', 'round');
  step(`x-axis by bytes: ${byBytes.pts.length} points match the bytes sent; CSV ${csv.length - 1} rows`);

  // ---- chart controls: smoothing, log y, zoom (drag, keys, double-click) -----------------------------
  await page.evaluate(() => { const r = document.querySelector('#x-smoothing'); r.value = '0.6'; r.dispatchEvent(new Event('input')); });
  const smooth = await page.evaluate(() => {
    const d = Chart.getChart(document.querySelector('#chart-bpb')).data.datasets;
    return { labels: d.map(s => s.label), smoothed: d[0].data.map(p => p.y), raw: d[1] ? d[1].data.map(p => p.y) : [],
      alt: document.querySelector('#chart-bpb').getAttribute('aria-label') };
  });
  check(smooth.labels.join('|') === 'validation bpb|validation bpb (raw)', `smoothed bpb datasets: ${smooth.labels.join(', ')}`);
  let ema = 0;
  const want = smooth.raw.map((y, i) => { ema = 0.6 * ema + 0.4 * y; return ema / (1 - 0.6 ** (i + 1)); });
  check(want.length >= 3 && want.every((y, i) => Math.abs(y - smooth.smoothed[i]) < 1e-9) && want.some((y, i) => y !== smooth.raw[i]),
    `the smoothed curve is not the debiased EMA (weight 0.6) of the raw one: ${smooth.smoothed.slice(0, 4)} vs ${want.slice(0, 4)}`);
  check(/smoothed \(weight 0\.6\)/.test(smooth.alt), `text alternative while smoothed: ${smooth.alt}`);
  const [smoothCsv] = await Promise.all([page.waitForEvent('download'), page.click('figure[data-chart="bpb"] button[data-export="csv"]')]);
  const smoothHead = fs.readFileSync(await smoothCsv.path(), 'utf8').split('\n')[0];
  check(smoothHead === 'rounds_completed,validation bpb,validation bpb (raw)', `CSV header while smoothed: "${smoothHead}"`);
  await page.evaluate(() => { const r = document.querySelector('#x-smoothing'); r.value = '0'; r.dispatchEvent(new Event('input')); });
  await page.selectOption('#x-yscale', 'log');
  const yTypes = await page.evaluate(() => ['bpb', 'loss', 'bytes', 'duration'].map(k => Chart.getChart(document.querySelector(`#chart-${k}`)).scales.y.type));
  check(yTypes.every(t => t === 'logarithmic'), `y scales after choosing log: ${yTypes.join(', ')}`);
  const [pngDl] = await Promise.all([page.waitForEvent('download'), page.click('figure[data-chart="loss"] button[data-export="png"]')]);
  const png = fs.readFileSync(await pngDl.path());
  check(png.length > 1000 && png.subarray(1, 4).toString() === 'PNG', `PNG export of the loss chart: ${png.length} bytes`);
  await page.selectOption('#x-yscale', 'linear');
  const yBack = await page.evaluate(() => ['bpb', 'bytes'].map(k => Chart.getChart(document.querySelector(`#chart-${k}`)).scales.y.type));
  check(yBack[0] === 'linear' && yBack[1] === 'logarithmic', `y scales back to linear: ${yBack.join(', ')} (bytes stays log)`);
  // Drag from 30% to 60% of the bpb plot: every chart shows that x range.
  const area = await page.evaluate(() => {
    const c = document.querySelector('#chart-bpb'), r = c.getBoundingClientRect(), a = Chart.getChart(c).chartArea;
    return { left: r.left + a.left, width: a.right - a.left, y: r.top + (a.top + a.bottom) / 2 };
  });
  await page.mouse.move(area.left + 0.3 * area.width, area.y);
  await page.mouse.down();
  await page.mouse.move(area.left + 0.45 * area.width, area.y, { steps: 3 });
  await page.mouse.move(area.left + 0.6 * area.width, area.y, { steps: 3 });
  await page.mouse.up();
  const ranges = () => page.evaluate(() => ['bpb', 'loss', 'bytes', 'duration'].map(k => {
    const c = Chart.getChart(document.querySelector(`#chart-${k}`));
    const xs = c.data.datasets.flatMap(d => d.data.map(p => p.x));
    return { min: c.scales.x.min, max: c.scales.x.max, last: Math.max(...xs) };
  }));
  const zoomed = await ranges();
  const z0 = zoomed[0];
  check(z0.min > 0 && z0.max < z0.last && zoomed.every(z => Math.abs(z.min - z0.min) < 1e-9 && Math.abs(z.max - z0.max) < 1e-9),
    `after dragging across 30-60% of the bpb chart, x ranges: ${JSON.stringify(zoomed)}`);
  const frac = [(z0.min) / z0.last, z0.max / z0.last];
  check(Math.abs(frac[0] - 0.3) < 0.1 && Math.abs(frac[1] - 0.6) < 0.1, `the zoomed range is ${frac.map(f => f.toFixed(2))} of the axis, dragged 0.30-0.60`);
  check(await page.isVisible('#x-zoom-reset'), '"Reset zoom" not offered while zoomed');
  check(/zoomed to/.test(await page.getAttribute('#chart-loss', 'aria-label')), 'the text alternative does not say the chart is zoomed');
  // Keyboard: + halves the range around its middle, ← pans left, Esc resets.
  await page.focus('#chart-bpb');
  await page.keyboard.press('+');
  const [k1] = await ranges();
  check(Math.abs((k1.max - k1.min) - (z0.max - z0.min) / 2) < 1e-6 * z0.last && Math.abs((k1.max + k1.min) - (z0.max + z0.min)) < 1e-6 * z0.last,
    `"+" on the focused chart: [${k1.min}, ${k1.max}] from [${z0.min}, ${z0.max}]`);
  await page.keyboard.press('ArrowLeft');
  const [k2] = await ranges();
  check(k2.min < k1.min && Math.abs((k2.max - k2.min) - (k1.max - k1.min)) < 1e-6 * z0.last, `ArrowLeft: [${k2.min}, ${k2.max}] from [${k1.min}, ${k1.max}]`);
  await page.keyboard.press('Escape');
  const reset = await ranges();
  check(reset.every(z => z.min === 0 && z.max >= z.last - 1e-9), `Escape did not reset the zoom: ${JSON.stringify(reset)}`);
  check(!(await page.isVisible('#x-zoom-reset')), '"Reset zoom" still shown after the reset');
  await page.mouse.move(area.left + 0.2 * area.width, area.y);
  await page.mouse.down();
  await page.mouse.move(area.left + 0.5 * area.width, area.y, { steps: 4 });
  await page.mouse.up();
  check((await ranges())[0].min > 0, 'a second drag did not zoom');
  await page.mouse.dblclick(area.left + 0.5 * area.width, area.y);
  check((await ranges()).every(z => z.min === 0), 'double-click did not reset the zoom');
  step(`chart controls: EMA smoothing, log y, PNG, zoom by drag (${frac.map(f => f.toFixed(2)).join('-')}), keys, double-click`);

  // ---- robust aggregation: screening of the rounds, refused updates by reason from /metrics -----------
  await page.waitForSelector('#x-robust:not([hidden]) #robust-reasons tbody tr');
  const robust = await page.evaluate(async t => {
    const text = await (await fetch('metrics', { headers: { Authorization: `Bearer ${t}` } })).text();
    const fromMetrics = [...text.matchAll(/^atoll_updates_rejected_total\{reason="([a-z_]+)"\} (\S+)$/gm)].map(m => [m[1], Number(m[2])]);
    const shown = [...document.querySelectorAll('#robust-reasons tbody tr')].map(r => [r.dataset.reason, Number(r.dataset.count)]);
    const line = document.querySelector('#robust-rounds');
    return { fromMetrics, shown, text: line.textContent, kept: line.dataset };
  }, token);
  const shownReasons = new Map(robust.shown);
  check(robust.fromMetrics.length >= 10 && robust.fromMetrics.every(([r, n]) => shownReasons.has(r) && shownReasons.get(r) <= n),
    `refused updates by reason: page ${JSON.stringify(robust.shown)}, /metrics ${JSON.stringify(robust.fromMetrics)}`);
  check(/In the last \d+ rounds: \d+ updates? clipped, \d+ dropped by screening( \((\d+ as replays)?(, )?(\d+ as stale updates)?\))?, \d+ missed/.test(robust.text), `screening line: ${robust.text}`);
  step(`robust aggregation: ${robust.shown.length} reasons from /metrics; "${robust.text}"`);

  await shoot(page, 'experiment');
  await page.setViewportSize(PHONE);
  await frames(page);
  await sameAxes('phone');
  await page.setViewportSize(DESKTOP);

  // ---- logs and config tabs ------------------------------------------------------------------------
  await page.click('.tabs a[data-tab="logs"]');
  await page.waitForSelector('#x-logs:not([hidden]) #log-lines li[data-kind="log"]');
  await page.waitForSelector('#log-lines li[data-kind="round"]');
  check(/Logs/.test(await page.title()), `the logs tab's title is "${await page.title()}"`);
  const logLines = await page.$$eval('#log-lines li', ls => ls.length);
  await page.waitForFunction(n => document.querySelectorAll('#log-lines li').length > n, logLines);  // live
  const accepted = await page.$$eval('#log-lines li[data-kind="log"]', ls => ls.map(l => l.textContent));
  check(accepted.some(t => /update accepted/.test(t)), `no accepted update in the logs: ${accepted.slice(0, 3).join(' | ')}`);
  // Rounds are numbered as the API's round records (and the coordinator's log) number them: the
  // page's earliest "round N committed" line has the loss of the API's record N.
  const numbering = await page.evaluate(async t => {
    const line = [...document.querySelectorAll('#log-lines li[data-kind="round"] .m')]
      .map(l => l.textContent.match(/^round (\d+) committed: loss ([^,]+),/)).find(Boolean);
    const n = Number(line[1]);
    const page = await (await fetch(`api/experiments/demo/rounds?from=${n}&limit=1`, { headers: { Authorization: `Bearer ${t}` } })).json();
    return { n, shown: line[2], round: page.rounds[0].round, expected: fmtNum(page.rounds[0].mean_loss) };
  }, token);
  check(numbering.round === numbering.n && numbering.shown === numbering.expected,
    `round numbering: the page's line for round ${numbering.n} says loss ${numbering.shown}, the API's record ${numbering.round} ${numbering.expected}`);
  await shoot(page, 'logs', { fullPage: false });
  await page.click('.tabs a[data-tab="config"]');
  await page.waitForSelector('#x-config:not([hidden])');
  const toml = await page.textContent('#config-toml');
  check(/\[diloco\]/.test(toml) && /^rounds = 400$/m.test(toml) && /^inner_steps = 12$/m.test(toml),
    `the config view does not show the demo's config: ${toml.slice(0, 200)}`);
  check(!(await page.isVisible('#x-charts')), 'charts shown on the config tab');
  await shoot(page, 'config');
  step(`logs tab: ${logLines}+ lines, live; config tab: ${toml.split('\n').length} lines of TOML`);

  // ---- an unknown experiment: nothing of the previous one stays ----------------------------------------
  await page.click('.tabs a[data-tab="overview"]');
  await page.evaluate(() => { location.hash = '#/e/no-such-run'; });
  await page.waitForSelector('#x-error:not([hidden])');
  const unknown = await page.evaluate(() => ({
    title: document.querySelector('#x-title').textContent,
    stats: [...document.querySelectorAll('#x-stats .stat')].filter(s => s.getClientRects().length).length,
    buttons: [...document.querySelectorAll('#x-actions button')].filter(b => b.getClientRects().length && !b.disabled).map(b => b.textContent),
    charts: [...document.querySelectorAll('#view-experiment canvas')].filter(c => c.getClientRects().length).length,
    error: document.querySelector('#x-error').textContent,
    role: document.querySelector('#x-error').getAttribute('role'),
  }));
  check(unknown.title !== 'demo' && unknown.stats === 0 && unknown.buttons.length === 0 && unknown.charts === 0,
    `after #/e/demo, #/e/no-such-run shows title "${unknown.title}", ${unknown.stats} stats, ` +
    `buttons [${unknown.buttons.join(', ')}], ${unknown.charts} charts`);
  check(/no-such-run/.test(unknown.error) && unknown.role === 'alert', `not-found error "${unknown.error}" (role ${unknown.role})`);
  check(/no-such-run/.test(await page.title()), `the not-found page's title is "${await page.title()}"`);
  pageErrors.length = 0;  // the 404s
  step('unknown experiment: the previous one is gone');

  // ---- stop the demo from its page: a finished experiment is not polled -------------------------------
  await page.evaluate(() => { location.hash = '#/e/demo'; });
  await page.waitForSelector('#x-actions button[data-action="stop"]:not([disabled])');
  await page.click('#x-actions button[data-action="stop"]');
  await page.waitForSelector('#x-state.finished');
  // The nodes leave once they hear it is over (events, which refresh the page).
  await page.waitForFunction(() => [...document.querySelectorAll('#nodes-table tbody tr')].every(r =>
    r.querySelector('.state.left') && r.cells[3].textContent === '–'), null, { timeout: 15000 });
  await page.waitForSelector('#x-stats .stat[data-stat="ended"]');
  // Events that come after the stop (the last metrics, the final evaluation, nodes leaving) each
  // refresh the page once; on a loaded machine they can trail the stop by seconds. Polling is
  // periodic (every 5 s) and would not stop, so wait for 2 s without any API request (at most
  // 30 s), then require 5.6 s more of silence.
  const apiRequests = () => requests.filter(p => p.includes('/api/')).length;
  for (let settleFrom = Date.now(), seen = -1; Date.now() - settleFrom < 30000;) {
    const now = apiRequests();
    if (now === seen) break;
    seen = now;
    await new Promise(r => setTimeout(r, 2000));
  }
  const before = requests.length;
  const quietFrom = Date.now();
  // Meanwhile (no fetches either): light and dark colours, at both sizes.
  await contrastChecks(page, 'experiment (light, desktop)');
  await page.setViewportSize(PHONE);
  await frames(page);
  await contrastChecks(page, 'experiment (light, phone)');
  await page.setViewportSize(DESKTOP);
  await page.emulateMedia({ colorScheme: 'dark' });
  await frames(page);
  const darkBg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const [cr, cg, cb] = darkBg.match(/\d+/g).map(Number);
  check(cr + cg + cb < 120, `prefers-color-scheme: dark, yet the page background is ${darkBg}`);
  await contrastChecks(page, 'experiment (dark, desktop)');
  await shoot(page, 'experiment-dark');
  await page.click('.tabs a[data-tab="logs"]');
  await contrastChecks(page, 'logs (dark)');
  await page.click('.tabs a[data-tab="overview"]');
  await page.emulateMedia({ colorScheme: 'light' });
  await new Promise(r => setTimeout(r, Math.max(0, 5600 - (Date.now() - quietFrom))));
  const polled = requests.slice(before).filter(p => p.includes('/api/'));
  check(polled.length === 0, `a finished experiment was fetched again within ${((Date.now() - quietFrom) / 1000).toFixed(1)} s: ${polled.join(', ')}`);
  step('stopped the demo: no polling of the finished experiment; contrast >= 4.5:1 in light and dark');

  // A refused action keeps its error (role alert) through the refresh that follows it. Pause is
  // offered only while running: shown here, it is the click of a page opened before the run ended.
  pageErrors.length = 0;
  await page.evaluate(() => { document.querySelector('#x-actions button[data-action="pause"]').hidden = false; });
  await page.click('#x-actions button[data-action="pause"]');
  await page.waitForSelector('#x-action-error:not([hidden])');
  await new Promise(r => setTimeout(r, 2000));
  const refused = await page.evaluate(() => ({
    shown: !document.querySelector('#x-action-error').hidden,
    text: document.querySelector('#x-action-error').textContent,
    role: document.querySelector('#x-action-error').getAttribute('role'),
  }));
  check(refused.shown && /^pause: .*demo/.test(refused.text) && refused.role === 'alert',
    `a refused pause 2 s later: ${JSON.stringify(refused)}`);
  pageErrors.length = 0;  // its 409
  // A log axis whose range holds no 1, 2 or 5 × 10^k tick (and one that holds one) still has at
  // least two numbers: bytes per round between 1.5 and 8 MB, and between 1.2 and 1.9 MB.
  const tickLabels = await page.evaluate(() => [[1.5e6, 8e6], [1.2e6, 1.9e6]].map(([lo, hi]) => {
    state.charts.bytes.set([{ label: 'sent', data: [{ x: 1, y: lo, round: 1 }, { x: 2, y: hi, round: 2 }] }], 'round', 2);
    return Chart.getChart(document.querySelector('#chart-bytes')).scales.y.ticks.map(t => t.label).filter(Boolean);
  }));
  await page.evaluate(() => renderCharts());
  check(tickLabels.every(l => l.length >= 2 && l.every(t => /\d(\.\d+)? MB$/.test(t))), `log y-axis labels: ${JSON.stringify(tickLabels)}`);
  step(`a refused pause stays shown ("${refused.text}"); log axis labels ${tickLabels.map(l => l.join(' ')).join(' | ')}`);

  // ---- create an experiment -------------------------------------------------------------------------
  const name = `e2e-${Date.now()}`;
  await page.click('header a[href="#/new"]');
  await page.waitForSelector('#view-new:not([hidden])');
  await page.fill('#f-name', name);
  await page.selectOption('#f-model', 'tiny');
  await page.fill('#f-nodes', '2');
  await page.fill('#f-rounds', '0');
  await page.fill('#f-inner', '4');
  await page.fill('#f-codec', 'int8');
  await page.click('#create-submit');
  const inline = await page.waitForSelector('.error[data-for="rounds"]:not(:empty)');
  const msg = await inline.textContent();
  check(/diloco\.rounds = 0 must be >= 1/.test(msg), `unexpected inline error: ${msg}`);
  const described = await page.evaluate(() => {
    const i = document.querySelector('#f-rounds');
    const d = document.getElementById(i.getAttribute('aria-describedby'));
    return { invalid: i.getAttribute('aria-invalid'), text: d && d.textContent, role: d && d.getAttribute('role') };
  });
  check(described.invalid === 'true' && described.text === msg && described.role === 'alert',
    `the rounds field is not marked invalid and described by its error: ${JSON.stringify(described)}`);
  // Three bad fields: the server answers all of them at once, each under its field.
  await page.fill('#f-lr', '0');
  await page.fill('#f-momentum', '1.5');
  await page.click('#create-submit');
  await page.waitForSelector('.error[data-for="outer_momentum"]:not(:empty)');
  const many = await page.evaluate(() => ['rounds', 'lr', 'outer_momentum'].map(k => {
    const p = document.querySelector(`.error[data-for="${k}"]`), i = document.querySelector(`[name="${k}"]`);
    return { k, text: p.textContent, invalid: i.getAttribute('aria-invalid'), described: i.getAttribute('aria-describedby') === p.id };
  }));
  check(many.every(m => m.text && m.invalid === 'true' && m.described) && /diloco\.rounds = 0 must be >= 1/.test(many[0].text) &&
    /train\.lr = 0 must be > 0/.test(many[1].text) && /diloco\.outer_momentum = 1\.5 must be in \[0, 1\)/.test(many[2].text),
    `three refused fields at once: ${JSON.stringify(many)}`);
  await contrastChecks(page, 'new experiment with errors (light)');
  await shoot(page, 'new');
  await page.setViewportSize(PHONE);
  await frames(page);
  const phoneForm = await page.evaluate(formFits);
  await page.setViewportSize(DESKTOP);
  await frames(page);
  check(phoneForm.labels >= 12 && !phoneForm.wrapped.length && !phoneForm.cut.length,
    `the form at ${PHONE.width} px: labels wrapped ${JSON.stringify(phoneForm.wrapped)}, selects cut ${JSON.stringify(phoneForm.cut)}`);
  await page.fill('#f-lr', '3e-3');
  await page.fill('#f-momentum', '0.9');
  pageErrors.length = 0;  // the refused create logs its 400
  await page.fill('#f-rounds', '3');
  // A seed above 2^53 (a JS number would round it to ...992) arrives exactly, and a clone's form
  // shows it exactly.
  await page.fill('#f-seed', '9007199254740993');
  await page.click('#create-submit');
  await page.waitForSelector(`#experiments-table tr[data-id="${name}"]`);
  check(/Experiments/.test(await page.title()), `the list's title is "${await page.title()}"`);
  const confirmed = await page.evaluate(() => ({ text: document.querySelector('#list-created').textContent,
    link: (document.querySelector('#list-created a') || {}).hash, role: document.querySelector('#list-created').getAttribute('role') }));
  check(confirmed.text === `Created experiment ${name}.` && confirmed.link === `#/e/${name}` && confirmed.role === 'status',
    `the confirmation after Create: ${JSON.stringify(confirmed)}`);
  const storedSeed = await page.evaluate(async ([t, n]) => (await (await fetch(`api/experiments/${n}`,
    { headers: { Authorization: `Bearer ${t}` } })).json()).config_toml.match(/^seed = .*$/m)[0], [token, name]);
  check(storedSeed === 'seed = 9007199254740993', `the form's seed 9007199254740993 was stored as "${storedSeed}"`);
  await page.evaluate(n => { location.hash = `#/new/${n}`; }, name);
  await page.waitForFunction(() => /^seed = /m.test(document.querySelector('#f-toml').value));
  const clonedSeed = await page.inputValue('#f-seed');
  check(clonedSeed === '9007199254740993', `the clone's seed field: "${clonedSeed}"`);
  check((await page.inputValue('#f-model')) === 'tiny', `a clone of a tiny model shows model "${await page.inputValue('#f-model')}"`);
  await page.evaluate(() => { location.hash = '#/'; });
  await page.waitForSelector(`#experiments-table tr[data-id="${name}"]`);
  step(`created ${name} (the inline errors first; its seed 2^53 + 1 exact, in its clone too)`);

  // ---- clone the demo: its whole config in the TOML editor; every error of the edited TOML ----------
  await page.evaluate(() => { location.hash = '#/e/demo'; });
  await page.click('#x-clone');
  await page.waitForFunction(() => /^rounds = 400$/m.test(document.querySelector('#f-toml').value));
  check(/Clone demo/.test(await page.title()), `the clone page's title is "${await page.title()}"`);
  const cloneToml = await page.inputValue('#f-toml');
  check(/^name = "demo-2"$/m.test(cloneToml) && /^\[robust\]$/m.test(cloneToml), `the clone's TOML: ${cloneToml.slice(0, 120)}`);
  const cloneFields = await page.evaluate(() => ['name', 'rounds', 'inner_steps', 'nodes'].map(k => document.querySelector(`#create-form [name="${k}"]`).value).join(' '));
  check(cloneFields === 'demo-2 400 12 2', `the clone's form fields (name rounds inner_steps nodes): ${cloneFields}`);
  // The TOML is what Create sends: the fields say so and cannot be edited (edits would be lost)
  // until the TOML is emptied. The demo's model (dim 48) is no preset: "custom" with its sizes.
  const tomlMode = () => page.evaluate(() => ({
    disabled: [...document.querySelectorAll('#create-form input, #create-form select')].map(i => i.disabled),
    note: !document.querySelector('#f-toml-active').hidden,
    model: document.querySelector('#f-model').value, sizes: document.querySelector('#f-model-sizes').textContent,
  }));
  const cloneMode = await tomlMode();
  check(cloneMode.disabled.every(Boolean) && cloneMode.note && cloneMode.model === 'custom' && /^dim 48 · 2 layers · /.test(cloneMode.sizes),
    `the clone's form while its TOML is sent: ${JSON.stringify(cloneMode)}`);
  await page.fill('#f-toml', '');
  const fieldsMode = await tomlMode();
  check(!fieldsMode.disabled.some(Boolean) && !fieldsMode.note, `the clone's form with its TOML emptied: ${JSON.stringify(fieldsMode)}`);
  await page.fill('#f-toml', cloneToml.replace(/^rounds = 400$/m, 'rounds = 0').replace(/^beta1 = .*$/m, 'beta1 = 1.5').replace(/^\[data\]$/m, '[data]\nsplitt = "iid"'));
  await page.click('#create-submit');
  await page.waitForSelector('#f-toml-error li');
  const tomlErrors = await page.$$eval('#f-toml-error li', ls => ls.map(l => l.textContent));
  check(tomlErrors.length === 3 && tomlErrors.some(t => /unknown key data\.splitt \(did you mean data\.split\?\)/.test(t)) &&
    tomlErrors.some(t => /diloco\.rounds = 0 must be >= 1/.test(t)) && tomlErrors.some(t => /train\.beta1 = 1\.5 must be in \[0, 1\)/.test(t)),
    `the edited TOML's errors: ${tomlErrors.join(' | ')}`);
  check((await page.getAttribute('#f-toml', 'aria-invalid')) === 'true', 'the TOML editor is not marked invalid');
  await shoot(page, 'clone');
  pageErrors.length = 0;  // the refused creates log their 400
  // The clone turns on central differential privacy (which needs screening off).
  check(/^\[privacy\]$/m.test(cloneToml), 'the clone\'s TOML has no [privacy] section');
  const privateToml = cloneToml.replace(/^rounds = 400$/m, 'rounds = 5').replace(/^screen = .*$/m, 'screen = "off"')
    .replace(/^clip_norm = .*$/m, 'clip_norm = 5').replace(/^noise_multiplier = .*$/m, 'noise_multiplier = 1.5');
  await page.fill('#f-toml', privateToml);
  await page.click('#create-submit');
  await page.waitForSelector('#experiments-table tr[data-id="demo-2"]');
  check((await page.textContent('#list-created')) === 'Created experiment demo-2.', `the clone's confirmation: ${await page.textContent('#list-created')}`);
  step(`cloned demo as demo-2 with [privacy] (first ${tomlErrors.length} errors of the edited TOML at once)`);

  // ---- the list: final bpb and duration, sorting, filtering -------------------------------------------
  const listed = await page.$$eval('#experiments-table tbody tr', rows => rows.map(r => ({
    id: r.dataset.id, bpb: r.cells[4].dataset.value, duration: r.cells[5].dataset.value })));
  const demoRow = listed.find(r => r.id === 'demo');
  check(listed.length === 3 && Number(demoRow.bpb) > 0 && Number(demoRow.duration) > 0 &&
    listed.filter(r => r.id !== 'demo').every(r => r.bpb === '' && r.duration === ''),
    `list rows (final bpb, duration): ${JSON.stringify(listed)}`);
  await page.click('#experiments-table th[data-sort="id"] button');
  const asc = await page.$$eval('#experiments-table tbody tr', rows => rows.map(r => r.dataset.id));
  check(asc.join(',') === [...asc].sort().join(',') && (await page.getAttribute('#experiments-table th[data-sort="id"]', 'aria-sort')) === 'ascending',
    `sorted by name: ${asc.join(', ')}`);
  await page.click('#experiments-table th[data-sort="id"] button');
  const desc = await page.$$eval('#experiments-table tbody tr', rows => rows.map(r => r.dataset.id));
  check(desc.join(',') === [...asc].reverse().join(','), `sorted by name, descending: ${desc.join(', ')}`);
  await page.fill('#list-filter', 'demo-');
  const filtered = await page.$$eval('#experiments-table tbody tr', rows => rows.map(r => r.dataset.id));
  check(filtered.join(',') === 'demo-2' && /1 of 3/.test(await page.textContent('#list-count')), `filter "demo-": ${filtered.join(', ')}`);
  await page.fill('#list-filter', '');
  await page.selectOption('#list-state', 'finished');
  const finished = await page.$$eval('#experiments-table tbody tr', rows => rows.map(r => r.dataset.id));
  check(finished.join(',') === 'demo', `state filter "finished": ${finished.join(', ')}`);
  await page.selectOption('#list-state', '');
  await contrastChecks(page, 'list (light)');
  // The row's buttons (start, stop, delete) apart, not touching.
  const gaps = await page.$$eval('#experiments-table td.actions', tds => tds.flatMap(td => {
    const r = [...td.querySelectorAll('button')].map(b => b.getBoundingClientRect());
    return r.slice(1).map((b, i) => b.left - r[i].right);
  }));
  check(gaps.length > 0 && gaps.every(g => g >= 4), `gaps between the list's action buttons: ${gaps.join(', ')} px`);
  await shoot(page, 'list');
  step('list: final bpb and duration, sorted both ways, filtered by text and state');

  // ---- the privacy section: shown with its config for demo-2, hidden for the demo ---------------------
  await page.evaluate(() => { location.hash = '#/e/demo-2'; });
  await page.waitForSelector('#x-privacy:not([hidden]) #privacy-config');
  await page.waitForFunction(() => /clip norm 5/.test(document.querySelector('#privacy-config').textContent));
  const privacyText = await page.textContent('#privacy-config');
  check(/clip norm 5 · noise multiplier 1\.5 · delta (0\.00001|1e-0?5) · no round committed yet/.test(privacyText), `privacy line: ${privacyText}`);
  await page.evaluate(() => { location.hash = '#/e/demo'; });
  await page.waitForFunction(() => /demo/.test(document.title) && !/demo-2/.test(document.title));
  await page.waitForSelector('#x-privacy', { state: 'hidden' });
  step(`privacy: "${privacyText}" for demo-2, hidden for the demo`);
  await page.evaluate(() => { location.hash = '#/'; });
  await page.waitForSelector('#experiments-table tr[data-id="demo-2"]');

  // ---- compare two experiments, then an unknown one --------------------------------------------------
  await page.check('#experiments-table tr[data-id="demo"] input[type=checkbox]');
  await page.check(`#experiments-table tr[data-id="${name}"] input[type=checkbox]`);
  await page.click('#compare-button:not([disabled])');
  await page.waitForSelector('#view-compare:not([hidden])');
  await page.waitForSelector('#chart-compare-bpb[data-datasets]');
  const sets = Number(await page.getAttribute('#chart-compare-bpb', 'data-datasets'));
  const lossSets = Number(await page.getAttribute('#chart-compare-loss', 'data-datasets'));
  check(sets === 2 && lossSets === 2, `compare charts have ${sets} bpb and ${lossSets} loss datasets, expected 2 each`);
  const labels = await page.evaluate(() =>
    Chart.getChart(document.querySelector('#chart-compare-bpb')).data.datasets.map(d => d.label).sort());
  check(labels.join(',') === ['demo', name].sort().join(','), `compare datasets are ${labels.join(', ')}, expected demo and ${name}`);
  const demoPoints = await page.evaluate(() =>
    Chart.getChart(document.querySelector('#chart-compare-bpb')).data.datasets.find(d => d.label === 'demo').data.length);
  check(demoPoints >= 2, `the demo's bpb curve has ${demoPoints} points in the compare view`);
  const cmpRows = await page.$$eval('#compare-table tbody tr', rows => rows.map(r => r.dataset.id));
  check(cmpRows.length === 2, `compare table has ${cmpRows.length} rows, expected 2`);
  const diff = await page.$$eval('#compare-diff tbody tr', rows => Object.fromEntries(rows.map(r => [r.dataset.key, [...r.cells].slice(1).map(c => c.textContent)])));
  check(diff['diloco.rounds'] && diff['diloco.rounds'].slice().sort().join(',') === '3,400' && diff['model.dim'] && !('name' in diff),
    `config diff: ${JSON.stringify(diff)}`);
  await page.selectOption('#c-xaxis', 'bytes');  // bpb against bytes: what a codec buys
  const cmpX = await page.evaluate(() => {
    const c = Chart.getChart(document.querySelector('#chart-compare-bpb'));
    const d = c.data.datasets.find(s => s.label === 'demo').data;
    return { title: c.options.scales.x.title.text, lastX: d[d.length - 1].x, max: c.scales.x.max };
  });
  check(/bytes sent/.test(cmpX.title) && cmpX.lastX > 1e6 && cmpX.max >= cmpX.lastX,
    `compare by bytes sent: x-axis "${cmpX.title}", the demo's last point at ${cmpX.lastX}, axis to ${cmpX.max}`);
  await page.selectOption('#c-xaxis', 'round');
  await shoot(page, 'compare');
  await page.evaluate(() => { location.hash = '#/compare/demo,no-such-run'; });
  await page.waitForSelector('#c-error:not([hidden])');
  const stale = await page.evaluate(() => ({
    rows: [...document.querySelectorAll('#compare-table tbody tr')].filter(r => r.getClientRects().length).length,
    charts: [...document.querySelectorAll('#view-compare canvas')].filter(c => c.getClientRects().length &&
      Chart.getChart(c).data.datasets.length).length,
  }));
  check(stale.rows === 0 && stale.charts === 0,
    `#/compare/demo,no-such-run still shows ${stale.rows} table rows and ${stale.charts} charts of the previous comparison`);
  pageErrors.length = 0;  // the 404
  step(`compare view: ${labels.join(' vs ')}; an unknown id clears it`);

  // ---- start the created experiment: it waits for nodes, and the join command works -------------------
  await page.evaluate(n => { location.hash = `#/e/${n}`; }, name);
  await page.waitForSelector('#x-note:not([hidden])');
  check(/Not started/.test(await page.textContent('#x-note')), `the created experiment's note: ${await page.textContent('#x-note')}`);
  await page.click('#x-actions button[data-action="start"]');
  await page.waitForSelector('#x-waiting:not([hidden])');
  const waiting = await page.textContent('#x-waiting');
  check(/Waiting for 2 nodes/.test(waiting), `waiting text: ${waiting}`);
  check(!(await page.isVisible('#x-charts')), 'empty charts shown while no round has run');
  const command = await page.getAttribute('#x-waiting [data-command]', 'data-command');
  check(command.startsWith(`atoll node --coordinator ${grpc} `), `join command "${command}" (the coordinator is at ${grpc})`);
  await shoot(page, 'waiting');
  const args = command.split(/\s+/).slice(1);
  const setArg = (flag, value) => { args[args.indexOf(flag) + 1] = value; };
  for (const [i, data] of [[1, 'brown:a'], [2, 'brown:b']]) {
    setArg('--tls', path.join(tmp, 'run', 'tls'));
    setArg('--name', `node-${i}`);
    setArg('--data', data);
    const node = spawn(ATOLL, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    node.stdout.on('data', d => { nodesOut += d; });
    node.stderr.on('data', d => { nodesOut += d; });
    extraNodes.push(node);
  }
  await page.waitForSelector('#x-state.finished', { timeout: Math.min(30000, left()) });
  await page.waitForSelector('#x-charts:not([hidden])');
  check(!(await page.isVisible('#x-waiting')), '"waiting for nodes" still shown after the run');
  step(`${name}: waited for 2 nodes, "${command.split(' --tls')[0]} ..." joined two, 3 rounds ran`);

  // ---- the coordinator goes away: the page says so ---------------------------------------------------
  await stopDemo();
  await page.waitForSelector('#conn-banner:not([hidden])', { timeout: 10000 });
  const banner = await page.textContent('#conn-banner');
  check(/Cannot reach the coordinator/.test(banner), `banner: ${banner}`);
  check((await page.getAttribute('#conn-banner', 'role')) === 'alert', 'the connection banner is not announced');
  await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-offline-desktop.png') });
  // Without live data the page does not extrapolate: no ETA, nodes unknown, elapsed stopped,
  // also for a running experiment (as if the run had not ended when the coordinator went away).
  const offline = await page.evaluate(async () => {
    state.x.summary = { ...state.x.summary, state: 'running' };
    const read = () => {
      renderStats();
      return Object.fromEntries([...document.querySelectorAll('#x-stats .stat')].map(s => [s.dataset.stat, s.querySelector('.v').textContent]));
    };
    const before = read();
    await new Promise(r => setTimeout(r, 1500));
    return { before, after: read() };
  });
  check(offline.before.eta === '–' && offline.before.nodes === '–' && /\d/.test(offline.before.elapsed) &&
    offline.after.elapsed === offline.before.elapsed, `figures while offline: ${JSON.stringify(offline)}`);
  step('coordinator stopped: the banner says so; ETA, nodes and elapsed stop');

  if (pageErrors.some(e => !/Failed to load resource|ERR_CONNECTION_REFUSED|net::/.test(e)))
    throw new Error(`errors in the page: ${pageErrors.join(' | ')}`);

  // ---- Hydra: one layers × KV groups grid per site ------------------------------------------
  // A second demo (its own CA and dashboard): 2 layers × 4 heads, two short rounds; it keeps
  // serving after it finishes, and the grids show the last selection.
  await page.goto('about:blank');
  pageErrors.length = 0;
  const LAYERS = 2, HEADS = 4;
  demo = spawn(ATOLL, [
    'demo', '--algorithm', 'hydra', '--rounds', '2', '--inner-steps', '4', '--base-steps', '20',
    '--dim', '32', '--layers', String(LAYERS), '--heads', String(HEADS), '--ffn', '64',
    '--ffn-blocks', '2', '--seq', '32', '--batch', '2', '--eval-tokens', '512',
    '--store', path.join(tmp, 'hydra'), '--http', '127.0.0.1:0', '--serve-after-done-s', '40',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  watch(demo);
  const [, hurl] = await waitFor(() => demoOut.match(/^dashboard: (https:\/\/\S+)$/m), 'the Hydra dashboard: line', 25000);
  const [, htoken] = await waitFor(() => demoOut.match(/^token: (atl_[0-9a-f]{64})$/m), 'the Hydra token: line', 5000);
  await waitFor(() => /^round 0 committed/m.test(demoOut), 'the first Hydra round', 30000);
  await page.goto(hurl);
  await page.waitForSelector('#view-login:not([hidden])');
  await page.fill('#token-input', htoken);
  await page.click('#login-form button[type=submit]');
  const hid = await (await page.waitForSelector('#experiments-table tr[data-id]')).getAttribute('data-id');
  await page.click(`#experiments-table a[href="#/e/${hid}"]`);
  await page.waitForSelector('#view-experiment:not([hidden])');
  await page.waitForSelector('#x-subnets:not([hidden]) table.grid.subnet');
  const grids = await page.$$eval('#subnet-grids table.grid.subnet', ts => ts.map(t => ({
    node: t.dataset.node,
    rows: t.querySelectorAll('tbody tr').length,
    cells: [...t.querySelectorAll('tbody tr')].map(r => r.querySelectorAll('td.cell').length),
    removed: t.querySelectorAll('td.cell.removed').length,
    // Column headers and a cell's title: head units are KV groups (docs/hydra.md "Units").
    cols: [...t.querySelectorAll('thead th')].slice(1, -1).map(th => `${th.textContent}=${th.title}`),
    cellTitle: t.querySelector('tbody td.cell').title,
  })));
  const nodes = grids.map(g => g.node).sort().join(',');
  check(nodes === 'site-a,site-f,site-j,site-n', `Hydra grids for ${nodes}, expected the four sites`);
  for (const g of grids) {
    check(g.rows === LAYERS && g.cells.every(c => c === HEADS),
      `${g.node}: grid of ${g.rows} rows with ${g.cells.join('/')} head cells, expected ${LAYERS} x ${HEADS}`);
    // No grouped-query attention here: KV group j is query head j.
    const wantCols = [...Array(HEADS).keys()].map(j => `KV${j}=KV group ${j} (query head ${j})`).join(',');
    check(g.cols.join(',') === wantCols, `${g.node}: grid columns ${g.cols.join(',')}, expected ${wantCols}`);
    check(/^site-\w: layer 0, KV group 0 \(query head 0\): (removed|kept and trained|kept, frozen)$/.test(g.cellTitle),
      `${g.node}: first cell titled "${g.cellTitle}"`);
  }
  const byNode = Object.fromEntries(grids.map(g => [g.node, g]));
  check(byNode['site-a'].removed === 0, `the full-budget site shows ${byNode['site-a'].removed} removed KV groups`);
  check(byNode['site-j'].removed > 0, 'the budget-0.25 site shows no removed KV group (its forward pass cannot fit)');
  check(!(await page.isVisible('#subnets-empty')), '"no selection yet" shown next to the grids');
  // Each site against the base model θ0, with its budget.
  await page.waitForFunction(() => [...document.querySelectorAll('#sites-table tbody tr')].length === 4 &&
    [...document.querySelectorAll('#sites-table tbody td.base')].every(td => /^\d+\.\d{4}$/.test(td.textContent)));
  const sites = await page.$$eval('#sites-table tbody tr', rows => Object.fromEntries(rows.map(r => [r.dataset.node,
    { budget: r.querySelector('.budget').textContent, flops: r.querySelector('.flops').textContent, gain: r.querySelector('.gain').textContent }])));
  check(sites['site-a'].budget === '1.00' && sites['site-f'].budget === '0.50' && sites['site-j'].budget === '0.25' &&
    sites['site-n'].budget === '0.25' && Object.values(sites).every(v => /%$/.test(v.flops) && /^([+−]\d+\.\d\d%|0\.00% \(same\))$/.test(v.gain)),
    `Hydra sites: ${JSON.stringify(sites)}`);
  const siteSets = await page.evaluate(() => Chart.getChart(document.querySelector('#chart-sites')).data.datasets.map(d => d.label).join(','));
  check(siteSets === 'site-a,site-f,site-j,site-n', `site bpb chart curves: ${siteSets}`);
  // Once the run is over, no node is "now" on any round (sites that left keep their totals).
  await page.waitForSelector('#x-state.finished', { timeout: Math.min(20000, left()) });
  await page.waitForFunction(() => [...document.querySelectorAll('#nodes-table tbody tr')].every(r => r.querySelector('.state.left')),
    null, { timeout: 15000 });
  const hnow = await page.$$eval('#nodes-table tbody tr', rows => rows.map(r => `${r.cells[0].textContent} ${r.cells[3].textContent}`));
  // The rounds table numbers the rounds as the coordinator's log printed them ("round 0
  // committed" is the first).
  const tableRounds = await page.$$eval('#rounds-table tbody tr', rows => rows.map(r => r.cells[0].textContent).sort().join(','));
  const loggedRounds = [...demoOut.matchAll(/^round (\d+) committed/mg)].map(m => m[1]).sort().join(',');
  check(tableRounds === loggedRounds && /^0,/.test(tableRounds), `rounds table ${tableRounds}, the coordinator's log ${loggedRounds}`);
  // Each site's gain over its base model: the sign and size its base and latest bpb give, the
  // verdict class that goes with it, and a summary line that counts the sites it calls better.
  const gains = await page.$$eval('#sites-table tbody tr', rows => rows.map(r => ({
    node: r.dataset.node, verdict: r.dataset.verdict, base: r.querySelector('.base').textContent,
    latest: r.querySelector('.latest').textContent, gain: r.querySelector('.gain').textContent,
    cls: r.querySelector('.gain').className })));
  for (const g of gains) {
    const want = 100 * (Number(g.base) - Number(g.latest)) / Number(g.base);
    const shown = g.gain === '0.00% (same)' ? 0 : Number(g.gain.replace('−', '-').replace('%', ''));
    check(Number.isFinite(shown) && Math.abs(shown - want) < 0.02, `${g.node}: gain ${g.gain} for base ${g.base}, latest ${g.latest}`);
    const verdict = Math.abs(shown) < 0.005 ? 'same' : shown > 0 ? 'better' : 'worse';
    check(g.verdict === verdict && g.cls.split(' ').includes(verdict), `${g.node}: verdict ${g.verdict} (${g.cls}) for gain ${g.gain}`);
  }
  const summary = await page.$eval('#sites-verdict', p => ({ text: p.textContent, ...p.dataset }));
  const nBetter = gains.filter(g => g.verdict === 'better').length, nWorse = gains.filter(g => g.verdict === 'worse').length;
  check(summary.better === String(nBetter) && summary.worse === String(nWorse) && summary.judged === '4' &&
    summary.text.startsWith(`${nBetter} of 4 sites better than their base model`) &&
    gains.filter(g => g.verdict === 'worse').every(g => summary.text.includes(g.node)),
    `site summary ${JSON.stringify(summary)} for gains ${JSON.stringify(gains)}`);
  check(hnow.length === 4 && hnow.every(t => / –$/.test(t)), `finished Hydra run, node progress: ${hnow.join(', ')}`);
  await shoot(page, 'hydra');
  step(`Hydra grids: ${grids.map(g => `${g.node} ${g.rows}x${HEADS} (${g.removed} removed)`).join(', ')}; sites ${JSON.stringify(sites)}`);

  // ---- distillation: the students' run on its dashboard (--http) ---------------------------------
  await page.goto('about:blank');
  await stopDemo();
  demo = spawn(ATOLL, [
    'demo', '--algorithm', 'distill', '--sites', '2', '--rounds', '2', '--inner-steps', '3',
    '--teacher-steps', '4', '--teacher-dim', '32', '--teacher-layers', '1', '--teacher-heads', '2', '--teacher-ffn', '64',
    '--dim', '32', '--layers', '1', '--heads', '2', '--ffn', '64', '--seq', '32', '--batch', '2', '--eval-tokens', '512',
    '--store', path.join(tmp, 'distill'), '--http', '127.0.0.1:0', '--serve-after-done-s', '30',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  watch(demo);
  const [, durl] = await waitFor(() => demoOut.match(/^dashboard: (https:\/\/\S+)$/m), 'the distillation dashboard: line', 40000);
  const [, dtoken] = await waitFor(() => demoOut.match(/^token: (atl_[0-9a-f]{64})$/m), 'the distillation token: line', 5000);
  await page.goto(`${durl}#/e/demo-distill-distill`);
  await page.waitForSelector('#view-login:not([hidden])');
  await page.fill('#token-input', dtoken);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#x-distill:not([hidden]) #distill-table tbody tr', { timeout: Math.min(30000, left()) });
  await page.waitForSelector('#x-state.finished', { timeout: Math.min(30000, left()) });
  await page.waitForFunction(() => document.querySelectorAll('#distill-table tbody tr').length === 2);
  const distill = await page.$$eval('#distill-table tbody tr', rows => rows.map(r => [r.dataset.node, Number(r.cells[1].textContent)]));
  check(distill.map(d => d[0]).join(',') === 'site-1,site-2' && distill.every(d => d[1] > 0), `distillation sites: ${JSON.stringify(distill)}`);
  check(Number(await page.getAttribute('#chart-bpb', 'data-points')) >= 2, 'no validation bpb of the distilled students');
  await shoot(page, 'distill');
  step(`distillation demo with --http: ${distill.map(d => `${d[0]} ${d[1].toFixed(1)} teacher bytes/token`).join(', ')}`);

  if (pageErrors.length) throw new Error(`errors in the page: ${pageErrors.join(' | ')}`);
  clearTimeout(watchdog);
  await cleanup();
  console.log(`dashboard e2e: PASS (${((Date.now() - started) / 1000).toFixed(1)} s; screenshots in ${ARTIFACTS})`);
} catch (e) {
  clearTimeout(watchdog);
  console.error(demoOut.split('\n').slice(-30).join('\n'));
  if (nodesOut) console.error(nodesOut.split('\n').slice(-20).join('\n'));
  await cleanup();
  die(e.message);
}
