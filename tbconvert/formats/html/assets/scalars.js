/* Scalar charts: all runs of a tag overlaid, smoothing, the three x axes, log scale, and
   downsampling for display only (zooming redraws the real points of the range). */
(function (TB) {
  'use strict';
  var el = TB.el, plotlyText = TB.plotlyText, runColor = TB.runColor, state = TB.state, shownRuns = TB.shownRuns, load = TB.load, columns = TB.columns, withPlotly = TB.withPlotly;

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
      var a = el('a', { href: s.csv, download: '' }, TB.manifest.runs[s.run].name);
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
        var total = 0, drawn = 0, odd = 0;
        entries.forEach(function (pair, k) {
          var s = series[k];
          var entry = pair[0];
          var cols = columns(entry);
          total += cols.value.length;
          if (entry.nonFinite === undefined) {
            entry.nonFinite = 0;
            for (var v = 0; v < cols.value.length; v++) {
              var y = cols.value[v];
              if (y !== y || y === Infinity || y === -Infinity) entry.nonFinite++;
            }
          }
          odd += entry.nonFinite;
          var x = scalarX(entry, cols, pair[1]);
          var idx = pick(x, cols.value, entry.sorted[state.xaxis], range ? range[0] : null, range ? range[1] : null);
          drawn += idx.length;
          var name = plotlyText(TB.manifest.runs[s.run].name);
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
        // A chart has no place for NaN or an infinity: say so in the card, not a gap alone.
        card.dataset.nonfinite = odd;
        var note = card.querySelector('.note');
        if (odd && !note) note = card.insertBefore(el('p', { 'class': 'note' }), dl);
        if (note) {
          note.hidden = !odd;
          note.textContent = odd ? odd + (odd === 1 ? ' value is' : ' values are') +
            ' NaN or infinite and not drawn (the CSV holds ' + (odd === 1 ? 'it' : 'them') + ')' : '';
        }
        var yRange = flatRange(traces);
        var layout = {
          margin: { l: 50, r: 10, t: 10, b: 40 }, showlegend: false, hovermode: 'closest',
          xaxis: { title: { text: xLabel() }, type: state.xaxis === 'wall' ? 'date' : 'linear' },
          yaxis: { type: state.log ? 'log' : 'linear', exponentformat: 'e', range: state.log ? undefined : yRange },
          uirevision: state.xaxis + state.log
        };
        if (range) { layout.xaxis.range = state.xaxis === 'wall' ? [new Date(range[0]), new Date(range[1])] : range; layout.xaxis.autorange = false; }
        return withPlotly().then(function () {
          return Plotly.react(chart, traces, layout, TB.plotConfig());
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

  TB.scalarCard = scalarCard;
})(window.TB = window.TB || {});
