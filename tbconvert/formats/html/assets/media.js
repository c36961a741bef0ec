/* Images, audio and text: one card per tag and run, with a step slider. */
(function (TB) {
  'use strict';
  var el = TB.el, formatWall = TB.formatWall, load = TB.load;

  function stepCard(kind, group, s) {
    var run = TB.manifest.runs[s.run];
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

  TB.stepCard = stepCard;
})(window.TB = window.TB || {});
