/* The page: tabs, run list and filters, settings, and when each chart draws. */
(function (TB) {
  'use strict';
  var el = TB.el, runColor = TB.runColor, regex = TB.regex, state = TB.state, charts = TB.charts, load = TB.load, withPlotly = TB.withPlotly, scalarCard = TB.scalarCard, histogramCard = TB.histogramCard, stepCard = TB.stepCard, hparamsPanel = TB.hparamsPanel;

  var observer = null;

  var TABS = [
    ['scalars', 'Scalars'], ['histograms', 'Histograms'], ['distributions', 'Distributions'],
    ['images', 'Images'], ['audio', 'Audio'], ['text', 'Text'], ['hparams', 'HParams']];

  function groupsOf(kind) {
    return TB.manifest[kind === 'distributions' ? 'histograms' : kind] || [];
  }

  function buildPanel(kind) {
    var panel = el('div', { 'class': 'panel', id: 'panel-' + kind });
    if (kind === 'hparams') {
      var hp = hparamsPanel(TB.manifest.hparams);
      panel.appendChild(hp.card);
      charts.push(hp);
      return panel;
    }
    // Tags grouped by their first path component, as TensorBoard groups them; tags without
    // one share a section, so a handful of plain tags do not make a handful of sections.
    // A Map, not an object: the names come from the logs, and in an object '__proto__' or
    // 'constructor' would find Object.prototype's members instead of a section.
    var sections = new Map();
    function gridFor(tag) {
      var name = tag.indexOf('/') >= 0 ? tag.slice(0, tag.indexOf('/')) : '(no group)';
      if (!sections.has(name)) {
        var details = el('details', { 'class': 'tag-group', open: '' });
        var summary = el('summary', null, name);
        details.appendChild(summary);
        var cards = el('div', { 'class': 'cards' });
        details.appendChild(cards);
        panel.appendChild(details);
        sections.set(name, cards);
      }
      return sections.get(name);
    }
    groupsOf(kind).forEach(function (group) {
      if (kind === 'scalars') add(function () { return scalarCard(group); }, group, group.series);
      else group.series.forEach(function (s) {
        add(function () {
          return (kind === 'histograms' || kind === 'distributions') ? histogramCard(group, s, kind) : stepCard(kind, group, s);
        }, group, [s]);
      });
    });
    // A card that cannot be built says why in its place: the page and the other cards stay.
    function add(make, group, series) {
      var c;
      try {
        c = make();
        place(c, group, series);
      } catch (err) {
        c = brokenCard(kind, group, err);
        place(c, group, series);
      }
      charts.push(c);
    }
    function place(c, group, series) {
      c.tag = group.tag;
      c.runs = series.map(function (s) { return s.run; });
      c.card.dataset.kind = kind;
      gridFor(group.tag).appendChild(c.card);
    }
    return panel;
  }

  function brokenCard(kind, group, err) {
    var card = el('div', { 'class': 'card', 'data-kind': kind, 'data-tag': group.tag });
    card.appendChild(el('h3', null, group.tag));
    card.appendChild(el('p', { 'class': 'error' }, String(err && err.message || err)));
    return { card: card, kind: kind, draw: function () { card.dataset.state = 'error'; return Promise.resolve(); } };
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
      // A card scrolled past while it waited its turn is drawn when it is back on screen:
      // on a page of hundreds of charts, the ones in view never wait behind those gone by.
      if (c.card.hidden || c.kind !== state.tab || !(c.onScreen || c.always)) {
        c.dirty = true;
        c.card.dataset.state = 'waiting';
        return null;
      }
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
    TB.manifest.runs.forEach(function (run, i) {
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
        var match = !re || re.test(TB.manifest.runs[i].name);
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
    if (!TB.manifest) {
      document.getElementById('empty').hidden = false;
      document.getElementById('empty').textContent = 'data/manifest.js did not load: keep the data folder next to index.html.';
      return;
    }
    var e = TB.manifest.experiment || {};
    var title = e.name || 'TensorBoard experiment';
    document.title = title;
    document.getElementById('exp-name').textContent = title;
    document.getElementById('exp-desc').textContent = e.description || '';
    document.getElementById('download-all').setAttribute('href', TB.manifest.parquet);
    buildRuns();
    buildSettings();
    var tabs = document.getElementById('tabs');
    var panels = document.getElementById('panels');
    var first = null;
    TABS.forEach(function (t) {
      var kind = t[0];
      var has = kind === 'hparams' ? !!TB.manifest.hparams : groupsOf(kind).length > 0;
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
})(window.TB = window.TB || {});
