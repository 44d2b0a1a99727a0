// quiver's web console: tables, SQL and live plots over the server's JSON API
// (docs/console.md). Plain JavaScript, no framework, no build step; every value
// from the server is put on the page as text (textContent), never as HTML.
'use strict';

const $ = (id) => document.getElementById(id);
const SVG = 'http://www.w3.org/2000/svg';
const HISTORY_KEY = 'quiver.history';
const HISTORY_MAX = 50;
const CHART_POINTS = 5000;
// The result table draws the rows in view and this many above and below.
const ROW_MARGIN = 40;
const DOWNLOADS = { csv: ['result.csv', 'CSV'], parquet: ['result.parquet', 'Parquet'], arrow: ['result.arrows', 'Arrow IPC'] };

const state = {
  token: sessionStorage.getItem('quiver.token'),
  csrf: sessionStorage.getItem('quiver.csrf'),
  auth: true,
  view: null,
  liveTimer: null,
  running: null, // id of the query running
  cancelling: false, // Cancel clicked for it
  result: null, // {id, schema, columns, offset, total_rows, truncated}
  grid: null, // the result table as drawn: {columns, offset, rows, numeric, first, last, rowPx}
  lastSql: '',
};

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
  }
}

async function api(method, path, body) {
  const headers = {};
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  if (method !== 'GET') {
    headers['Content-Type'] = 'application/json';
    if (state.csrf) headers['X-Quiver-CSRF'] = state.csrf;
  }
  const response = await fetch(path, {
    method, headers, cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) {
    let error = null;
    try { error = await response.json(); } catch (_) { /* not JSON */ }
    if (response.status === 401 && path !== '/api/login' && state.auth) {
      forget();
      showLogin('Your session ended: log in again.');
    }
    throw new ApiError(response.status, error);
  }
  return response;
}

const getJson = async (path) => (await api('GET', path)).json();
const postJson = async (path, body) => (await api('POST', path, body)).json();

// ---- formatting -------------------------------------------------------------

function bytes(n) {
  if (n === null || n === undefined || n < 0) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n >= 100 || i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
}
const count = (n) => (n === null || n === undefined || n < 0 ? '' : Number(n).toLocaleString('en-US'));
const ms = (n) => (n < 1000 ? `${Math.round(n)} ms` : `${(n / 1000).toFixed(2)} s`);
function nanos(n) {
  if (n === null || n === undefined) return '';
  if (n < 1e3) return `${n} ns`;
  if (n < 1e6) return `${(n / 1e3).toFixed(n < 1e4 ? 1 : 0)} µs`;
  if (n < 1e9) return `${(n / 1e6).toFixed(n < 1e7 ? 2 : 1)} ms`;
  return `${(n / 1e9).toFixed(2)} s`;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') node.className = v;
    else if (k.startsWith('data-')) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function cell(value, numeric) {
  if (value === null || value === undefined) return el('td', { class: 'null' }, 'null');
  return el('td', numeric ? { class: 'num' } : {}, String(value));
}

const NUMERIC = /^(Int|UInt|Float|Decimal)/;
const TEMPORAL = /^(Date|Timestamp|Time)/;
const isNumeric = (type) => NUMERIC.test(type);

// A table of columns (arrays of values) under their schema; nulls shown as such.
function renderColumns(table, schema, columns, rowOffset) {
  const head = el('tr', {}, el('th', { class: 'num' }, '#'));
  for (const field of schema) head.append(el('th', {}, field.name, el('small', {}, field.type)));
  const body = document.createElement('tbody');
  const rows = columns.length ? columns[0].length : 0;
  const numeric = schema.map((f) => isNumeric(f.type));
  const fragment = document.createDocumentFragment();
  for (let r = 0; r < rows; r += 1) {
    const tr = document.createElement('tr');
    tr.append(el('td', { class: 'num' }, rowOffset + r + 1));
    for (let c = 0; c < columns.length; c += 1) tr.append(cell(columns[c][r], numeric[c]));
    fragment.append(tr);
  }
  body.append(fragment);
  table.replaceChildren(el('thead', {}, head), body);
}

// The result table: however many rows the page holds, only those in view
// (and ROW_MARGIN above and below) are in the document, between two empty
// rows as tall as the rows left out; scrolling draws the rows it brings in
// view. Every row is one line high (a newline in a value shows as ↵), so a
// row's height is the same for all and measured once drawn.
function renderGrid(table, schema, columns, rowOffset) {
  const head = el('tr', {}, el('th', { class: 'num' }, '#'));
  for (const field of schema) head.append(el('th', {}, field.name, el('small', {}, field.type)));
  const rows = columns.length ? columns[0].length : 0;
  table.replaceChildren(el('thead', {}, head), document.createElement('tbody'));
  table.dataset.rows = String(rows);
  state.grid = {
    table, columns, offset: rowOffset, rows, numeric: schema.map((f) => isNumeric(f.type)),
    first: 0, last: 0, rowPx: state.grid ? state.grid.rowPx : 24,
  };
  $('result-table-box').scrollTop = 0;
  drawGrid(true);
}

function gridRow(grid, r) {
  const tr = document.createElement('tr');
  const number = document.createElement('td');
  number.className = 'num';
  number.textContent = String(grid.offset + r + 1);
  tr.append(number);
  for (let c = 0; c < grid.columns.length; c += 1) {
    const value = grid.columns[c][r];
    const td = document.createElement('td');
    if (value === null || value === undefined) {
      td.className = 'null';
      td.textContent = 'null';
    } else {
      const text = String(value);
      if (grid.numeric[c]) td.className = 'num';
      if (/[\r\n]/.test(text)) {
        td.textContent = text.replace(/\r\n|\r|\n/g, '↵');
        td.title = text;
      } else {
        td.textContent = text;
      }
    }
    tr.append(td);
  }
  return tr;
}

function gridPad(grid, rows) {
  const td = el('td', { colSpan: grid.columns.length + 1 });
  td.style.height = `${rows * grid.rowPx}px`;
  return el('tr', { class: 'pad' }, td);
}

// Draws the rows in view, unless they are drawn already (`force`: anyway).
function drawGrid(force) {
  const grid = state.grid;
  if (!grid) return;
  const box = $('result-table-box');
  const body = grid.table.tBodies[0];
  const headPx = grid.table.tHead ? grid.table.tHead.offsetHeight : 0;
  const height = box.clientHeight || window.innerHeight;
  const inView = Math.ceil(height / grid.rowPx) + 1;
  const top = Math.min(grid.rows, Math.floor(Math.max(0, box.scrollTop - headPx) / grid.rowPx));
  const bottom = Math.min(grid.rows, top + inView);
  if (!force && top >= grid.first && bottom <= grid.last) return;
  const first = Math.max(0, top - ROW_MARGIN);
  const last = Math.min(grid.rows, bottom + ROW_MARGIN);
  const drawn = [];
  for (let r = first; r < last; r += 1) drawn.push(gridRow(grid, r));
  const parts = [];
  if (first > 0) parts.push(gridPad(grid, first));
  parts.push(...drawn);
  if (last < grid.rows) parts.push(gridPad(grid, grid.rows - last));
  body.replaceChildren(...parts);
  grid.first = first;
  grid.last = last;
  // The height of a row as drawn; the empty rows are sized with it.
  if (drawn.length > 1) {
    const pitch = (drawn[drawn.length - 1].offsetTop - drawn[0].offsetTop) / (drawn.length - 1);
    if (pitch > 0 && Math.abs(pitch - grid.rowPx) > 0.01) {
      grid.rowPx = pitch;
      for (const pad of body.querySelectorAll('tr.pad')) pad.remove();
      if (first > 0) body.prepend(gridPad(grid, first));
      if (last < grid.rows) body.append(gridPad(grid, grid.rows - last));
    }
  }
}

// When the page has been painted with what was just put in it.
const painted = () => new Promise((resolve) => {
  requestAnimationFrame(() => setTimeout(() => resolve(performance.now()), 0));
});

let gridFrame = 0;
function gridScrolled() {
  if (gridFrame) return;
  gridFrame = requestAnimationFrame(() => { gridFrame = 0; drawGrid(false); });
}

// ---- views --------------------------------------------------------------------

function show(view) {
  state.view = view;
  for (const section of document.querySelectorAll('.view')) section.hidden = section.id !== `view-${view}`;
  for (const button of document.querySelectorAll('#nav button')) {
    button.classList.toggle('active', button.dataset.view === view);
  }
  if (view !== 'login') window.location.hash = view;
  if (state.liveTimer) { clearTimeout(state.liveTimer); state.liveTimer = null; }
  if (view === 'tables') loadTables();
  if (view === 'live') pollLive();
  if (view === 'sql') $('sql').focus();
}

function forget() {
  state.token = null;
  state.csrf = null;
  sessionStorage.removeItem('quiver.token');
  sessionStorage.removeItem('quiver.csrf');
}

function showLogin(message) {
  $('nav').hidden = true;
  $('logout').hidden = true;
  $('who').textContent = '';
  $('login-error').textContent = message || '';
  show('login');
  $('login-user').focus();
}

function loggedIn(session) {
  state.auth = session.auth;
  state.csrf = session.csrf;
  if (session.token) state.token = session.token;
  if (state.token) sessionStorage.setItem('quiver.token', state.token);
  sessionStorage.setItem('quiver.csrf', state.csrf);
  $('nav').hidden = false;
  $('logout').hidden = !session.auth;
  $('who').textContent = session.auth ? `${session.user} (${session.role})` : 'no authentication';
  const wanted = window.location.hash.slice(1);
  show(['live', 'tables', 'sql'].includes(wanted) ? wanted : 'tables');
}

async function start() {
  try {
    const session = await getJson('/api/session');
    if (!session.auth || session.user) loggedIn(session);
    else showLogin();
  } catch (error) {
    if (error.status !== 401) showLogin(error.message);
  }
}

async function login(event) {
  event.preventDefault();
  $('login-error').textContent = '';
  const token = $('login-token').value.trim();
  forget();
  try {
    let session;
    if (token) {
      state.token = token;
      session = await postJson('/api/login');
    } else {
      session = await postJson('/api/login', { user: $('login-user').value, password: $('login-password').value });
    }
    $('login-password').value = '';
    $('login-token').value = '';
    loggedIn(session);
  } catch (error) {
    forget();
    $('login-error').textContent = error.message;
  }
}

// ---- tables -------------------------------------------------------------------

async function loadTables() {
  $('tables-error').textContent = '';
  try {
    const { tables } = await getJson('/api/tables');
    const body = $('tables-list').tBodies[0];
    body.replaceChildren(...tables.map((t) => {
      const tr = el('tr', { 'data-name': t.name },
        el('td', {}, t.name), el('td', {}, t.kind),
        el('td', { class: 'num' }, count(t.rows)), el('td', { class: 'num' }, bytes(t.bytes)),
        el('td', { class: 'num' }, t.partitions ?? ''), el('td', { class: 'num' }, t.version ?? ''),
        el('td', { class: 'when', title: t.written_ms ? new Date(t.written_ms).toISOString() : '' }, written(t.written_ms)));
      tr.addEventListener('click', () => openTable(t.name, tr));
      return tr;
    }));
    if (!tables.length) body.append(el('tr', {}, el('td', { colSpan: 7, class: 'muted' }, 'No tables yet.')));
  } catch (error) {
    $('tables-error').textContent = error.message;
  }
}

/** A time of last write, as the time of day if today, else the date. */
function written(ms) {
  if (!ms) return '';
  const at = new Date(ms);
  return at.toDateString() === new Date().toDateString() ? at.toLocaleTimeString() : at.toLocaleDateString();
}

async function openTable(name, row) {
  const started = performance.now();
  for (const tr of document.querySelectorAll('#tables-list tr.selected')) tr.classList.remove('selected');
  if (row) row.classList.add('selected');
  const detail = $('table-detail');
  detail.removeAttribute('data-ms');
  $('tables-error').textContent = '';
  try {
    const t = await getJson(`/api/tables/${encodeURIComponent(name)}`);
    $('detail-name').textContent = t.name;
    const parts = [t.kind];
    if (t.rows !== undefined) parts.push(`${count(t.rows)} rows`, bytes(t.bytes), `${t.partitions} partition${t.partitions === 1 ? '' : 's'}`, `version ${t.version}`);
    if (t.written_ms) parts.push(`written ${written(t.written_ms)}`);
    $('detail-summary').textContent = parts.join(' · ');
    const stats = Array.isArray(t.statistics) ? t.statistics : [];
    const byColumn = new Map(stats.map((s) => [s.column, s]));
    $('detail-columns').tBodies[0].replaceChildren(...t.schema.map((f) => {
      const s = byColumn.get(f.name);
      return el('tr', {}, el('td', {}, f.name), el('td', {}, f.type), el('td', {}, f.nullable ? 'yes' : 'no'),
        s ? cell(s.min) : el('td', {}), s ? cell(s.max) : el('td', {}),
        s ? el('td', { class: 'num' }, count(s.nulls)) : el('td', {}));
    }));
    if (t.sample.error) {
      $('sample-table').replaceChildren();
      $('tables-error').textContent = `The rows cannot be read now: ${t.sample.error}`;
    } else {
      renderColumns($('sample-table'), t.schema, t.sample.columns, 0);
    }
    const placement = Array.isArray(t.placement) ? t.placement : null;
    $('detail-placement').hidden = !placement;
    if (placement) {
      $('placement-table').tBodies[0].replaceChildren(...placement.map((p) => el('tr', {},
        el('td', {}, p.name), el('td', { class: 'num' }, count(p.rows)), el('td', { class: 'num' }, bytes(p.bytes)),
        el('td', {}, ...p.copies.map((c) => el('span', { class: c.live ? 'copy' : 'copy gone', title: c.live ? 'live' : 'node not registered' }, c.node))))));
    }
    detail.hidden = false;
    const shown = performance.now() - started;
    $('sample-note').textContent = t.sample.error ? '' : `first ${t.sample.rows} rows · shown in ${ms(shown)} (server ${ms(t.ms)})`;
    detail.dataset.ms = shown.toFixed(1);
    $('detail-query').onclick = () => {
      $('sql').value = `SELECT * FROM "${name.replaceAll('"', '""')}" LIMIT 100`;
      show('sql');
    };
  } catch (error) {
    $('tables-error').textContent = error.message;
  }
}

// ---- SQL ----------------------------------------------------------------------

function history() {
  try { return JSON.parse(localStorage.getItem(HISTORY_KEY)) || []; } catch (_) { return []; }
}

function remember(sql) {
  const list = [sql, ...history().filter((s) => s !== sql)].slice(0, HISTORY_MAX);
  localStorage.setItem(HISTORY_KEY, JSON.stringify(list));
  fillHistory();
}

function fillHistory() {
  $('history').replaceChildren(el('option', { value: '' }, '—'),
    ...history().map((sql, i) => el('option', { value: String(i) }, sql.replace(/\s+/g, ' ').slice(0, 80))));
}

function setStatus(text, isError) {
  const status = $('status');
  status.textContent = text;
  status.className = isError ? 'error' : '';
}

function queryId() {
  const random = new Uint8Array(8);
  crypto.getRandomValues(random);
  return Array.from(random, (b) => b.toString(16).padStart(2, '0')).join('');
}

// EXPLAIN [ANALYZE] written in the editor: drawn as the buttons draw it.
const EXPLAIN = /^explain\s+(analyze\s+)?(?!analyze\b|verbose\b|format\b)/i;

async function run(kind) {
  let text = $('sql').value.trim();
  if (!text) { setStatus('Write a statement first.', true); return; }
  if (state.running) return;
  remember(text);
  const written = EXPLAIN.exec(text);
  if (written) {
    kind = kind || (written[1] ? 'analyze' : 'explain');
    text = text.slice(written[0].length);
  }
  state.lastSql = text;
  const id = queryId();
  state.running = id;
  $('cancel').disabled = false;
  $('run').disabled = true;
  $('result').hidden = true;
  const resultTable = $('result-table');
  resultTable.removeAttribute('data-ms');
  resultTable.removeAttribute('data-parse-ms');
  const started = performance.now();
  setStatus('Running…');
  // Once Cancel is clicked, the status says so until the query ends (the tick would
  // write over it, and a cancel answered after the query ended must not).
  const tick = setInterval(() => {
    setStatus(state.cancelling ? 'Cancelling…' : `Running… ${ms(performance.now() - started)}`);
  }, 250);
  try {
    if (kind) {
      const plan = await postJson('/api/explain', { sql: text, id, analyze: kind === 'analyze' });
      showPlan(plan);
      const operators = plan.plan ? countOperators(plan.plan) : 0;
      setStatus(`${operators ? `${operators} operators · ` : ''}${plan.analyze ? 'ran' : 'planned'} in ${ms(plan.ms)}`);
      return;
    }
    const limit = Number($('page-size').value);
    const reply = await api('POST', '/api/query', { sql: text, id, limit });
    const body = await reply.text();
    const arrived = performance.now();
    const response = JSON.parse(body);
    const received = performance.now();
    // The time JSON costs the page: the format is a measured choice (docs/console.md).
    resultTable.dataset.parseMs = (received - arrived).toFixed(1);
    if (response.kind === 'changed') {
      setStatus(`Done: ${count(response.changed)} rows changed in ${ms(response.ms)}.`);
      return;
    }
    state.result = response;
    showResult(response);
    const shown = (await painted()) - received;
    resultTable.dataset.ms = shown.toFixed(1);
    resultTable.dataset.totalMs = (performance.now() - started).toFixed(1);
    setStatus(`${count(response.total_rows)} rows${response.truncated ? ' (cut: more were left out)' : ''} · ran in ${ms(response.ms)} · shown in ${ms(shown)}`);
  } catch (error) {
    setStatus(error.code === 'Cancelled' ? 'Cancelled.' : error.message, true);
  } finally {
    clearInterval(tick);
    state.running = null;
    state.cancelling = false;
    $('cancel').disabled = true;
    $('run').disabled = false;
  }
}

async function cancel() {
  const id = state.running;
  if (!id || state.cancelling) return;
  state.cancelling = true;
  setStatus('Cancelling…');
  try {
    await postJson(`/api/queries/${id}/cancel`);
  } catch (error) {
    // The query may have ended meanwhile: its own status stands then.
    if (state.running === id) setStatus(error.message, true);
  }
}

function showResult(result) {
  $('result').hidden = false;
  $('plan').hidden = true;
  $('result-rows').hidden = false;
  renderGrid($('result-table'), result.schema, result.columns, result.offset);
  const rows = result.columns.length ? result.columns[0].length : 0;
  $('page-note').textContent = rows
    ? `rows ${count(result.offset + 1)}–${count(result.offset + rows)} of ${count(result.total_rows)}`
    : 'no rows';
  $('prev').disabled = result.offset === 0;
  $('next').disabled = result.offset + rows >= result.total_rows;
  fillChartChoices(result.schema);
  if (!$('chart-box').hidden) drawChart();
}

const countOperators = (node) => 1 + node.children.reduce((n, child) => n + countOperators(child), 0);
const computeOf = (node) => (node.elapsed_compute_ns || 0) + node.children.reduce((n, child) => n + computeOf(child), 0);

// EXPLAIN [ANALYZE]: the operators as a tree, each with its rows and CPU time
// once run (a bar shows its share of the plan's time); the text below.
function showPlan(response) {
  $('result').hidden = false;
  $('result-rows').hidden = true;
  state.result = null;
  state.grid = null;
  const box = $('plan');
  box.hidden = false;
  const tree = response.plan
    ? el('ul', { class: 'plan-tree', id: 'plan-tree' }, planNode(response.plan, computeOf(response.plan), response.analyze))
    : el('p', { class: 'muted' }, 'This statement has no tree of operators to show: its plan as text is below.');
  const text = el('details', { open: !response.plan }, el('summary', {}, 'The plan as text'));
  for (const line of response.text) text.append(el('h4', {}, line.type), el('pre', { class: 'plan' }, line.plan));
  box.replaceChildren(el('h3', {}, response.analyze ? 'Plan, as it ran' : 'Plan (not run: Explain analyze runs it)'), tree, text);
}

function planNode(node, total, analyze) {
  const head = el('div', { class: 'op-head' }, el('b', {}, node.name));
  if (analyze) {
    head.append(el('span', { class: 'op-rows' }, node.output_rows === null ? '' : `${count(node.output_rows)} rows`),
      el('span', { class: 'op-time' }, nanos(node.elapsed_compute_ns)));
    const bar = el('span', { class: 'op-bar' });
    bar.style.width = `${total ? Math.round((100 * (node.elapsed_compute_ns || 0)) / total) : 0}%`;
    head.append(el('span', { class: 'op-share' }, bar));
  }
  head.append(el('small', {}, `${node.partitions} partition${node.partitions === 1 ? '' : 's'}`));
  const detail = node.detail.startsWith(`${node.name}: `) ? node.detail.slice(node.name.length + 2) : node.detail;
  const box = el('div', { class: 'op' }, head);
  if (detail && detail !== node.name) box.append(el('div', { class: 'op-detail' }, detail));
  const others = node.metrics.filter((m) => m.name !== 'output_rows' && m.name !== 'elapsed_compute');
  if (analyze && others.length) box.append(el('div', { class: 'op-metrics' }, others.map((m) => `${m.name}=${m.value}`).join(', ')));
  const item = el('li', { 'data-op': node.name, 'data-rows': node.output_rows === null ? '' : String(node.output_rows) }, box);
  if (node.children.length) item.append(el('ul', {}, ...node.children.map((child) => planNode(child, total, analyze))));
  return item;
}

async function page(direction) {
  const result = state.result;
  if (!result) return;
  const limit = Number($('page-size').value);
  const offset = Math.max(0, result.offset + direction * limit);
  try {
    state.result = await getJson(`/api/results/${result.id}?offset=${offset}&limit=${limit}`);
    showResult(state.result);
  } catch (error) {
    setStatus(error.message, true);
  }
}

async function download() {
  const sql = $('sql').value.trim();
  if (!sql) { setStatus('Write a query first.', true); return; }
  const format = $('download-format').value;
  const [file, name] = DOWNLOADS[format] || DOWNLOADS.csv;
  setStatus(`Downloading ${name}…`);
  try {
    const response = await api('POST', '/api/download', { sql, format });
    const blob = await response.blob();
    const url = URL.createObjectURL(blob);
    const a = el('a', { href: url, download: file });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    setStatus(`Downloaded ${bytes(blob.size)} of ${name}.`);
  } catch (error) {
    setStatus(error.message, true);
  }
}

// ---- charts -------------------------------------------------------------------

function showTab(chart) {
  $('chart-box').hidden = !chart;
  $('result-table-box').hidden = chart;
  $('show-chart').classList.toggle('active', chart);
  $('show-table').classList.toggle('active', !chart);
  if (chart) drawChart();
  else drawGrid(true);
}

// Chooses the chart from the result's types: a category and a number make
// bars, a time or ordered number and a number a line, two numbers a scatter.
function fillChartChoices(schema) {
  const options = (pick) => schema.map((f, i) => el('option', { value: String(i) }, `${f.name} (${f.type})`))
    .filter((_, i) => pick(schema[i]));
  const numbers = schema.map((f, i) => [f, i]).filter(([f]) => isNumeric(f.type));
  $('chart-x').replaceChildren(...options(() => true));
  $('chart-y').replaceChildren(...options((f) => isNumeric(f.type)));
  const x = schema.findIndex((f) => !isNumeric(f.type));
  let kind = 'scatter';
  let xi = numbers.length ? numbers[0][1] : 0;
  let yi = numbers.length > 1 ? numbers[1][1] : (numbers.length ? numbers[0][1] : -1);
  if (x >= 0 && numbers.length) {
    kind = TEMPORAL.test(schema[x].type) ? 'line' : 'bar';
    xi = x;
    yi = numbers[0][1];
  } else if (numbers.length === 1) {
    kind = 'bar';
  }
  $('chart-kind').value = kind;
  $('chart-x').value = String(xi);
  if (yi >= 0) $('chart-y').value = String(yi);
}

function svgNode(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function svgText(x, y, text, anchor) {
  const t = svgNode('text', { x, y, 'text-anchor': anchor || 'start' });
  t.textContent = text;
  return t;
}

const tickLabel = (v) => (Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-2 && v !== 0) ? v.toExponential(2) : String(Math.round(v * 100) / 100));

function drawChart() {
  const box = $('chart');
  const result = state.result;
  const note = $('chart-note');
  box.replaceChildren();
  if (!result || !result.columns.length) return;
  const xi = Number($('chart-x').value);
  const yi = Number($('chart-y').value);
  if (Number.isNaN(yi) || !$('chart-y').options.length) {
    note.textContent = 'No numeric column to plot.';
    return;
  }
  const kind = $('chart-kind').value;
  const xs = result.columns[xi];
  const ys = result.columns[yi];
  let points = [];
  for (let i = 0; i < ys.length; i += 1) {
    const y = Number(ys[i]);
    if (ys[i] !== null && Number.isFinite(y)) points.push([xs[i], y]);
  }
  const step = Math.max(1, Math.ceil(points.length / CHART_POINTS));
  if (step > 1) points = points.filter((_, i) => i % step === 0);
  note.textContent = `${points.length} points of the rows on this page${step > 1 ? ` (every ${step}th)` : ''}`;
  const numericX = kind !== 'bar' && isNumeric(result.schema[xi].type);
  const timeX = kind !== 'bar' && TEMPORAL.test(result.schema[xi].type);
  const xValue = (v, i) => (numericX ? Number(v) : timeX ? Date.parse(v) : i);
  const W = 760; const H = 320; const L = 64; const B = 40; const T = 10; const R = 10;
  const svg = svgNode('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', id: 'chart-svg', 'data-kind': kind });
  const ysOnly = points.map((p) => p[1]);
  const yMin = Math.min(0, ...ysOnly); const yMax = Math.max(...ysOnly, yMin + 1e-9);
  const xsNum = points.map((p, i) => xValue(p[0], i));
  const xMin = Math.min(...xsNum); const xMax = Math.max(...xsNum, xMin + 1e-9);
  const sx = (v) => L + ((v - xMin) / (xMax - xMin || 1)) * (W - L - R);
  const sy = (v) => H - B - ((v - yMin) / (yMax - yMin || 1)) * (H - B - T);
  svg.append(svgNode('line', { class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B }),
    svgNode('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }));
  for (let k = 0; k <= 4; k += 1) {
    const v = yMin + ((yMax - yMin) * k) / 4;
    svg.append(svgText(L - 6, sy(v) + 4, tickLabel(v), 'end'),
      svgNode('line', { class: 'axis', x1: L - 3, y1: sy(v), x2: L, y2: sy(v) }));
  }
  if (kind === 'bar') {
    const width = (W - L - R) / Math.max(points.length, 1);
    points.forEach(([x, y], i) => {
      const top = sy(Math.max(y, 0)); const bottom = sy(Math.min(y, 0));
      const bar = svgNode('rect', { class: 's0', x: L + i * width + width * 0.1, y: top, width: Math.max(width * 0.8, 0.5), height: Math.max(bottom - top, 0.5) });
      const title = svgNode('title'); title.textContent = `${x}: ${y}`; bar.append(title);
      svg.append(bar);
    });
    const every = Math.max(1, Math.ceil(points.length / 10));
    points.forEach(([x], i) => {
      if (i % every === 0) svg.append(svgText(L + (i + 0.5) * width, H - B + 14, String(x ?? 'null').slice(0, 14), 'middle'));
    });
  } else {
    if (kind === 'line') {
      const order = xsNum.map((x, i) => [x, points[i][1]]).sort((a, b) => a[0] - b[0]);
      const d = order.map(([x, y], i) => `${i ? 'L' : 'M'}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join('');
      svg.append(svgNode('path', { class: 'line s0', d }));
    } else {
      points.forEach((p, i) => svg.append(svgNode('circle', { class: 's0', cx: sx(xsNum[i]).toFixed(1), cy: sy(p[1]).toFixed(1), r: 2 })));
    }
    const label = (v) => (timeX ? new Date(v).toISOString().slice(0, 19).replace('T', ' ') : tickLabel(v));
    svg.append(svgText(L, H - B + 14, label(xMin)), svgText(W - R, H - B + 14, label(xMax), 'end'));
  }
  svg.append(svgText(W / 2, H - 6, `${result.schema[xi].name} → ${result.schema[yi].name}`, 'middle'));
  box.append(svg);
}

// ---- live ---------------------------------------------------------------------

// Rates per second between consecutive samples; a gap (no page was open)
// breaks the line.
function rates(samples, value) {
  const out = [];
  for (let i = 1; i < samples.length; i += 1) {
    const dt = (samples[i].t - samples[i - 1].t) / 1000;
    out.push(dt > 0 && dt < 5 ? [samples[i].t, Math.max(0, (value(samples[i]) - value(samples[i - 1])) / dt)] : [samples[i].t, null]);
  }
  return out;
}

function timeChart(title, series, format, limit) {
  const W = 460; const H = 170; const L = 64; const B = 22; const T = 8; const R = 8;
  const box = el('div', { class: 'chart' }, el('h3', {}, title));
  const svg = svgNode('svg', { viewBox: `0 0 ${W} ${H}`, width: '100%', height: H, role: 'img', 'data-title': title });
  const all = series.flatMap((s) => s.points.filter((p) => p[1] !== null));
  const now = Date.now();
  const t0 = now - 5 * 60 * 1000;
  let yMax = Math.max(1, ...all.map((p) => p[1]), limit || 0);
  yMax *= 1.05;
  const sx = (t) => L + ((t - t0) / (now - t0)) * (W - L - R);
  const sy = (v) => H - B - (v / yMax) * (H - B - T);
  svg.append(svgNode('line', { class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B }),
    svgNode('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }));
  for (const v of [0, yMax / 2, yMax]) svg.append(svgText(L - 4, sy(v) + 4, format(v), 'end'));
  svg.append(svgText(L, H - 6, '5 min ago'), svgText(W - R, H - 6, 'now', 'end'));
  if (limit) svg.append(svgNode('line', { class: 'limit', x1: L, y1: sy(limit), x2: W - R, y2: sy(limit) }));
  series.forEach((s, k) => {
    let d = ''; let pen = false;
    for (const [t, v] of s.points) {
      if (v === null || t < t0) { pen = false; continue; }
      d += `${pen ? 'L' : 'M'}${sx(t).toFixed(1)},${sy(v).toFixed(1)}`;
      pen = true;
    }
    svg.append(svgNode('path', { class: `line s${k % 5}`, d }));
  });
  const legend = el('div', { class: 'legend' }, ...series.map((s, k) => {
    const last = s.points.length ? s.points[s.points.length - 1][1] : null;
    return el('span', {}, el('i', { class: `s${k % 5}` }), `${s.name} ${last === null ? '' : format(last)}`);
  }));
  if (limit) legend.append(el('span', {}, el('i', { class: 'limit' }), `limit ${format(limit)}`));
  box.append(svg, legend);
  return box;
}

async function pollLive() {
  if (state.view !== 'live') return;
  if (!document.hidden) {
    try {
      const live = await getJson('/api/live');
      drawLive(live);
    } catch (error) {
      $('live-note').textContent = error.message;
    }
  }
  if (state.view === 'live') state.liveTimer = setTimeout(pollLive, 1000);
}

function drawLive(live) {
  const s = live.samples;
  const last = s[s.length - 1];
  $('live-note').textContent = `sampled every ${live.every_ms / 1000} s while this page is open${live.functions ? ` · function workers ${live.functions.alive}/${live.functions.configured}` : ''}`;
  const methods = new Map();
  for (const sample of s) for (const [m, n] of Object.entries(sample.rpcs)) methods.set(m, Math.max(methods.get(m) || 0, n));
  const top = [...methods.entries()].sort((a, b) => b[1] - a[1]).slice(0, 5).map(([m]) => m);
  const perSecond = (v) => `${tickLabel(v)}/s`;
  $('live-charts').replaceChildren(
    timeChart('Throughput (Arrow bytes)', [
      { name: 'in', points: rates(s, (x) => x.bytes_in) },
      { name: 'out', points: rates(s, (x) => x.bytes_out) },
    ], (v) => `${bytes(v)}/s`),
    timeChart('Requests per second, by RPC', top.map((m) => ({ name: m, points: rates(s, (x) => x.rpcs[m] || 0) })), perSecond),
    timeChart('Memory', [{ name: 'used', points: s.map((x) => [x.t, x.memory_used]) }], bytes, last ? last.memory_limit : 0),
    timeChart('Stored', [{ name: 'bytes', points: s.map((x) => [x.t, x.bytes]) }], bytes),
  );
  const body = $('live-queries').tBodies[0];
  body.replaceChildren(...live.queries.map((q) => {
    const stop = el('button', { type: 'button', class: 'small' }, 'Cancel');
    stop.addEventListener('click', async () => {
      try { await postJson(`/api/queries/${encodeURIComponent(q.id)}/cancel`); } catch (e) { $('live-note').textContent = e.message; }
    });
    return el('tr', { 'data-id': q.id }, el('td', {}, q.id), el('td', {}, q.user || '—'), el('td', {}, q.via), el('td', {}, ms(q.seconds * 1000)), el('td', {}, q.sql), el('td', {}, stop));
  }));
  if (!live.queries.length) body.append(el('tr', {}, el('td', { colSpan: 6, class: 'muted' }, 'None.')));
  const nodes = Array.isArray(live.nodes) ? live.nodes : null;
  $('live-cluster').hidden = !nodes;
  if (nodes) {
    const under = nodes.reduce((n, x) => n + x.under_replicated, 0);
    $('live-cluster-note').textContent = `${nodes.filter((x) => x.lease === 'held').length} of ${nodes.length} holding a lease · this page is served by ${nodes.find((x) => x.this)?.id ?? '?'}`;
    $('live-nodes').tBodies[0].replaceChildren(...nodes.map((x) => el('tr', { 'data-node': x.id, class: x.lease === 'held' ? '' : 'warn' },
      el('td', {}, x.this ? `${x.id} (this node)` : x.id), el('td', {}, x.location || '—'), el('td', {}, x.lease),
      el('td', { class: 'num' }, count(x.partitions)), el('td', { class: 'num' }, bytes(x.bytes)),
      el('td', { class: 'num' }, count(x.under_replicated)))));
    if (under) $('live-cluster-note').textContent += ' · some copies are missing: the nodes repair them';
  }
}

// ---- wiring -------------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').addEventListener('submit', login);
  $('logout').addEventListener('click', () => { forget(); showLogin('Logged out.'); });
  for (const button of document.querySelectorAll('#nav button')) button.addEventListener('click', () => show(button.dataset.view));
  $('tables-refresh').addEventListener('click', loadTables);
  $('run').addEventListener('click', () => run(''));
  $('explain').addEventListener('click', () => run('explain'));
  $('analyze').addEventListener('click', () => run('analyze'));
  $('result-table-box').addEventListener('scroll', gridScrolled, { passive: true });
  window.addEventListener('resize', gridScrolled);
  $('cancel').addEventListener('click', cancel);
  $('download').addEventListener('click', download);
  $('prev').addEventListener('click', () => page(-1));
  $('next').addEventListener('click', () => page(1));
  $('show-table').addEventListener('click', () => showTab(false));
  $('show-chart').addEventListener('click', () => showTab(true));
  for (const id of ['chart-kind', 'chart-x', 'chart-y']) $(id).addEventListener('change', drawChart);
  $('history').addEventListener('change', () => {
    const i = $('history').value;
    if (i !== '') $('sql').value = history()[Number(i)] || '';
    $('history').value = '';
  });
  $('sql').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) { event.preventDefault(); run(''); }
  });
  document.addEventListener('visibilitychange', () => { if (!document.hidden && state.view === 'live' && !state.liveTimer) pollLive(); });
  fillHistory();
  start();
});
