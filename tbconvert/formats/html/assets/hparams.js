/* The hparams table: one row per trial, sortable by any column. */
(function (TB) {
  'use strict';
  var el = TB.el, formatWall = TB.formatWall, state = TB.state;

  function hparamsPanel(hp) {
    var wrap = el('div', { 'class': 'hparams-wrap' });
    var table = el('table', { 'class': 'hparams' });
    var thead = el('thead'), tbody = el('tbody');
    var tr = el('tr');
    var order = { col: -1, dir: 1 };
    var times = new Set(hp.times || []);     // the start and end times, shown as dates
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
          var text = v === null || v === undefined ? '' : (times.has(c) && typeof v === 'number') ? formatWall(v) : String(v);
          r.appendChild(el('td', null, text));
        });
        if (row.length && !state.selected[runIndex(row[0])]) r.hidden = true;
        tbody.appendChild(r);
      });
    }
    return { card: wrap, draw: function () { render(); return Promise.resolve(); }, kind: 'hparams', always: true };
  }

  // A Map: run names come from the logs, and an object would answer '__proto__' with
  // Object.prototype (and 'constructor' with a function) instead of the run's index.
  var runIndexByName = null;
  function runIndex(name) {
    if (!runIndexByName) {
      runIndexByName = new Map();
      TB.manifest.runs.forEach(function (r, i) { runIndexByName.set(r.name, i); });
    }
    return runIndexByName.get(name);
  }

  TB.hparamsPanel = hparamsPanel;
  TB.runIndex = runIndex;
})(window.TB = window.TB || {});
