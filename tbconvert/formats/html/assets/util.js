/* Helpers every part of the page shares: DOM building, run colours, filters, and the page's
   state. Every name, tag and value from the logs reaches the page through textContent (or is
   escaped for Plotly, which reads a little HTML in labels); the only HTML inserted is text
   rendered and sanitised when the site was written (media.js). */
(function (TB) {
  'use strict';

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  // Plotly reads a few HTML tags and entities in labels: escape them so names stay text.
  function plotlyText(s) {
    return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
      .replace(/"/g, '&#34;').replace(/'/g, '&#39;');
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

  // Logs can hold any double as a time, and the data files carry NaN and infinities as the
  // strings "nan", "inf", "-inf": a time a Date cannot hold (beyond about 275,000 years) is
  // shown as given, since toISOString would throw and take the whole card or table with it.
  function formatWall(t) {
    var d = typeof t === 'number' ? new Date(t * 1000) : null;
    if (!d || isNaN(d.getTime())) return String(t);
    return d.toISOString().replace('T', ' ').replace('Z', ' UTC');
  }

  var state = {
    selected: {},        // run index -> shown
    smoothing: 0.6,
    xaxis: 'step',
    log: false,
    tab: null,
    tagFilter: null
  };
  var charts = [];       // every chart card: {card, draw(), dirty, visible}
  window.tbView = { firstChartMs: null, charts: charts, state: state };

  function shownRuns(series) {
    return series.filter(function (s) { return state.selected[s.run]; });
  }

  // Every chart's options. The bundled Plotly offers by default to upload a chart (its data,
  // run names included) to Plotly's cloud, and to open it in their editor: a page made to be
  // passed around offline offers neither.
  function plotConfig() {
    return { displaylogo: false, responsive: true, showSendToCloud: false,
      showEditInChartStudio: false, showLink: false,
      modeBarButtonsToRemove: ['sendDataToCloud', 'editInChartStudio'] };
  }

  TB.plotConfig = plotConfig;
  TB.el = el;
  TB.plotlyText = plotlyText;
  TB.runColor = runColor;
  TB.regex = regex;
  TB.formatWall = formatWall;
  TB.state = state;
  TB.charts = charts;
  TB.shownRuns = shownRuns;
})(window.TB = window.TB || {});
