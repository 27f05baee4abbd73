// The netgrad page: pick or upload a net, generate its gradient, see both drawn by Netron
// (served by this service under /netron/), read diagnostics and the grad map, verify.
'use strict';

const state = { net: null, examples: {}, netron: false, verify: {} };
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function setStatus(text) { $('status').textContent = text; }

// `body`: an object (sent as JSON) or, for a file's own bytes or text, an ArrayBuffer or a
// string (sent as it is, whatever its content type).
async function call(method, url, body, contentType = 'application/json') {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers['Content-Type'] = contentType;
    const raw = typeof body === 'string' || body instanceof ArrayBuffer;
    init.body = raw ? body : JSON.stringify(body);
  }
  const r = await fetch(url, init);
  const type = r.headers.get('content-type') || '';
  const doc = type.includes('json') ? await r.json() : await r.text();
  if (!r.ok) throw Object.assign(new Error('request failed'), { problem: doc, status: r.status });
  return doc;
}

function showError(err) {
  const box = $('error');
  box.replaceChildren();
  box.hidden = false;
  const p = err.problem;
  if (p && typeof p === 'object' && p.errors) {
    box.append(el('h2', {}, `${p.title} (${p.status})`), el('p', { id: 'error-detail' }, p.detail));
    const ul = el('ul');
    for (const e of p.errors) {
      const where = e.path && !e.message.startsWith(e.path) ? `${e.path}: ` : '';
      ul.append(el('li', {}, where + e.message));
    }
    box.append(ul);
  } else {
    box.append(el('h2', {}, 'Error'), el('p', {}, err.problem || err.message));
  }
  setStatus('');
}

function clearError() { $('error').hidden = true; }

function blobsOf(net) {
  const seen = [];
  for (const op of net.op || []) for (const o of op.output || []) if (!seen.includes(o)) seen.push(o);
  return seen;
}

function useNet(net, ys, verify) {
  state.net = net;
  state.verify = verify || {};
  const ops = (net.op || []).length;
  $('net-summary').textContent = `${net.name || 'net'}: ${ops} ops`;
  const select = $('ys');
  select.replaceChildren();
  for (const b of blobsOf(net)) {
    const opt = el('option', { value: b }, b);
    opt.selected = ys.includes(b);
    select.append(opt);
  }
  $('inputs').value = JSON.stringify((verify && verify.inputs) || [], null, 1);
  clearError();
}

async function parseFile(data, name) {
  const ext = name.split('.').pop().toLowerCase();
  const type = ext === 'json' ? 'application/json'
    : ['pbtxt', 'prototxt', 'txt'].includes(ext) ? 'text/x-protobuf' : 'application/protobuf';
  const parsed = await call('POST', '/ui/parse', data, type);
  useNet(parsed.net, parsed.default_ys, {});
}

function request() {
  const ys = Array.from($('ys').selectedOptions).map((o) => o.value);
  return { net: state.net, ys, skip: Number($('skip').value) || 0,
           recompute: $('recompute').checked };
}

function opText(op) {
  return `${op.type}(${(op.input || []).join(', ')}) -> ${(op.output || []).join(', ')}`;
}

function listOps(id, ops, prefix) {
  const ol = $(id);
  ol.replaceChildren();
  ops.forEach((op, i) => ol.append(el('li', { id: `${prefix}-${i}` }, opText(op))));
}

function showDiagnostics(diagnostics) {
  const ul = $('diagnostics');
  ul.replaceChildren();
  for (const d of diagnostics) {
    const li = el('li', { class: `sev-${d.severity}` }, `${d.severity}: ${d.code}: `);
    const top = d.op_index !== null && d.op_index !== undefined && !(d.path || '').includes('/');
    if (top) {
      const a = el('a', { href: `#fop-${d.op_index}` }, d.path || `op[${d.op_index}]`);
      a.addEventListener('click', () => {
        document.querySelectorAll('li.target').forEach((x) => x.classList.remove('target'));
        const target = $(`fop-${d.op_index}`);
        target.closest('details').open = true;
        target.classList.add('target');
      });
      li.append(a, ' ');
    } else if (d.path) {
      li.append(`${d.path} `);
    }
    li.append(d.message);
    ul.append(li);
  }
  if (!diagnostics.length) ul.append(el('li', {}, 'none'));
}

function showGradMap(map) {
  const body = $('grad-map').querySelector('tbody');
  body.replaceChildren();
  for (const [blob, g] of Object.entries(map)) {
    const text = g === null ? '(none)' : typeof g === 'string' ? g
      : `GradientSlice(indices=${g.indices}, values=${g.values})`;
    body.append(el('tr', {}, el('td', {}, blob), el('td', {}, text)));
  }
}

async function draw(net, frameId, countId) {
  const kept = await call('POST', '/ui/nets', net);
  $(countId).textContent = `(${kept.ops} ops)`;
  $(countId).dataset.ops = kept.ops;
  if (state.netron) {
    $(frameId).src = `/netron/index.html?url=${encodeURIComponent(kept.url)}`;
  }
}

async function generate() {
  const densify = $('densify').checked;
  if (!state.net) { showError({ message: 'choose an example, upload or paste a net first' }); return; }
  clearError();
  setStatus('generating...');
  try {
    const res = await call('POST', '/v1/gradients/net',
      { ...request(), return_net: true, densify });
    $('results').hidden = false;
    $('drawings').hidden = false;
    $('no-netron').hidden = state.netron;
    showDiagnostics(res.diagnostics);
    showGradMap(res.grad_map);
    listOps('forward-ops', state.net.op || [], 'fop');
    listOps('gradient-ops', res.grad_ops, 'gop');
    await draw(state.net, 'forward-view', 'forward-count');
    await draw(res.net, 'gradient-view', 'gradient-count');
    setStatus(`generated ${res.grad_ops.length} gradient ops`);
  } catch (err) {
    showError(err);
  }
}

async function verify() {
  if (!state.net) { showError({ message: 'choose an example, upload or paste a net first' }); return; }
  clearError();
  let inputs;
  try {
    inputs = JSON.parse($('inputs').value || '[]');
  } catch (e) {
    showError({ message: `Inputs are not valid JSON: ${e.message}` });
    return;
  }
  const extra = { ...state.verify };
  delete extra.inputs;
  setStatus('verifying...');
  try {
    const res = await call('POST', '/v1/verify',
      { ...request(), ...extra, inputs, mode: 'fast', densify: $('densify').checked });
    const report = res.report;
    $('verify-results').hidden = false;
    const verdict = $('verdict');
    verdict.textContent = report.passed ? 'passed' : 'failed';
    verdict.className = report.passed ? 'pass' : 'fail';
    const body = $('report').querySelector('tbody');
    body.replaceChildren();
    for (const b of report.blobs) {
      const mark = el('td', { class: b.passed ? 'pass' : 'fail' }, b.passed ? '\u2713' : '\u2717');
      body.append(el('tr', {}, mark, el('td', {}, b.blob), el('td', {}, b.max_abs_error),
        el('td', {}, b.max_rel_error), el('td', {}, b.gradient || '(none)'),
        el('td', {}, b.note || '')));
    }
    setStatus(`verified ${report.blobs.length} blobs`);
  } catch (err) {
    showError(err);
  }
}

async function init() {
  const data = await call('GET', '/ui/examples');
  state.examples = data.examples;
  state.netron = data.netron;
  for (const [name, ex] of Object.entries(data.examples)) {
    $('example').append(el('option', { value: name }, ex.title));
  }
  $('example').addEventListener('change', () => {
    const ex = state.examples[$('example').value];
    if (ex) useNet(ex.net, ex.ys, ex.verify);
  });
  $('file').addEventListener('change', async () => {
    const f = $('file').files[0];
    if (!f) return;
    try {
      await parseFile(await f.arrayBuffer(), f.name);
    } catch (err) { showError(err); }
  });
  $('load').addEventListener('click', async () => {
    const text = $('source').value.trim();
    try {
      await parseFile(text, text.startsWith('{') ? 'pasted.json' : 'pasted.pbtxt');
    } catch (err) { showError(err); }
  });
  $('generate').addEventListener('click', generate);
  $('verify').addEventListener('click', verify);
  document.body.dataset.ready = 'true';
}

init().catch(showError);
