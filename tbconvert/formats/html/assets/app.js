/* The tbconvert web view. Every name, tag and value from the logs reaches the page
   through textContent (or is escaped for Plotly, which reads a little HTML in labels);
   the only HTML inserted is text rendered and sanitised when the site was written. */
(function () {
  'use strict';

  // ------------------------------------------------------------------ data files
  // Data arrive as <script> files (fetch of local files fails under file://).
  var store = {};
  var waiting = {};
  var manifest = null;

  window.tbData = {
    manifest: function (m) { manifest = m; },
    add: function (key, meta, payload) {
      store[key] = { meta: meta, payload: payload };
      var cbs = waiting[key];
      if (cbs) {
        delete waiting[key];
        cbs.forEach(function (cb) { cb[0](store[key]); });
      }
    }
  };

  // plotly.js (4.8 MB) loads async: the browser compiles it while the first chart's data
  // loads and decodes, and every chart waits for it before drawing.
  var plotlyReady = null;
  function withPlotly() {
    if (!plotlyReady) {
      plotlyReady = new Promise(function (resolve, reject) {
        if (window.Plotly) { resolve(); return; }
        var tag = document.getElementById('plotly-js');
        tag.addEventListener('load', function () { resolve(); });
        tag.addEventListener('error', function () { reject(new Error('assets/plotly.min.js did not load')); });
      });
    }
    return plotlyReady;
  }

  function load(key) {
    return new Promise(function (resolve, reject) {
      if (store[key]) { resolve(store[key]); return; }
      if (waiting[key]) { waiting[key].push([resolve, reject]); return; }
      waiting[key] = [[resolve, reject]];
      var s = document.createElement('script');
      s.src = 'data/' + encodeURIComponent(key) + '.js';
      s.onerror = function () {
        var cbs = waiting[key] || [];
        delete waiting[key];
        cbs.forEach(function (cb) { cb[1](new Error('data file data/' + key + '.js did not load')); });
      };
      document.head.appendChild(s);
    });
  }

  function decodeBase64(text) {
    if (Uint8Array.fromBase64) return Uint8Array.fromBase64(text).buffer;
    var bin = atob(text);
    var n = bin.length;
    var bytes = new Uint8Array(n);
    for (var i = 0; i < n; i++) bytes[i] = bin.charCodeAt(i);
    return bytes.buffer;
  }

  // The columns of a binary data file as typed arrays (decoded once, then kept).
  function columns(entry) {
    if (entry.cols) return entry.cols;
    var buf = decodeBase64(entry.payload);
    var out = {};
    Object.keys(entry.meta.cols).forEach(function (name) {
      var c = entry.meta.cols[name];
      var Type = c[0] === 'i4' ? Int32Array : c[0] === 'f4' ? Float32Array : Float64Array;
      out[name] = new Type(buf, c[1], c[2]);
    });
    entry.cols = out;
    entry.payload = null;
    return out;
  }

  // ------------------------------------------------------------------ helpers

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  // Plotly reads a few HTML tags and entities in labels: escape them so names stay text.
  function plotlyText(s) {
    return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;').replace(/'/g, '&#39;');
  }

  var PALETTE = ['#425066', '#12b5cb', '#e52592', '#f9ab00', '#9334e6', '#7cb342', '#e8710a',
    '#1a73e8', '#c5221f', '#0f9d58', '#795548', '#607d8b'];
  function runColor(i) { return PALETTE[i % PALETTE.length]; }

  function regex(text) {
    if (!text) return null;
    try { return new RegExp(text, 'i'); } catch (e) {
      var lower = text.toLowerCase();
      return { test: function (s) { return s.toLowerCase().indexOf(lower) >= 0; } };
    }
  }

  function formatWall(t) { return new Date(t * 1000).toISOString().replace('T', ' ').replace('Z', ' UTC'); }

  // ------------------------------------------------------------------ state

  var state = {
    selected: {},        // run index -> shown
    smoothing: 0.6,
    xaxis: 'step',
    log: false,
    tab: null,
    tagFilter: null
  };
  var charts = [];       // every chart card: {card, draw(), dirty, visible}
  var observer = null;
  window.tbView = { firstChartMs: null, charts: charts, state: state };

  function shownRuns(series) {
    return series.filter(function (s) { return state.selected[s.run]; });
  }

  // ------------------------------------------------------------------ downsampling

  function isSorted(x) {
    for (var i = 1; i < x.length; i++) if (!(x[i] >= x[i - 1])) return false;
    return true;
  }

  function lowerBound(x, v) {
    var lo = 0, hi = x.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (x[mid] < v) lo = mid + 1; else hi = mid; }
    return lo;
  }

  // Indices of real points to draw for the x range [x0, x1]: all of them when few,
  // else each bucket's first, lowest, highest and last point (so spikes stay visible).
  var MAX_DRAWN = 4000;
  function pick(x, y, sorted, x0, x1) {
    var idx;
    if (sorted) {
      var a = x0 === null ? 0 : Math.max(0, lowerBound(x, x0) - 1);
      var b = x1 === null ? x.length : Math.min(x.length, lowerBound(x, x1) + 1);
      if (b - a <= MAX_DRAWN) {
        idx = new Int32Array(b - a);
        for (var i = 0; i < idx.length; i++) idx[i] = a + i;
        return idx;
      }
      return buckets(y, a, b, null);
    }
    var inRange = [];
    for (var j = 0; j < x.length; j++) {
      if ((x0 === null || x[j] >= x0) && (x1 === null || x[j] <= x1)) inRange.push(j);
    }
    if (inRange.length <= MAX_DRAWN) return inRange;
    return buckets(y, 0, inRange.length, inRange);
  }

  function buckets(y, a, b, map) {
    var nb = MAX_DRAWN >> 2;
    var size = (b - a) / nb;
    var out = [];
    for (var k = 0; k < nb; k++) {
      var s = a + Math.floor(k * size), e = a + Math.floor((k + 1) * size);
      if (e <= s) continue;
      var lo = s, hi = s;
      for (var i = s; i < e; i++) {
        var v = y[map ? map[i] : i];
        if (v < y[map ? map[lo] : lo] || !(y[map ? map[lo] : lo] === y[map ? map[lo] : lo])) lo = i;
        if (v > y[map ? map[hi] : hi] || !(y[map ? map[hi] : hi] === y[map ? map[hi] : hi])) hi = i;
      }
      var set = [s, lo, hi, e - 1].sort(function (p, q) { return p - q; });
      for (var t = 0; t < 4; t++) if (t === 0 || set[t] !== set[t - 1]) out.push(map ? map[set[t]] : set[t]);
    }
    return out;
  }

  // TensorBoard's smoothing: an exponential moving average, debiased at the start.
  function smooth(values, weight) {
    var out = new Float64Array(values.length);
    var last = 0, count = 0;
    for (var i = 0; i < values.length; i++) {
      var v = values[i];
      if (!isFinite(v)) { out[i] = v; continue; }
      last = last * weight + (1 - weight) * v;
      count++;
      out[i] = weight === 1 ? last : last / (1 - Math.pow(weight, count));
    }
    return out;
  }

  // ------------------------------------------------------------------ scalar charts

  function scalarX(s, cols, wallEntry) {
    var key = state.xaxis;
    if (s.x && s.x[key]) return s.x[key];
    var x;
    if (key === 'step') x = cols.step;
    else {
      var wall = columns(wallEntry).wall;
      x = new Float64Array(wall.length);
      var w0 = wall.length ? wall[0] : 0;
      for (var i = 0; i < x.length; i++) x[i] = key === 'wall' ? wall[i] * 1000 : (wall[i] - w0) / 3600;
    }
    s.x = s.x || {};
    s.sorted = s.sorted || {};
    s.x[key] = x;
    s.sorted[key] = isSorted(x);
    return x;
  }

  function scalarCard(group) {
    var card = el('div', { 'class': 'card', 'data-kind': 'scalars', 'data-tag': group.tag });
    card.appendChild(el('h3', null, group.tag));
    var chart = el('div', { 'class': 'chart' });
    card.appendChild(chart);
    var dl = el('div', { 'class': 'downloads' }, 'CSV: ');
    group.series.forEach(function (s) {
      var a = el('a', { href: s.csv, download: '' }, manifest.runs[s.run].name);
      a.dataset.run = s.run;
      dl.appendChild(a);
    });
    card.appendChild(dl);
    var range = null;   // the zoomed x range, or null for all

    function draw() {
      var series = shownRuns(group.series);
      var needWall = state.xaxis !== 'step';
      return Promise.all(series.map(function (s) {
        return load(s.key).then(function (entry) {
          return needWall ? load(entry.meta.wall).then(function (w) { return [entry, w]; }) : [entry, null];
        });
      })).then(function (entries) {
        var traces = [];
        var total = 0, drawn = 0;
        entries.forEach(function (pair, k) {
          var s = series[k];
          var entry = pair[0];
          var cols = columns(entry);
          total += cols.value.length;
          var x = scalarX(entry, cols, pair[1]);
          var idx = pick(x, cols.value, entry.sorted[state.xaxis], range ? range[0] : null, range ? range[1] : null);
          drawn += idx.length;
          var name = plotlyText(manifest.runs[s.run].name);
          var color = runColor(s.run);
          var xs = new Array(idx.length), ys = new Array(idx.length);
          for (var i = 0; i < idx.length; i++) { xs[i] = x[idx[i]]; ys[i] = cols.value[idx[i]]; }
          // Lone points would vanish in a line-only chart: mark sparse series.
          var mode = idx.length < 30 ? 'lines+markers' : 'lines';
          var raw = { type: 'scatter', mode: mode, x: xs, y: ys, name: name, marker: { size: 6 },
            line: { color: color, width: 1.5 }, opacity: state.smoothing > 0 ? 0.3 : 1 };
          if (state.smoothing > 0) {
            if (entry.smoothedWith !== state.smoothing) {
              entry.smoothed = smooth(cols.value, state.smoothing);
              entry.smoothedWith = state.smoothing;
            }
            var ss = new Array(idx.length);
            for (var j = 0; j < idx.length; j++) ss[j] = entry.smoothed[idx[j]];
            raw.hoverinfo = 'skip';
            traces.push(raw);
            traces.push({ type: 'scatter', mode: mode, x: xs, y: ss, name: name, marker: { size: 6 },
              customdata: ys, line: { color: color, width: 1.5 },
              hovertemplate: 'smoothed %{y:.6g}<br>value %{customdata:.6g}<br>' + xLabel() + ' %{x}' });
          } else {
            raw.hovertemplate = 'value %{y:.6g}<br>' + xLabel() + ' %{x}';
            traces.push(raw);
          }
        });
        card.dataset.points = total;
        card.dataset.drawn = drawn;
        var yRange = flatRange(traces);
        var layout = {
          margin: { l: 50, r: 10, t: 10, b: 40 }, showlegend: false, hovermode: 'closest',
          xaxis: { title: { text: xLabel() }, type: state.xaxis === 'wall' ? 'date' : 'linear' },
          yaxis: { type: state.log ? 'log' : 'linear', exponentformat: 'e', range: state.log ? undefined : yRange },
          uirevision: state.xaxis + state.log
        };
        if (range) { layout.xaxis.range = state.xaxis === 'wall' ? [new Date(range[0]), new Date(range[1])] : range; layout.xaxis.autorange = false; }
        return withPlotly().then(function () {
          return Plotly.react(chart, traces, layout, { displaylogo: false, responsive: true });
        });
      }).then(function () {
        if (!chart.dataset.listening) {
          chart.dataset.listening = '1';
          chart.on('plotly_relayout', function (ev) {
            if (ev['xaxis.autorange'] || ev['xaxis.range'] === undefined && ev['xaxis.range[0]'] === undefined) {
              if (ev['xaxis.autorange'] && range) { range = null; draw(); }
              return;
            }
            var ax = chart._fullLayout.xaxis;
            var r = ax.range.map(ax.r2l);
            range = [Math.min(r[0], r[1]), Math.max(r[0], r[1])];
            draw();
          });
        }
        card.dataset.state = 'drawn';
        if (window.tbView.firstChartMs === null) window.tbView.firstChartMs = performance.now();
      });
    }
    return { card: card, draw: draw, kind: 'scalars', resetRange: function () { range = null; } };
  }

  // A chart whose values are all equal (one point, a constant) gets a range around the
  // value: Plotly's own would be so narrow that its ticks print as long digit strings.
  function flatRange(traces) {
    var lo = Infinity, hi = -Infinity;
    traces.forEach(function (t) {
      for (var i = 0; i < t.y.length; i++) {
        var v = t.y[i];
        if (isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
      }
    });
    if (!(lo <= hi) || hi - lo > 1e-9 * Math.max(1, Math.abs(hi))) return undefined;
    var pad = Math.abs(lo) > 0 ? Math.abs(lo) * 0.1 : 1;
    return [lo - pad, hi + pad];
  }

  function xLabel() {
    return state.xaxis === 'step' ? 'step' : state.xaxis === 'relative' ? 'relative (hours)' : 'wall time';
  }

  // ------------------------------------------------------------------ histograms

  function histPoints(cols, i) {
    var a = cols.offsets[i], b = cols.offsets[i + 1];
    return cols.buckets.subarray(a * 3, b * 3);
  }

  function evenly(n, most) {
    if (n <= most) { var all = []; for (var i = 0; i < n; i++) all.push(i); return all; }
    var out = [];
    for (var k = 0; k < most; k++) out.push(Math.round(k * (n - 1) / (most - 1)));
    return out;
  }

  function histogramCard(group, s, mode) {
    var run = manifest.runs[s.run];
    var card = el('div', { 'class': 'card', 'data-kind': mode, 'data-tag': group.tag, 'data-run': s.run });
    card.appendChild(el('h3', null, group.tag));
    card.appendChild(el('div', { 'class': 'sub' }, run.name));
    var chart = el('div', { 'class': 'chart' });
    card.appendChild(chart);
    var dl = el('div', { 'class': 'downloads' });
    dl.appendChild(el('a', { href: s.csv, download: '' }, 'CSV'));
    card.appendChild(dl);

    function draw() {
      return load(s.key).then(function (entry) {
        var cols = columns(entry);
        var n = cols.step.length;
        card.dataset.points = n;
        var traces = mode === 'histograms' ? histogramTraces(cols, n, runColor(s.run)) : distributionTraces(cols, n, runColor(s.run));
        var layout = { margin: { l: 50, r: 10, t: 10, b: 40 }, showlegend: false, hovermode: 'closest',
          xaxis: { title: { text: mode === 'histograms' ? 'value' : 'step' } },
          yaxis: { title: { text: mode === 'histograms' ? 'count' : 'value' } } };
        return withPlotly().then(function () {
          return Plotly.react(chart, traces, layout, { displaylogo: false, responsive: true });
        });
      }).then(function () { card.dataset.state = 'drawn'; });
    }
    return { card: card, draw: draw, kind: mode };
  }

  function histogramTraces(cols, n, color) {
    var picks = evenly(n, 20);
    return picks.map(function (i, k) {
      var b = histPoints(cols, i);
      var xs = [], ys = [];
      for (var r = 0; r < b.length; r += 3) { xs.push((b[r] + b[r + 1]) / 2); ys.push(b[r + 2]); }
      return { type: 'scatter', mode: 'lines', x: xs, y: ys, line: { color: color, width: 1 },
        opacity: 0.25 + 0.75 * (picks.length > 1 ? k / (picks.length - 1) : 1),
        name: 'step ' + cols.step[i], hovertemplate: 'step ' + cols.step[i] + '<br>value %{x:.4g}<br>count %{y:.4g}<extra></extra>' };
    });
  }

  // TensorBoard's distribution bands: these percentiles (in basis points) of each step.
  var BPS = [0, 668, 1587, 3085, 5000, 6915, 8413, 9332, 10000];
  function percentiles(b) {
    var total = 0;
    for (var r = 2; r < b.length; r += 3) total += b[r];
    var out = [];
    if (!b.length || !(total > 0)) { for (var q = 0; q < BPS.length; q++) out.push(NaN); return out; }
    BPS.forEach(function (bp) {
      var target = total * bp / 10000, acc = 0;
      for (var r = 0; r < b.length; r += 3) {
        var c = b[r + 2];
        if (acc + c >= target && c > 0) {
          var f = (target - acc) / c;
          out.push(b[r] + f * (b[r + 1] - b[r]));
          return;
        }
        acc += c;
      }
      out.push(b[b.length - 2]);
    });
    return out;
  }

  function distributionTraces(cols, n, color) {
    var picks = evenly(n, 1000);
    var bands = BPS.map(function () { return []; });
    var xs = [];
    picks.forEach(function (i) {
      xs.push(cols.step[i]);
      var p = percentiles(histPoints(cols, i));
      for (var q = 0; q < BPS.length; q++) bands[q].push(p[q]);
    });
    return bands.map(function (ys, q) {
      var t = { type: 'scatter', mode: 'lines', x: xs, y: ys, line: { color: color, width: q === 4 ? 1.5 : 0.5 },
        name: (BPS[q] / 100) + '%', hovertemplate: (BPS[q] / 100) + '%: %{y:.4g}<br>step %{x}<extra></extra>' };
      if (q > 0) { t.fill = 'tonexty'; t.fillcolor = hexAlpha(color, 0.12 + 0.06 * (4 - Math.abs(4 - q))); }
      return t;
    });
  }

  function hexAlpha(hex, a) {
    var v = parseInt(hex.slice(1), 16);
    return 'rgba(' + (v >> 16) + ',' + ((v >> 8) & 255) + ',' + (v & 255) + ',' + a + ')';
  }

  // ------------------------------------------------------------------ images, audio, text

  function stepCard(kind, group, s) {
    var run = manifest.runs[s.run];
    var card = el('div', { 'class': 'card', 'data-kind': kind, 'data-tag': group.tag, 'data-run': s.run });
    card.appendChild(el('h3', null, group.tag));
    card.appendChild(el('div', { 'class': 'sub' }, run.name));
    var stepper = el('div', { 'class': 'stepper' });
    var slider = el('input', { type: 'range', min: '0', max: String(Math.max(0, s.n - 1)), step: '1', value: String(Math.max(0, s.n - 1)), 'aria-label': 'step' });
    var label = el('span', { 'class': 'step-label' });
    stepper.appendChild(slider);
    stepper.appendChild(label);
    card.appendChild(stepper);
    var body = el('div', { 'class': kind === 'text' ? 'text-view' : 'media' });
    card.appendChild(body);
    if (s.csv) {
      var dl = el('div', { 'class': 'downloads' });
      dl.appendChild(el('a', { href: s.csv, download: '' }, 'CSV'));
      card.appendChild(dl);
    }
    if (s.n <= 1) stepper.hidden = true;

    function show(data, i) {
      label.textContent = 'step ' + data.meta.steps[i] + ' · ' + formatWall(data.meta.wall[i]);
      body.textContent = '';
      if (kind === 'text') {
        // Rendered from Markdown and sanitised (nh3) when the site was written.
        body.innerHTML = data.meta.html[i];
        return;
      }
      data.meta.items[i].forEach(function (item) {
        if (kind === 'images') {
          var img = el('img', { alt: group.tag + ' at step ' + data.meta.steps[i] });
          if (item.w) img.width = Math.max(64, Math.min(item.w * 4, 512));
          img.src = item.src;
          body.appendChild(img);
        } else {
          var audio = el('audio', { controls: '', preload: 'metadata' });
          audio.src = item.src;
          body.appendChild(audio);
        }
      });
      if (!data.meta.items[i].length) body.appendChild(el('p', { 'class': 'note' }, 'nothing to show at this step'));
    }

    function draw() {
      return load(s.key).then(function (data) {
        card.dataset.points = data.meta.steps.length;
        slider.oninput = function () { show(data, Number(slider.value)); };
        show(data, Number(slider.value));
        card.dataset.state = 'drawn';
      });
    }
    return { card: card, draw: draw, kind: kind };
  }

  // ------------------------------------------------------------------ hparams

  function hparamsPanel(hp) {
    var wrap = el('div', { 'class': 'hparams-wrap' });
    var table = el('table', { 'class': 'hparams' });
    var thead = el('thead'), tbody = el('tbody');
    var tr = el('tr');
    var order = { col: -1, dir: 1 };
    hp.columns.forEach(function (name, c) {
      var th = el('th', { scope: 'col' }, name);
      th.addEventListener('click', function () {
        order.dir = order.col === c ? -order.dir : 1;
        order.col = c;
        Array.prototype.forEach.call(tr.children, function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', order.dir > 0 ? 'ascending' : 'descending');
        render();
      });
      tr.appendChild(th);
    });
    thead.appendChild(tr);
    table.appendChild(thead);
    table.appendChild(tbody);
    wrap.appendChild(table);

    function compare(a, b) {
      if (a === b) return 0;
      if (a === null || a === undefined) return 1;
      if (b === null || b === undefined) return -1;
      if (typeof a === 'number' && typeof b === 'number') return a < b ? -1 : 1;
      return String(a) < String(b) ? -1 : String(a) > String(b) ? 1 : 0;
    }

    function render() {
      var rows = hp.rows.slice();
      if (order.col >= 0) rows.sort(function (p, q) { var r = compare(p[order.col], q[order.col]); return r === 0 ? 0 : (p[order.col] === null || q[order.col] === null) ? r : r * order.dir; });
      tbody.textContent = '';
      rows.forEach(function (row) {
        var r = el('tr');
        row.forEach(function (v, c) {
          var text = v === null || v === undefined ? '' : (hp.columns[c].slice(-5) === '_time' && typeof v === 'number') ? formatWall(v) : String(v);
          r.appendChild(el('td', null, text));
        });
        if (row.length && !state.selected[runIndex(row[0])]) r.hidden = true;
        tbody.appendChild(r);
      });
    }
    return { card: wrap, draw: function () { render(); return Promise.resolve(); }, kind: 'hparams', always: true };
  }

  var runIndexByName = null;
  function runIndex(name) {
    if (!runIndexByName) {
      runIndexByName = {};
      manifest.runs.forEach(function (r, i) { runIndexByName[r.name] = i; });
    }
    return runIndexByName[name];
  }

  // ------------------------------------------------------------------ page

  var TABS = [
    ['scalars', 'Scalars'], ['histograms', 'Histograms'], ['distributions', 'Distributions'],
    ['images', 'Images'], ['audio', 'Audio'], ['text', 'Text'], ['hparams', 'HParams']];

  function groupsOf(kind) {
    return manifest[kind === 'distributions' ? 'histograms' : kind] || [];
  }

  function buildPanel(kind) {
    var panel = el('div', { 'class': 'panel', id: 'panel-' + kind });
    if (kind === 'hparams') {
      var hp = hparamsPanel(manifest.hparams);
      panel.appendChild(hp.card);
      charts.push(hp);
      return panel;
    }
    // Tags grouped by their first path component, as TensorBoard groups them; tags without
    // one share a section, so a handful of plain tags do not make a handful of sections.
    var sections = {};
    function gridFor(tag) {
      var name = tag.indexOf('/') >= 0 ? tag.slice(0, tag.indexOf('/')) : '(no group)';
      if (!sections[name]) {
        var details = el('details', { 'class': 'tag-group', open: '' });
        var summary = el('summary', null, name);
        details.appendChild(summary);
        var cards = el('div', { 'class': 'cards' });
        details.appendChild(cards);
        panel.appendChild(details);
        sections[name] = cards;
      }
      return sections[name];
    }
    groupsOf(kind).forEach(function (group) {
      if (kind === 'scalars') add(scalarCard(group), group, group.series);
      else group.series.forEach(function (s) {
        var c = (kind === 'histograms' || kind === 'distributions') ? histogramCard(group, s, kind) : stepCard(kind, group, s);
        add(c, group, [s]);
      });
    });
    function add(c, group, series) {
      c.tag = group.tag;
      c.runs = series.map(function (s) { return s.run; });
      c.card.dataset.kind = kind;
      gridFor(group.tag).appendChild(c.card);
      charts.push(c);
    }
    return panel;
  }

  function visibleCard(c) {
    if (c.always) return true;
    if (state.tagFilter && !state.tagFilter.test(c.tag)) return false;
    return c.runs.some(function (r) { return state.selected[r]; });
  }

  function refresh(kinds) {
    charts.forEach(function (c) {
      if (kinds && kinds.indexOf(c.kind) < 0) return;
      c.card.hidden = !visibleCard(c);
      c.dirty = true;
      if (c.onScreen || c.always) redraw(c);
    });
    updateSections();
  }

  function updateSections() {
    Array.prototype.forEach.call(document.querySelectorAll('details.tag-group'), function (d) {
      d.hidden = !d.querySelector('.card:not([hidden])');
    });
  }

  // Charts draw one after another, in page order: the first one on screen never waits
  // for the data of the others.
  var drawing = Promise.resolve();
  function redraw(c) {
    if (!c.dirty || c.card.hidden || c.kind !== state.tab) return;
    c.dirty = false;
    c.card.dataset.state = 'queued';
    drawing = drawing.then(function () {
      if (c.card.hidden || c.kind !== state.tab) { c.dirty = true; return null; }
      return c.draw();
    }).catch(function (err) {
      c.card.dataset.state = 'error';
      var p = c.card.querySelector('.error') || c.card.appendChild(el('p', { 'class': 'error' }));
      p.textContent = String(err && err.message || err);
    });
  }

  function showTab(kind) {
    state.tab = kind;
    Array.prototype.forEach.call(document.querySelectorAll('#tabs button'), function (b) {
      b.classList.toggle('active', b.dataset.tab === kind);
    });
    Array.prototype.forEach.call(document.querySelectorAll('.panel'), function (p) {
      p.hidden = p.id !== 'panel-' + kind;
    });
    document.getElementById('scalar-settings').hidden = kind !== 'scalars';
    charts.forEach(function (c) { if (c.kind === kind && (c.onScreen || c.always)) redraw(c); });
  }

  function buildRuns() {
    var list = document.getElementById('runs');
    manifest.runs.forEach(function (run, i) {
      state.selected[i] = true;
      var li = el('li');
      li.dataset.run = i;
      var box = el('input', { type: 'checkbox', id: 'run-' + i });
      box.checked = true;
      box.addEventListener('change', function () { state.selected[i] = box.checked; refresh(); });
      var sw = el('span', { 'class': 'swatch' });
      sw.style.background = runColor(i);
      var label = el('label', { 'for': 'run-' + i }, run.name);
      li.appendChild(box);
      li.appendChild(sw);
      li.appendChild(label);
      list.appendChild(li);
    });
    function setAll(on) {
      Array.prototype.forEach.call(list.children, function (li) {
        if (li.hidden) return;
        var i = Number(li.dataset.run);
        state.selected[i] = on;
        li.querySelector('input').checked = on;
      });
      refresh();
    }
    document.getElementById('runs-all').addEventListener('click', function () { setAll(true); });
    document.getElementById('runs-none').addEventListener('click', function () { setAll(false); });
    document.getElementById('run-filter').addEventListener('input', function (ev) {
      var re = regex(ev.target.value);
      Array.prototype.forEach.call(list.children, function (li) {
        var i = Number(li.dataset.run);
        var match = !re || re.test(manifest.runs[i].name);
        li.hidden = !match;
        state.selected[i] = match && li.querySelector('input').checked;
      });
      refresh();
    });
  }

  function buildSettings() {
    var sm = document.getElementById('smoothing');
    var out = document.getElementById('smoothing-value');
    sm.addEventListener('input', function () {
      state.smoothing = Number(sm.value);
      out.textContent = state.smoothing.toFixed(2);
      refresh(['scalars']);
    });
    Array.prototype.forEach.call(document.querySelectorAll('input[name=xaxis]'), function (r) {
      r.addEventListener('change', function () {
        state.xaxis = r.value;
        charts.forEach(function (c) { if (c.resetRange) c.resetRange(); });
        refresh(['scalars']);
      });
    });
    document.getElementById('log-scale').addEventListener('change', function (ev) {
      state.log = ev.target.checked;
      refresh(['scalars']);
    });
    document.getElementById('tag-filter').addEventListener('input', function (ev) {
      state.tagFilter = regex(ev.target.value);
      refresh();
    });
  }

  function start() {
    withPlotly();
    if (!manifest) {
      document.getElementById('empty').hidden = false;
      document.getElementById('empty').textContent = 'data/manifest.js did not load: keep the data folder next to index.html.';
      return;
    }
    var e = manifest.experiment || {};
    var title = e.name || 'TensorBoard experiment';
    document.title = title;
    document.getElementById('exp-name').textContent = title;
    document.getElementById('exp-desc').textContent = e.description || '';
    document.getElementById('download-all').setAttribute('href', manifest.parquet);
    buildRuns();
    buildSettings();
    var tabs = document.getElementById('tabs');
    var panels = document.getElementById('panels');
    var first = null;
    TABS.forEach(function (t) {
      var kind = t[0];
      var has = kind === 'hparams' ? !!manifest.hparams : groupsOf(kind).length > 0;
      if (!has) return;
      var b = el('button', { type: 'button' }, t[1]);
      b.dataset.tab = kind;
      b.addEventListener('click', function () { showTab(kind); });
      tabs.appendChild(b);
      panels.appendChild(buildPanel(kind));
      first = first || kind;
    });
    if (!first) { document.getElementById('empty').hidden = false; return; }
    observer = new IntersectionObserver(function (entries) {
      entries.forEach(function (en) {
        var c = en.target.__chart;
        c.onScreen = en.isIntersecting;
        if (c.onScreen) redraw(c);
      });
    }, { rootMargin: '300px' });
    charts.forEach(function (c) {
      c.dirty = true;
      c.card.hidden = !visibleCard(c);
      c.card.__chart = c;
      if (!c.always) observer.observe(c.card);
    });
    updateSections();
    showTab(first);
  }

  document.addEventListener('DOMContentLoaded', start);
})();
