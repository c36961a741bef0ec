/* Histogram and distribution charts, one per tag and run. */
(function (TB) {
  'use strict';
  var el = TB.el, runColor = TB.runColor, load = TB.load, columns = TB.columns, withPlotly = TB.withPlotly;

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
    var run = TB.manifest.runs[s.run];
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

  TB.histogramCard = histogramCard;
})(window.TB = window.TB || {});
