// Atoll dashboard charts: Chart.js line charts whose x-axis is rounds completed, bytes sent,
// tokens or wall time, with every chart of a page sharing one x range, a text alternative on
// each canvas, and CSV / PNG export of what a chart shows. The charts of a page form a
// ChartGroup with one view: smoothing (TensorBoard's debiased exponential moving average),
// linear or log y, and a zoomed x range (drag across a chart; double-click, Esc or 0 resets;
// with the chart focused, arrow keys pan and + / − zoom). Loaded before app.js (plain script:
// the page's CSP allows only scripts from the server itself).
'use strict';

// ---- formatting (shared with app.js) ---------------------------------------------------------
function fmtBytes(b) {
  if (b == null || !isFinite(b)) return '–';
  const u = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (Math.abs(b) >= 1000 && i < u.length - 1) { b /= 1000; i++; }
  return `${b.toFixed(i ? 2 : 0)} ${u[i]}`;
}
function fmtNum(v, digits = 4) { return v == null || !isFinite(v) ? '–' : Number(v).toFixed(digits); }
function fmtCount(v) {
  if (v == null || !isFinite(v)) return '–';
  if (v >= 1e9) return (v / 1e9).toFixed(2) + ' G';
  if (v >= 1e6) return (v / 1e6).toFixed(2) + ' M';
  if (v >= 1e3) return (v / 1e3).toFixed(1) + ' k';
  return String(Math.round(v));
}
function fmtDuration(s) {
  if (s == null || !isFinite(s)) return '–';
  if (s < 1) return `${(s * 1000).toFixed(0)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

// ---- x-axes ----------------------------------------------------------------------------------
// Every series is [round, value] with round = rounds completed (0 = the initial parameters).
// The other axes map a round to a running total of a per-round global series, so the same
// points can be drawn against bytes, tokens or time.
const X_AXES = {
  round: { option: 'round', title: 'rounds completed', column: 'round', fmt: v => String(Math.round(v)) },
  bytes: { option: 'bytes sent', title: 'bytes sent (up + down, cumulative)', column: 'bytes_sent', series: 'bytes', fmt: fmtBytes },
  tokens: { option: 'tokens', title: 'tokens trained (cumulative)', column: 'tokens', series: 'tokens', fmt: fmtCount },
  time: { option: 'wall time', title: 'wall time (sum of round durations)', column: 'seconds', series: 'duration_s', fmt: fmtDuration },
};

// Running totals of a per-round series as [round, total] knots, starting at (0, 0). With
// `bucket` > 1 each point averages `bucket` rounds (the last bucket may be shorter).
function cumulativeKnots(series, bucket, totalRounds) {
  const knots = [[0, 0]];
  let total = 0;
  (series || []).forEach(([x, y], i) => {
    const last = i === series.length - 1;
    const rounds = bucket <= 1 ? 1 : last ? Math.max(1, totalRounds - bucket * i) : bucket;
    total += (y || 0) * rounds;
    knots.push([bucket <= 1 ? x : Math.min(totalRounds, bucket * (i + 1)), total]);
  });
  return knots;
}
// Piecewise linear through the knots; flat past the last one.
function interpolate(knots, x) {
  if (x <= knots[0][0]) return knots[0][1];
  let lo = 0, hi = knots.length - 1;
  if (x >= knots[hi][0]) return knots[hi][1];
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (knots[mid][0] <= x) lo = mid; else hi = mid;
  }
  const [x0, y0] = knots[lo], [x1, y1] = knots[hi];
  return x1 === x0 ? y1 : y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}
// round -> x on `axis`, for one experiment's metrics (GET .../metrics).
function xMapper(metrics, axis) {
  const spec = X_AXES[axis];
  if (!spec.series) return r => r;
  const g = metrics.global || {};
  const knots = cumulativeKnots(g[spec.series], metrics.bucket || 1, metrics.total_rounds || 0);
  return r => interpolate(knots, r);
}
// [[round, value], ...] -> Chart.js points {x, y, round}.
function toPoints(series, map) {
  return (series || []).filter(p => p[1] != null).map(([r, y]) => ({ x: map(r), y, round: r }));
}
// TensorBoard's smoothing: an exponential moving average with weight `w` in [0, 1), debiased
// so that the first points are not pulled towards 0 (w = 0: the points unchanged).
function smoothPoints(points, w) {
  let acc = 0;
  return points.map((p, i) => {
    acc = acc * w + (1 - w) * p.y;
    return { ...p, y: w > 0 ? acc / (1 - w ** (i + 1)) : p.y };
  });
}

// ---- a page's charts: one view --------------------------------------------------------------
// view.smoothing: EMA weight; view.logY: log y on every chart; view.zoom: {min, max} of x or
// null (0 to the end). `onChange` runs after every change (the page's controls follow).
class ChartGroup {
  constructor(onChange = () => {}) {
    this.charts = [];
    this.view = { smoothing: 0, logY: false, zoom: null };
    this.onChange = onChange;
  }
  add(chart) { this.charts.push(chart); chart.group = this; return chart; }
  // The right end of the shared range: the largest of the charts' own ends.
  fullMax() { return Math.max(0, ...this.charts.map(c => c.fullMax || 0)); }
  update(change) {
    Object.assign(this.view, change);
    const z = this.view.zoom;
    if (z) {
      const end = this.fullMax();
      const min = Math.max(0, Math.min(z.min, z.max)), max = Math.min(end, Math.max(z.min, z.max));
      this.view.zoom = max - min > end * 1e-6 && (min > 0 || max < end) ? { min, max } : null;
    }
    for (const c of this.charts) c.draw();
    this.onChange(this.view);
  }
  resetZoom() { this.update({ zoom: null }); }
  // factor < 1 zooms in around the middle; pan moves by `shift` widths (negative: left).
  zoomBy(factor) {
    const end = this.fullMax(), z = this.view.zoom || { min: 0, max: end };
    const mid = (z.min + z.max) / 2, half = Math.min(end, (z.max - z.min) * factor) / 2;
    let min = mid - half, max = mid + half;
    if (min < 0) { max -= min; min = 0; }
    if (max > end) { min -= max - end; max = end; }
    this.update({ zoom: { min: Math.max(0, min), max } });
  }
  pan(shift) {
    const end = this.fullMax(), z = this.view.zoom;
    if (!z) return;
    const width = z.max - z.min;
    const min = Math.min(Math.max(0, z.min + shift * width), end - width);
    this.update({ zoom: { min, max: min + width } });
  }
}

// ---- theme -------------------------------------------------------------------------------------
const PALETTE = {
  light: ['#0e7490', '#c2410c', '#7c3aed', '#15803d', '#be185d', '#1d4ed8', '#a16207',
    '#0f766e', '#9333ea', '#b91c1c', '#4d7c0f', '#0369a1', '#c026d3', '#57534e', '#ea580c'],
  dark: ['#22d3ee', '#fb923c', '#a78bfa', '#4ade80', '#f472b6', '#60a5fa', '#facc15',
    '#2dd4bf', '#c084fc', '#f87171', '#a3e635', '#38bdf8', '#e879f9', '#d6d3d1', '#fdba74'],
};
const darkQuery = window.matchMedia('(prefers-color-scheme: dark)');
function cssVar(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }
function seriesColor(i) { return PALETTE[darkQuery.matches ? 'dark' : 'light'][i % PALETTE.light.length]; }
const chartTheme = { text: '#4b5563', line: '#e2e8f0' };
function applyChartTheme() {
  chartTheme.text = cssVar('--muted');
  chartTheme.line = cssVar('--line');
  Chart.defaults.color = chartTheme.text;
  Chart.defaults.borderColor = chartTheme.line;
}

// ---- one chart ---------------------------------------------------------------------------------
// A <figure data-chart=KEY> becomes: caption with CSV/PNG buttons, and a canvas (role img,
// aria-label = what the chart shows, in words).
class LineChart {
  constructor(figure, { id, caption, yTitle, logY = false, unit = 'plain', file, group }) {
    this.caption = caption;
    this.file = file;
    this.yTitle = yTitle;
    this.logY = logY;  // always log (bytes per round spans decades)
    this.unit = unit;  // 'plain' | 'bytes' | 'seconds': how y values are written
    this.axis = 'round';
    this.raw = [];     // the sets as given to set()
    this.sets = [];    // the sets drawn (smoothed, plus the raw curves faded)
    this.fullMax = 1;
    (group || new ChartGroup()).add(this);
    this.captionText = document.createElement('span');
    this.captionText.textContent = caption;
    const button = (label, what, fn) => {
      const b = document.createElement('button');
      b.className = 'ghost small';
      b.type = 'button';
      b.textContent = label;
      b.dataset.export = what;
      b.setAttribute('aria-label', `${label} of “${caption}”`);
      b.addEventListener('click', fn);
      return b;
    };
    const tools = document.createElement('span');
    tools.className = 'tools';
    tools.append(button('CSV', 'csv', () => this.downloadCsv()), button('PNG', 'png', () => this.downloadPng()));
    const cap = document.createElement('figcaption');
    cap.append(this.captionText, tools);
    this.canvas = document.createElement('canvas');
    this.canvas.id = id;
    this.canvas.setAttribute('role', 'img');
    this.canvas.tabIndex = 0;  // keyboard zoom and pan
    this.canvas.setAttribute('aria-keyshortcuts', 'ArrowLeft ArrowRight + - 0 Escape');
    const box = document.createElement('div');
    box.className = 'chart-box';
    this.band = document.createElement('div');  // the range being dragged
    this.band.className = 'zoom-band';
    this.band.hidden = true;
    box.append(this.canvas, this.band);
    this.empty = document.createElement('p');
    this.empty.className = 'muted chart-empty';
    this.empty.hidden = true;
    figure.replaceChildren(cap, box, this.empty);
    this.box = box;
    this.chart = new Chart(this.canvas, this.options());
    this.recolor();
    this.listen();
  }

  // Drag across the plot to zoom to that x range; double-click resets; keys when focused.
  listen() {
    const c = this.canvas;
    let from = null;
    const xAt = ev => {
      const r = c.getBoundingClientRect(), a = this.chart.chartArea;
      return Math.min(a.right, Math.max(a.left, ev.clientX - r.left));
    };
    c.addEventListener('pointerdown', ev => {
      if (ev.button !== 0 || !this.chart.chartArea) return;
      from = xAt(ev);
      c.setPointerCapture(ev.pointerId);
    });
    c.addEventListener('pointermove', ev => {
      if (from == null) return;
      const to = xAt(ev), a = this.chart.chartArea;
      Object.assign(this.band.style, { left: `${Math.min(from, to)}px`, width: `${Math.abs(to - from)}px`,
        top: `${a.top}px`, height: `${a.bottom - a.top}px` });
      this.band.hidden = Math.abs(to - from) < 4;
    });
    const end = ev => {
      if (from == null) return;
      const to = xAt(ev), start = from;
      from = null;
      this.band.hidden = true;
      if (Math.abs(to - start) < 6) return;  // a click, not a drag
      const x = this.chart.scales.x;
      this.group.update({ zoom: { min: x.getValueForPixel(Math.min(start, to)), max: x.getValueForPixel(Math.max(start, to)) } });
    };
    c.addEventListener('pointerup', end);
    c.addEventListener('pointercancel', () => { from = null; this.band.hidden = true; });
    c.addEventListener('dblclick', () => this.group.resetZoom());
    c.addEventListener('keydown', ev => {
      const act = {
        ArrowLeft: () => this.group.pan(-0.25), ArrowRight: () => this.group.pan(0.25),
        '+': () => this.group.zoomBy(0.5), '=': () => this.group.zoomBy(0.5), '-': () => this.group.zoomBy(2),
        '0': () => this.group.resetZoom(), Escape: () => this.group.resetZoom(), Home: () => this.group.resetZoom(),
      }[ev.key];
      if (!act) return;
      ev.preventDefault();
      act();
    });
  }

  options() {
    const self = this;
    return {
      type: 'line',
      data: { datasets: [] },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
        interaction: { mode: 'nearest', intersect: false },
        plugins: {
          legend: { display: true, labels: { boxWidth: 10, filter: item => !/ \(raw\)$/.test(item.text) } },
          tooltip: {
            callbacks: {
              title: items => items.length ? self.describeX(items[0].raw) : '',
              label: item => `${item.dataset.label}: ${self.fmtY(item.raw.y)}`,
            },
          },
        },
        elements: { point: { radius: 2 }, line: { borderWidth: 2, tension: 0.2 } },
        scales: {
          x: {
            type: 'linear', min: 0, title: { display: true, text: X_AXES.round.title },
            ticks: { callback: v => X_AXES[self.axis].fmt(v), maxRotation: 0, autoSkipPadding: 12, includeBounds: false },
          },
          y: {
            type: this.logY ? 'logarithmic' : 'linear', title: { display: !!this.yTitle, text: this.yTitle },
            ticks: {},
          },
        },
      },
    };
  }

  fmtY(y) { return this.unit === 'bytes' ? fmtBytes(y) : this.unit === 'seconds' ? fmtDuration(y) : fmtNum(y); }
  // Log ticks (Chart.js's `ticks`: every tick of the axis, none skipped: see draw): 1, 2 and 5
  // times a power of ten (only powers of ten over more than three decades, so labels do not
  // crowd), written in the chart's unit. A range holding fewer than two of them (bytes between
  // 1.5 and 8 MB) labels its lowest and highest ticks too, so the axis always has numbers to read.
  logTick(v, ticks) {
    const lo = ticks.length ? ticks[0].value : v, hi = ticks.length ? ticks[ticks.length - 1].value : v;
    const marks = Math.log10(hi / lo) > 3 ? [1] : [1, 2, 5];
    const round = t => { const m = t / 10 ** Math.floor(Math.log10(t)); return marks.some(k => Math.abs(m - k) < 1e-6); };
    const end = v === lo || v === hi;
    if (!round(v) && !(end && ticks.filter(t => round(t.value)).length < 2)) return '';
    return this.unit === 'plain' ? String(Number(v.toPrecision(3))) : this.fmtY(v);
  }
  describeX(p) {
    // p.round is rounds completed (a count; the API numbers the rounds themselves from 0).
    const r = `${Number.isInteger(p.round) ? p.round : p.round.toFixed(1)} rounds done`;
    return this.axis === 'round' ? r : `${r} · ${X_AXES[this.axis].fmt(p.x)}`;
  }

  // sets: [{label, data: [{x, y, round}], color?, dash?}]; every chart of a page gets the same
  // xMax so their axes line up. `emptyText`: what to say instead of empty axes.
  set(sets, axis, xMax, captionNote = '', emptyText = 'No data yet.') {
    const hasData = sets.some(s => s.data.length);
    this.box.hidden = !hasData;
    this.empty.hidden = hasData;
    this.empty.textContent = emptyText;
    this.raw = sets.map((s, i) => ({ ...s, fixedColor: !!s.color, color: s.color || seriesColor(i) }));
    this.axis = axis;
    this.fullMax = xMax > 0 ? xMax : 1;
    this.captionText.textContent = this.caption + captionNote;
    this.draw();
  }

  // The raw sets through the group's view: smoothed curves with the raw ones faded behind
  // them (labelled "… (raw)", not in the legend), the y scale, the x range.
  draw() {
    const v = this.group.view;
    this.sets = v.smoothing > 0
      ? this.raw.flatMap(s => [{ ...s, data: smoothPoints(s.data, v.smoothing) }, { ...s, label: `${s.label} (raw)`, faded: true }])
      : this.raw;
    this.chart.data.datasets = this.sets.map(s => ({
      label: s.label, data: s.data, borderDash: s.dash || [],
      borderColor: s.faded ? `${s.color}55` : s.color, backgroundColor: s.faded ? `${s.color}55` : s.color,
      borderWidth: s.faded ? 1 : 2, pointRadius: s.faded ? 0 : 2, order: s.faded ? 1 : 0,
    }));
    const x = this.chart.options.scales.x;
    x.min = v.zoom ? v.zoom.min : 0;
    x.max = v.zoom ? v.zoom.max : this.fullMax;
    x.title.text = X_AXES[this.axis].title;
    x.ticks.precision = this.axis === 'round' ? 0 : undefined;
    const y = this.chart.options.scales.y;
    const log = this.logY || v.logY;
    y.type = log ? 'logarithmic' : 'linear';
    if (log) y.ticks.callback = (val, i, ticks) => this.logTick(val, ticks);
    else delete y.ticks.callback;
    // logTick thins a log axis's labels itself; Chart.js's skipping (every other tick) would
    // drop the labelled ones and keep empty ones.
    y.ticks.autoSkip = !log;
    this.chart.update('none');
    this.describe();
  }

  clear() { this.set([], this.axis, 1); }

  // Points inside the zoomed x range (all of them when not zoomed).
  visible(points) {
    const z = this.group.view.zoom;
    return z ? points.filter(p => p.x >= z.min - 1e-9 && p.x <= z.max + 1e-9) : points;
  }

  // After a theme change (and at creation): series, grid and text colours.
  recolor() {
    this.raw.forEach((s, i) => { if (!s.fixedColor) s.color = seriesColor(i); });
    this.draw();
    const o = this.chart.options;
    for (const axis of [o.scales.x, o.scales.y]) {
      axis.grid.color = chartTheme.line;
      axis.border.color = chartTheme.line;
      axis.ticks.color = chartTheme.text;
      axis.title.color = chartTheme.text;
    }
    o.plugins.legend.labels.color = chartTheme.text;
    this.chart.update('none');
    this.describe();
  }

  // The text alternative: what is plotted, against what, and where each series ends.
  describe() {
    const withData = this.sets.filter(s => !s.faded && this.visible(s.data).length);
    const v = this.group ? this.group.view : { smoothing: 0, zoom: null };
    let text = `${this.caption}: `;
    if (!withData.length) text += 'no data yet.';
    else {
      const xs = X_AXES[this.axis], x = this.chart.options.scales.x;
      text += `x-axis ${xs.title}, ${v.zoom ? 'zoomed to' : 'from'} ${xs.fmt(x.min)} to ${xs.fmt(x.max)}` +
        `${v.smoothing > 0 ? `, smoothed (weight ${v.smoothing})` : ''}. ` + withData.map(s => {
        const pts = this.visible(s.data), last = pts[pts.length - 1];
        return `${s.label}: ${pts.length} points, last ${this.fmtY(last.y)} at ${this.describeX(last)}`;
      }).join('; ') + '.';
    }
    this.canvas.setAttribute('aria-label', text);
  }

  // One row per point: rounds completed (named so: the API numbers the rounds themselves from 0,
  // and round r's row is rounds_completed = r + 1), the x-axis value when it is not that, one
  // column per series.
  csv() {
    const xs = X_AXES[this.axis];
    const rows = new Map();
    this.sets.forEach((s, i) => {
      for (const p of this.visible(s.data)) {
        if (!rows.has(p.round)) rows.set(p.round, { x: p.x, v: [] });
        rows.get(p.round).v[i] = p.y;
      }
    });
    const quote = v => (/[",\n]/.test(v) ? `"${v.replace(/"/g, '""')}"` : v);
    const head = ['rounds_completed', ...(this.axis === 'round' ? [] : [xs.column]), ...this.sets.map(s => quote(s.label))];
    const lines = [head.join(',')];
    for (const r of [...rows.keys()].sort((a, b) => a - b)) {
      const row = rows.get(r);
      lines.push([r, ...(this.axis === 'round' ? [] : [row.x]), ...this.sets.map((_, i) => (row.v[i] == null ? '' : row.v[i]))].join(','));
    }
    return lines.join('\n') + '\n';
  }

  downloadCsv() { saveBlob(new Blob([this.csv()], { type: 'text/csv' }), `${this.file()}-${this.axis}.csv`); }

  // The canvas is transparent: draw it on the card colour first.
  downloadPng() {
    const src = this.canvas;
    const out = document.createElement('canvas');
    out.width = src.width; out.height = src.height;
    const ctx = out.getContext('2d');
    ctx.fillStyle = cssVar('--card') || '#fff';
    ctx.fillRect(0, 0, out.width, out.height);
    ctx.drawImage(src, 0, 0);
    out.toBlob(b => saveBlob(b, `${this.file()}-${this.axis}.png`), 'image/png');
  }
}

function saveBlob(blob, filename) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// Largest x over the sets (the shared right end of a page's axes).
function maxX(...setLists) {
  let m = 0;
  for (const sets of setLists) for (const s of sets) for (const p of s.data) if (p.x > m) m = p.x;
  return m;
}
