// Browser end-to-end test of the dashboard: a real `atoll demo` (embedded coordinator, dev CA,
// TLS 1.3, node processes) and Debian's headless Chromium driven by playwright-core.
//   log in with the printed token → create an experiment (first with a bad value: the server's
//   message shows inline) → open the running demo → rounds arrive live and the charts grow →
//   screenshot kept as a test artifact → select the demo and the new experiment in the list and
//   compare them (one chart dataset per experiment, a table row each; screenshot kept too) →
//   a Hydra demo (four sites, budgets 1.0 / 0.5 / 0.25 / 0.25): its experiment page shows one
//   layers × heads grid per site, the full-budget site keeps every head, a quarter site does not.
// Run from the repository root: node tests/e2e/dashboard.spec.mjs
// Environment: ATOLL_BINARY (default build/atoll), ATOLL_ARTIFACTS (default build/test-artifacts),
// CHROMIUM (default /usr/bin/chromium).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const ATOLL = process.env.ATOLL_BINARY || 'build/atoll';
const ARTIFACTS = process.env.ATOLL_ARTIFACTS || 'build/test-artifacts';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TOTAL_BUDGET_MS = 85000;
const started = Date.now();
const left = () => Math.max(1000, TOTAL_BUDGET_MS - (Date.now() - started));

function die(message) {
  console.error(`dashboard e2e: FAIL: ${message}`);
  process.exit(1);
}
const step = message => console.log(`[${((Date.now() - started) / 1000).toFixed(1)}s] ${message}`);

if (!fs.existsSync(CHROMIUM))
  die(`no browser at ${CHROMIUM}: install Debian's chromium (deploy/install-deps.sh or apt-get install chromium)`);
if (!fs.existsSync(ATOLL)) die(`no atoll binary at ${ATOLL}: build it first (make build)`);
if (!fs.existsSync('node_modules/chart.js/dist/chart.umd.js'))
  die('node_modules/chart.js is missing: run `npm ci` in the repository root');

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'atoll-e2e-'));
fs.mkdirSync(ARTIFACTS, { recursive: true });

// A small model and many short rounds: rounds keep arriving while the browser watches; the test
// stops the demo when it is done (the demo would otherwise serve a bounded time after training).
let demo = spawn(ATOLL, [
  'demo', '--nodes', '2', '--rounds', '400', '--inner-steps', '12', '--dim', '48', '--layers', '2',
  '--heads', '2', '--ffn', '96', '--seq', '48', '--batch', '4', '--eval-tokens', '2048',
  '--store', path.join(tmp, 'run'), '--http', '127.0.0.1:0', '--serve-after-done-s', '20',
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

let context = null;
async function cleanup() {
  if (context) await context.close().catch(() => {});
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

try {
  const [, url] = await waitFor(() => demoOut.match(/^dashboard: (https:\/\/\S+)$/m), 'the dashboard: line', 25000);
  const [, token] = await waitFor(() => demoOut.match(/^token: (atl_[0-9a-f]{64})$/m), 'the token: line', 5000);
  step(`demo serves ${url}`);

  context = await chromium.launchPersistentContext(path.join(tmp, 'profile'), {
    executablePath: CHROMIUM,
    headless: true,
    ignoreHTTPSErrors: true,  // the demo's certificate is signed by its own fresh dev CA
    viewport: { width: 1360, height: 1000 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(20000);
  const pageErrors = [];
  page.on('pageerror', e => pageErrors.push(String(e)));
  page.on('console', m => { if (m.type() === 'error') pageErrors.push(m.text()); });
  page.on('response', r => { if (r.status() >= 500) pageErrors.push(`${r.status()} ${r.url()}`); });

  // ---- log in ---------------------------------------------------------------------------------
  await page.goto(url);
  await page.waitForSelector('#view-login:not([hidden])');
  await page.fill('#token-input', 'atl_' + '0'.repeat(64));
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#login-error:not([hidden])');  // an unknown token is refused
  pageErrors.length = 0;  // the refused login logs its 401
  await page.fill('#token-input', token);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#experiments-table tr[data-id="demo"]');
  if ((await page.textContent('#role')) !== 'admin') throw new Error('the demo token is not an admin token');
  step('logged in');

  // ---- create an experiment -------------------------------------------------------------------
  const name = `e2e-${Date.now()}`;
  await page.click('header a[href="#/new"]');
  await page.waitForSelector('#view-new:not([hidden])');
  await page.fill('#f-name', name);
  await page.selectOption('#f-model', 'tiny');
  await page.fill('#f-nodes', '2');
  await page.fill('#f-rounds', '0');
  await page.fill('#f-inner', '20');
  await page.fill('#f-codec', 'int8');
  await page.click('#create-submit');
  const inline = await page.waitForSelector('.error[data-for="rounds"]:not(:empty)');
  const msg = await inline.textContent();
  if (!/diloco\.rounds = 0 must be >= 1/.test(msg)) throw new Error(`unexpected inline error: ${msg}`);
  step(`inline validation error shown: ${msg}`);
  pageErrors.length = 0;  // the refused create logs its 400
  await page.fill('#f-rounds', '5');
  await page.click('#create-submit');
  await page.waitForSelector(`#experiments-table tr[data-id="${name}"]`);
  step(`created ${name}`);

  // ---- watch the demo train -------------------------------------------------------------------
  await page.click('#experiments-table a[href="#/e/demo"]');
  await page.waitForSelector('#view-experiment:not([hidden])');
  await page.waitForFunction(() => Number(document.querySelector('#chart-bpb').dataset.points || 0) >= 2);
  const first = Number(await page.getAttribute('#timeline', 'data-rounds'));
  const firstPoints = Number(await page.getAttribute('#chart-bpb', 'data-points'));
  step(`experiment page shows ${first} rounds, ${firstPoints} bpb points`);
  // Live: more rounds and chart points arrive without reloading the page.
  await page.waitForFunction(
    ([r, p]) => Number(document.querySelector('#timeline').dataset.rounds) >= r + 3 &&
      Number(document.querySelector('#chart-bpb').dataset.points) >= p + 3,
    [first, firstPoints], { timeout: Math.min(30000, left()) });
  const nodeRows = await page.$$eval('#nodes-table tbody tr', rows => rows.length);
  if (nodeRows !== 2) throw new Error(`node table has ${nodeRows} rows, expected 2`);
  // The demo runs DiLoCo: the Hydra subnetwork grids stay hidden (their API answers no sites).
  if (await page.isVisible('#x-subnets')) throw new Error('Hydra subnetworks shown for a DiLoCo experiment');
  const live = await page.getAttribute('#live-indicator', 'class');
  if (!/\bon\b/.test(live)) throw new Error('the live event stream is not connected');
  const now = Number(await page.getAttribute('#timeline', 'data-rounds'));
  step(`rounds arrived live: ${first} -> ${now}`);

  const shot = path.join(ARTIFACTS, 'dashboard.png');
  await page.screenshot({ path: shot, fullPage: true });
  step(`screenshot ${shot}`);

  // ---- compare two experiments ----------------------------------------------------------------
  await page.click('header a[href="#/"]');
  await page.waitForSelector(`#experiments-table tr[data-id="${name}"] input[type=checkbox]`);
  await page.check('#experiments-table tr[data-id="demo"] input[type=checkbox]');
  await page.check(`#experiments-table tr[data-id="${name}"] input[type=checkbox]`);
  await page.click('#compare-button:not([disabled])');
  await page.waitForSelector('#view-compare:not([hidden])');
  await page.waitForSelector('#chart-compare-bpb[data-datasets]');
  const sets = Number(await page.getAttribute('#chart-compare-bpb', 'data-datasets'));
  const lossSets = Number(await page.getAttribute('#chart-compare-loss', 'data-datasets'));
  if (sets !== 2 || lossSets !== 2)
    throw new Error(`compare charts have ${sets} bpb and ${lossSets} loss datasets, expected 2 each`);
  const labels = await page.evaluate(() =>
    Chart.getChart(document.querySelector('#chart-compare-bpb')).data.datasets.map(d => d.label).sort());
  if (labels.join(',') !== ['demo', name].sort().join(','))
    throw new Error(`compare datasets are ${labels.join(', ')}, expected demo and ${name}`);
  const demoPoints = await page.evaluate(() =>
    Chart.getChart(document.querySelector('#chart-compare-bpb')).data.datasets.find(d => d.label === 'demo').data.length);
  if (demoPoints < 2) throw new Error(`the demo's bpb curve has ${demoPoints} points in the compare view`);
  const cmpRows = await page.$$eval('#compare-table tbody tr', rows => rows.map(r => r.dataset.id));
  if (cmpRows.length !== 2) throw new Error(`compare table has ${cmpRows.length} rows, expected 2`);
  const cmpShot = path.join(ARTIFACTS, 'dashboard-compare.png');
  await page.screenshot({ path: cmpShot, fullPage: true });
  step(`compare view: ${labels.join(' vs ')}, screenshot ${cmpShot}`);

  if (pageErrors.length) throw new Error(`errors in the page: ${pageErrors.join(' | ')}`);

  // ---- Hydra: one layers × heads grid per site ----------------------------------------------
  // A second demo (its own CA and dashboard): 2 layers × 4 heads, two short rounds; it keeps
  // serving after it finishes, and the grids show the last selection.
  await page.goto('about:blank');  // the DiLoCo page stops polling before its server goes
  await stopDemo();
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
  })));
  const nodes = grids.map(g => g.node).sort().join(',');
  if (nodes !== 'site-a,site-f,site-j,site-n') throw new Error(`Hydra grids for ${nodes}, expected the four sites`);
  for (const g of grids) {
    if (g.rows !== LAYERS || g.cells.some(c => c !== HEADS))
      throw new Error(`${g.node}: grid of ${g.rows} rows with ${g.cells.join('/')} head cells, expected ${LAYERS} x ${HEADS}`);
  }
  const byNode = Object.fromEntries(grids.map(g => [g.node, g]));
  if (byNode['site-a'].removed !== 0) throw new Error(`the full-budget site shows ${byNode['site-a'].removed} removed heads`);
  if (byNode['site-j'].removed === 0) throw new Error('the budget-0.25 site shows no removed head (its forward pass cannot fit)');
  if (await page.isVisible('#subnets-empty')) throw new Error('"no selection yet" shown next to the grids');
  const hshot = path.join(ARTIFACTS, 'dashboard-hydra.png');
  await page.screenshot({ path: hshot, fullPage: true });
  step(`Hydra grids: ${grids.map(g => `${g.node} ${g.rows}x${HEADS} (${g.removed} removed)`).join(', ')}; screenshot ${hshot}`);

  if (pageErrors.length) throw new Error(`errors in the page: ${pageErrors.join(' | ')}`);
  clearTimeout(watchdog);
  await cleanup();
  console.log('dashboard e2e: PASS');
} catch (e) {
  clearTimeout(watchdog);
  console.error(demoOut.split('\n').slice(-30).join('\n'));
  await cleanup();
  die(e.message);
}
