/* Data files: they arrive as <script> files (fetch of local files fails under file://),
   each calling tbData.add(key, meta, base64); columns decode into typed arrays once. */
(function (TB) {
  'use strict';

  var store = {};
  var waiting = {};

  window.tbData = {
    manifest: function (m) { TB.manifest = m; },
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

  TB.load = load;
  TB.columns = columns;
  TB.withPlotly = withPlotly;
})(window.TB = window.TB || {});
