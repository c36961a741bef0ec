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
          return Plotly.react(chart, traces, layout, TB.plotConfig());
        });
      }).then(function () { card.dataset.state = 'drawn'; });
    }
    return { card: card, draw: draw, kind: mode };
  }

  // As TensorBoard draws them: the buckets of every step shown are spread over BINS bins of
  // one width across the values of all of them, each bucket's count shared out by overlap
  // (a bucket of no width counts in the bin it falls in). Raw buckets, whose widths differ
  // by orders of magnitude (TensorFlow's and PyTorch's default edges), drew a comb.
  var BINS = 30;

  function finite(x) { return x === x && x !== Infinity && x !== -Infinity; }

  function rebinned(cols, picks) {
    var lo = Infinity, hi = -Infinity, k, r;
    for (k = 0; k < picks.length; k++) {
      var b = histPoints(cols, picks[k]);
      for (r = 0; r < b.length; r += 3) {
        if (!(b[r + 2] > 0)) continue;
        if (finite(b[r]) && b[r] < lo) lo = b[r];
        if (finite(b[r + 1]) && b[r + 1] > hi) hi = b[r + 1];
      }
    }
    if (!(lo <= hi)) return null;
    if (lo === hi) { lo -= 0.5; hi += 0.5; }     // one value (a constant tensor): a spike
    var width = (hi - lo) / BINS;
    return picks.map(function (i) {
      var b = histPoints(cols, i), counts = new Float64Array(BINS);
      for (var r = 0; r < b.length; r += 3) {
        var left = b[r], right = b[r + 1], c = b[r + 2];
        if (!(c > 0) || !finite(left) || !finite(right)) continue;
        if (!(right > left)) {
          counts[Math.min(BINS - 1, Math.max(0, Math.floor((left - lo) / width)))] += c;
          continue;
        }
        var first = Math.max(0, Math.floor((left - lo) / width));
        var last = Math.min(BINS - 1, Math.floor((right - lo) / width));
        for (var j = first; j <= last; j++) {
          var a = Math.max(left, lo + j * width), z = Math.min(right, lo + (j + 1) * width);
          if (z > a) counts[j] += c * (z - a) / (right - left);
        }
      }
      var xs = [], ys = [];
      for (var j = 0; j < BINS; j++) { xs.push(lo + (j + 0.5) * width); ys.push(counts[j]); }
      return { xs: xs, ys: ys };
    });
  }

  function histogramTraces(cols, n, color) {
    var picks = evenly(n, 20);
    var bins = rebinned(cols, picks);
    return picks.map(function (i, k) {
      var xs = bins ? bins[k].xs : [], ys = bins ? bins[k].ys : [];
      return { type: 'scatter', mode: 'lines', x: xs, y: ys, line: { color: color, width: 1 },
        opacity: 0.25 + 0.75 * (picks.length > 1 ? k / (picks.length - 1) : 1),
        name: 'step ' + cols.step[i], hovertemplate: 'step ' + cols.step[i] + '<br>value %{x:.4g}<br>count %{y:.4g}<extra></extra>' };
    });
  }

  // TensorBoard's distribution bands: these percentiles (in basis points) of each step,
  // TensorBoard's NORMAL_HISTOGRAM_BPS (the normal CDF at -inf, -1.5, -1, ..., 1.5, inf sigma).
  var BPS = [0, 668, 1587, 3085, 5000, 6915, 8413, 9332, 10000];

  // numpy's sum of float64 (pairwise, in blocks of 8 and of 128), which compress_histogram
  // divides by: a plain running sum can differ in the last bit, and at a percentile that
  // falls exactly on a bucket's cumulative weight that bit moves the band across a gap.
  function numpySum(b, lo, n) {
    var i, res;
    if (n < 8) {
      res = 0;
      for (i = 0; i < n; i++) res += b[(lo + i) * 3 + 2];
      return res;
    }
    if (n <= 128) {
      var r = [];
      for (i = 0; i < 8; i++) r.push(b[(lo + i) * 3 + 2]);
      for (i = 8; i < n - (n % 8); i += 8) {
        for (var j = 0; j < 8; j++) r[j] += b[(lo + i + j) * 3 + 2];
      }
      res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
      for (; i < n; i++) res += b[(lo + i) * 3 + 2];
      return res;
    }
    var half = Math.floor(n / 2);
    half -= half % 8;
    return numpySum(b, lo, half) + numpySum(b, lo + half, n - half);
  }

  // Python's max() and min() of two: the first unless the second is strictly beyond it
  // (so a NaN never wins over a number the way it does in Math.max).
  function pyMax(a, b) { return b > a ? b : a; }
  function pyMin(a, b) { return b < a ? b : a; }

  // TensorBoard's compress_histogram (tensorboard/plugins/distribution/compressor.py), step
  // for step and in the same float64 operations, so the bands are the ones TensorBoard
  // draws. b: [left, right, count] * buckets, flat.
  function compressHistogram(b) {
    var n = Math.floor(b.length / 3);
    var out = [];
    var k;
    if (!n) { for (k = 0; k < BPS.length; k++) out.push(0); return out; }
    var minmin = b[0], maxmax = b[(n - 1) * 3 + 1];
    var total = 0 + numpySum(b, 0, n);
    if (total === 0) total = 1;
    var weights = new Float64Array(n);
    var acc = 0;
    for (var i = 0; i < n; i++) {
      var w = b[i * 3 + 2] * 10000 / total;
      acc = i ? acc + w : w;
      weights[i] = acc;
    }
    var bp = 0;
    while (bp < BPS.length) {
      var x = BPS[bp];
      // numpy.searchsorted(weights, x, side='right'), NaN sorting last as in numpy.
      var lo = 0, hi = n;
      while (lo < hi) {
        var mid = lo + ((hi - lo) >> 1);
        var m = weights[mid];
        if (!(x < m || m !== m)) lo = mid + 1; else hi = mid;
      }
      var j = lo, found = false;
      while (j < n) {
        var cum = weights[j], prev = j > 0 ? weights[j - 1] : 0;
        if (cum === prev) { j++; continue; }
        // Python's `not prev`: true for zero only (a NaN is truthy there, unlike !NaN here).
        var lhs = (j === 0 || prev === 0) ? minmin : pyMax(b[(j - 1) * 3 + 1], minmin);
        var rhs = pyMin(b[j * 3 + 1], maxmax);
        out.push(lhs + (x - prev) * (rhs - lhs) / (cum - prev));
        found = true;
        break;
      }
      if (!found) break;
      bp++;
    }
    while (out.length < BPS.length) out.push(maxmax);
    return out;
  }

  function distributionTraces(cols, n, color) {
    var picks = evenly(n, 1000);
    var bands = BPS.map(function () { return []; });
    var xs = [];
    picks.forEach(function (i) {
      xs.push(cols.step[i]);
      var p = compressHistogram(histPoints(cols, i));
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
  TB.compressHistogram = compressHistogram;
})(window.TB = window.TB || {});
