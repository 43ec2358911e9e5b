// kubefold console: sign-in, the live fleet and the search. No dependency:
// every request is kubefold's own (the fleet page and stream, the admin
// estimator watch, the Kubernetes API), with the bearer token of this tab.
'use strict';

const TOKEN_KEY = 'kubefold.token';
const TABLE = 'application/json;as=Table;v=v1;g=meta.k8s.io,application/json';
const PAGE_ROWS = 50;
const MEMBERS_PER_PAGE = 100;
const $ = (id) => document.getElementById(id);

function esc(text) {
  return String(text ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) h.Authorization = 'Bearer ' + token;
  return h;
}

// A failed response as an Error carrying the Kubernetes Status message.
async function failure(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const status = await response.json();
    if (status.message) message = `${status.code} ${status.reason}: ${status.message}`;
  } catch (e) { /* not a Status */ }
  const error = new Error(message);
  error.code = response.status;
  return error;
}

async function request(path, options) {
  options = options || {};
  const response = await fetch(path, { method: options.method || 'GET', body: options.body, signal: options.signal, headers: headers(options.headers) });
  if (!response.ok) throw await failure(response);
  return response;
}

// Reads a stream of JSON lines (a watch) until it ends or `signal` aborts.
async function readLines(response, onLine) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffered += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 1);
      if (line.trim()) onLine(JSON.parse(line));
    }
  }
}

// Keeps a stream open: reopens it after it ends or fails, a second later.
function follow(open, onLine, onState) {
  const controller = new AbortController();
  (async () => {
    while (!controller.signal.aborted) {
      try {
        const response = await open(controller.signal);
        onState && onState('live');
        await readLines(response, onLine);
      } catch (e) {
        if (controller.signal.aborted) return;
        onState && onState(e.message);
        if (e.code === 401 || e.code === 403) return;
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  return controller;
}

function message(text) {
  const p = $('message');
  p.textContent = text || '';
  p.hidden = !text;
}

// ---- sign-in ----

async function whoAmI() {
  const body = JSON.stringify({ apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' });
  const response = await request('/apis/authentication.k8s.io/v1/selfsubjectreviews', { method: 'POST', body, headers: { 'Content-Type': 'application/json' } });
  const review = await response.json();
  return (review.status && review.status.userInfo && review.status.userInfo.username) || 'unknown';
}

async function boot(fromForm) {
  let user;
  try {
    user = await whoAmI();
  } catch (e) {
    $('view').innerHTML = '';
    $('login').hidden = false;
    if (e.code === 401) {
      const had = sessionStorage.getItem(TOKEN_KEY);
      sessionStorage.removeItem(TOKEN_KEY);
      $('login-error').textContent = had
        ? 'kubefold refused this token (401 Unauthorized): it is not in kubefold\'s token file. Check the token and sign in again.'
        : (fromForm ? 'Enter a token.' : 'Sign in with a bearer token to see the fleet and search it.');
    } else {
      $('login-error').textContent = 'kubefold did not answer the sign-in check: ' + e.message;
    }
    $('token').focus();
    return;
  }
  $('login').hidden = true;
  $('login-error').textContent = '';
  $('who').textContent = 'Signed in as ' + user;
  $('logout').hidden = !sessionStorage.getItem(TOKEN_KEY);
  if (location.pathname === '/ui/search') {
    $('nav-search').classList.add('current');
    search.start();
  } else {
    $('nav-fleet').classList.add('current');
    fleet.start();
  }
}

// ---- fleet ----

const fleet = {
  members: new Map(),
  estimators: new Map(),
  estimatorsPending: false,
  page: 0,
  filter: '',
  samples: [],

  async start() {
    let html;
    try {
      html = await (await request('/ui/fleet')).text();
    } catch (e) {
      message(e.code === 403
        ? 'The fleet is for kubefold:admins (or a rule granting nonResourceURLs /ui/fleet): ' + e.message + '. Search works with read access.'
        : 'The fleet could not be read: ' + e.message);
      return;
    }
    const page = new DOMParser().parseFromString(html, 'text/html');
    $('view').replaceChildren(document.importNode(page.getElementById('fleet'), true));
    $('member-pager').replaceChildren();
    const filter = $('member-filter');
    filter.hidden = false;
    filter.oninput = () => { this.filter = filter.value.trim().toLowerCase(); this.page = 0; this.renderMembers(); };
    const live = document.createElement('span');
    live.id = 'live';
    $('rate').querySelector('figcaption').append(' ', live);
    const state = (s) => { live.textContent = s === 'live' ? '● live' : '○ ' + s; };
    follow((signal) => request('/ui/fleet?watch=true', { signal }), (update) => this.apply(update), state);
    follow((signal) => request('/admin/v1/estimators?watch=true', { signal }), (event) => this.estimator(event));
  },

  apply(update) {
    if (update.type === 'SNAPSHOT') this.members.clear();
    for (const m of update.members) this.members.set(m.name, m);
    for (const name of update.removed) this.members.delete(name);
    const s = update.stats;
    const phases = { Synced: 0, Stale: 0, Connecting: 0 };
    for (const m of this.members.values()) phases[m.phase] = (phases[m.phase] || 0) + 1;
    const values = Object.assign({}, s, { synced: phases.Synced, stale: phases.Stale, connecting: phases.Connecting });
    for (const dd of document.querySelectorAll('#stats dd[data-stat]')) {
      const v = values[dd.dataset.stat];
      if (v !== undefined) dd.textContent = v;
    }
    this.rate(s.headResourceVersion);
    this.renderMembers();
    if (update.replicas) this.renderReplicas(update.replicas);
  },

  // Replicas over etcd (present only when kubefold runs on etcd).
  renderReplicas(replicas) {
    const body = document.querySelector('#replicas tbody');
    if (!body) return;
    body.innerHTML = replicas.items.map((r) => `<tr data-replica="${esc(r.id)}"><td>${esc(r.id)}</td><td>${esc(r.address)}</td>`
      + `<td class="num">${r.leaseRemainingSeconds} s</td><td class="num">${r.appliedRevision}</td><td class="num">${r.lagRevisions}</td>`
      + `<td class="owned">${esc(r.owned.join(', '))}</td></tr>`).join('');
    const error = $('replicas-error');
    if (error) error.textContent = replicas.error || '';
  },

  // Events per second from the head resourceVersion (one per event), last 60 samples.
  rate(head) {
    const now = performance.now();
    const last = this.samples[this.samples.length - 1];
    this.samples.push({ t: now, head, eps: last ? Math.max(0, (head - last.head) * 1000 / Math.max(1, now - last.t)) : 0 });
    if (this.samples.length > 61) this.samples.shift();
    const rates = this.samples.slice(1).map((x) => x.eps);
    if (!rates.length) return;
    $('eps').textContent = rates[rates.length - 1].toFixed(1);
    const max = Math.max(1, ...rates);
    const w = 300, h = 50;
    const points = rates.map((r, i) => `${(i * w / 60).toFixed(1)},${(h - r * (h - 4) / max - 2).toFixed(1)}`).join(' ');
    $('eps-chart').innerHTML = `<svg width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img" aria-label="events per second"><polyline fill="none" stroke="#2f6fde" stroke-width="1.5" points="${points}"/><text x="${w - 4}" y="11" text-anchor="end" font-size="10" fill="#5c6670">max ${max.toFixed(1)}/s</text></svg>`;
  },

  row(m) {
    const types = Object.entries(m.types).map(([t, n]) => `${esc(t)} ${n}`).join(' · ');
    return `<tr data-member="${esc(m.name)}" class="phase-${m.phase.toLowerCase()}"><td>${esc(m.name)}</td><td><span class="phase">${m.phase}</span></td>`
      + `<td class="num">${m.objects}</td><td class="types">${types}</td><td class="num">${m.lagSeconds} s</td><td class="num">${m.relists}</td>`
      + `<td class="num">${m.reconnects}</td><td class="num">${m.events}</td><td class="error">${esc(m.lastError || '')}</td></tr>`;
  },

  renderMembers() {
    const all = [...this.members.values()].filter((m) => !this.filter || m.name.includes(this.filter) || m.phase.toLowerCase() === this.filter);
    const pages = Math.max(1, Math.ceil(all.length / MEMBERS_PER_PAGE));
    this.page = Math.min(this.page, pages - 1);
    const shown = all.slice(this.page * MEMBERS_PER_PAGE, (this.page + 1) * MEMBERS_PER_PAGE);
    const html = shown.map((m) => this.row(m)).join('');
    // Unchanged rows are left as they are (a selection or a click survives an update).
    if (html !== this.shownHtml) {
      document.querySelector('#members tbody').innerHTML = html;
      this.shownHtml = html;
    }
    const pager = $('member-pager');
    if (!pager.querySelector('button')) {
      pager.innerHTML = '<span></span> <button type="button" data-step="-1">previous</button><button type="button" data-step="1">next</button>';
      for (const b of pager.querySelectorAll('button')) b.onclick = () => { this.page += Number(b.dataset.step); this.renderMembers(); };
    }
    pager.querySelector('span').textContent = `${all.length} members · page ${this.page + 1} of ${pages}`;
    pager.querySelector('[data-step="-1"]').disabled = this.page === 0;
    pager.querySelector('[data-step="1"]').disabled = this.page + 1 >= pages;
  },

  estimator(event) {
    if (event.type === 'ERROR') return;
    const e = event.object;
    if (event.type === 'DELETED') this.estimators.delete(e.cluster); else this.estimators.set(e.cluster, e);
    // One rendering for a burst of events: a fleet of 1,000 members sends
    // 1,000 at once, and rebuilding the whole table for each of them is
    // quadratic work on the page's only thread.
    if (!this.estimatorsPending) {
      this.estimatorsPending = true;
      setTimeout(() => { this.estimatorsPending = false; this.renderEstimators(); }, 100);
    }
  },

  renderEstimators() {
    const rows = [...this.estimators.values()].sort((a, b) => a.cluster.localeCompare(b.cluster)).map((e) => {
      const p = e.probe;
      const probe = !p ? 'not probed yet' : p.reachable ? `reachable${p.latencyMs != null ? ` (${p.latencyMs.toFixed(1)} ms)` : ''}` : `unreachable: ${p.error || ''}`;
      const cls = !p ? '' : p.reachable ? 'ok' : 'bad';
      return `<tr data-cluster="${esc(e.cluster)}"><td>${esc(e.cluster)}</td><td>${esc(e.rule)}</td><td>${esc((e.addresses || []).join(', '))}</td>`
        + `<td class="probe ${cls}">${esc(probe)}</td><td class="error">${esc(e.error || '')}</td></tr>`;
    });
    const body = document.querySelector('#estimators tbody');
    if (body) body.innerHTML = rows.join('');
  },
};

// ---- search ----

// JSON as YAML (block style, strings quoted where YAML would misread them).
function yaml(value, indent) {
  indent = indent || '';
  const scalar = (v) => {
    if (v === null) return 'null';
    if (typeof v !== 'string') return String(v);
    return v === '' || /^[\s\-?:,[\]{}#&*!|>'"%@`]|: |\s#|\s$|^(true|false|null|yes|no|on|off|~)$|^[-+.\d]/i.test(v) || v.includes('\n') ? JSON.stringify(v) : v;
  };
  const empty = (v) => (Array.isArray(v) ? v.length === 0 : v !== null && typeof v === 'object' && Object.keys(v).length === 0);
  if (Array.isArray(value)) {
    return value.map((item) => {
      if (item !== null && typeof item === 'object' && !empty(item)) {
        const inner = yaml(item, indent + '  ');
        return `${indent}- ${inner.slice(indent.length + 2)}`;
      }
      return `${indent}- ${empty(item) ? JSON.stringify(item) : scalar(item)}\n`;
    }).join('');
  }
  return Object.entries(value).map(([k, v]) => {
    if (v !== null && typeof v === 'object' && !empty(v)) return `${indent}${scalar(k)}:\n${yaml(v, indent + '  ')}`;
    return `${indent}${scalar(k)}: ${empty(v) ? JSON.stringify(v) : scalar(v)}\n`;
  }).join('');
}

const FIELDS = [
  ['type', 'Resource type', 'pods, deployments.apps, apps/v1/deployments'],
  ['namespaces', 'Namespaces', 'all; or default,kube-system'],
  ['labels', 'Label selector', 'app=web'],
  ['fields', 'Field selector', 'status.phase=Running'],
  ['name', 'Name contains', 'web'],
  ['clusters', 'Clusters', 'all; or member1,member2'],
];

const search = {
  types: new Map(),
  groups: null,
  watches: [],
  run: 0,

  start() {
    const params = new URLSearchParams(location.search);
    $('view').innerHTML = `<form class="search" id="search-form">${FIELDS.map(([k, label, hint]) =>
      `<label>${label}<input name="${k}" id="q-${k}" placeholder="${esc(hint)}" value="${esc(params.get(k) || (k === 'type' ? 'pods' : ''))}"></label>`).join('')}
      <button type="submit" id="search-submit">Search</button></form>
      <p id="search-status" role="status"></p><table id="results"><thead></thead><tbody></tbody></table>
      <nav class="pager" id="result-pager"></nav><section id="object" hidden></section>`;
    $('search-form').onsubmit = (ev) => {
      ev.preventDefault();
      const q = new URLSearchParams();
      for (const [k] of FIELDS) { const v = $('q-' + k).value.trim(); if (v) q.set(k, v); }
      history.pushState(null, '', '/ui/search?' + q);
      this.execute();
    };
    window.onpopstate = () => location.reload();
    this.fillTypes();
    if (params.get('type')) this.execute();
  },

  // Type names for the input, where the admin API may be read.
  async fillTypes() {
    try {
      const doc = await (await request('/admin/v1/resources')).json();
      const list = document.createElement('datalist');
      list.id = 'type-names';
      list.innerHTML = doc.items.map((r) => `<option value="${esc(r.apiVersion.includes('/') ? r.resource + '.' + r.apiVersion.split('/')[0] : r.resource)}">`).join('');
      document.body.append(list);
      $('q-type').setAttribute('list', 'type-names');
    } catch (e) { /* free text only */ }
  },

  // `pods`, `pod`, `po`, `deployments.apps`, `v1/pods`, `apps/v1/deployments` → where it is served.
  async resolve(text) {
    if (this.types.has(text)) return this.types.get(text);
    const parts = text.split('/');
    let group = null, version = null, name = text.toLowerCase();
    if (parts.length === 3) [group, version, name] = parts;
    else if (parts.length === 2) [group, version, name] = ['', parts[0], parts[1]];
    else if (text.includes('.')) { name = text.slice(0, text.indexOf('.')).toLowerCase(); group = text.slice(text.indexOf('.') + 1); }
    const bases = [];
    if (version) bases.push(group ? `/apis/${group}/${version}` : `/api/${version}`);
    else {
      if (!group) bases.push('/api/v1');
      this.groups = this.groups || (await (await request('/apis')).json()).groups || [];
      for (const g of this.groups) if (group === null || g.name === group) bases.push('/apis/' + g.preferredVersion.groupVersion);
    }
    for (const base of bases) {
      const doc = await (await request(base)).json();
      const r = (doc.resources || []).find((r) => !r.name.includes('/') && (r.name === name || r.singularName === name || r.kind.toLowerCase() === name || (r.shortNames || []).includes(name)));
      if (r) {
        const found = { base, plural: r.name, namespaced: r.namespaced, kind: r.kind };
        this.types.set(text, found);
        return found;
      }
    }
    throw new Error(`no resource type "${text}" is served`);
  },

  url(t, ns, params) {
    const path = t.namespaced && ns ? `${t.base}/namespaces/${encodeURIComponent(ns)}/${t.plural}` : `${t.base}/${t.plural}`;
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== '') q.set(k, v);
    return `${path}?${q}`;
  },

  async execute() {
    const run = ++this.run;
    for (const w of this.watches) w.abort();
    this.watches = [];
    $('object').hidden = true;
    const p = new URLSearchParams(location.search);
    const status = $('search-status');
    let t;
    try {
      t = await this.resolve(p.get('type') || 'pods');
    } catch (e) {
      status.textContent = e.message;
      return;
    }
    const labels = [p.get('labels')];
    const clusters = (p.get('clusters') || '').split(',').map((c) => c.trim()).filter(Boolean);
    if (clusters.length) labels.push(`kubefold.io/cluster in (${clusters.join(',')})`);
    const namespaces = (p.get('namespaces') || '').split(',').map((n) => n.trim()).filter(Boolean);
    this.query = {
      t,
      run,
      labelSelector: labels.filter(Boolean).join(','),
      fieldSelector: p.get('fields') || '',
      name: (p.get('name') || '').toLowerCase(),
      namespaces: t.namespaced && namespaces.length ? namespaces : [''],
    };
    // Where each page starts: [namespace index, continue token].
    this.pages = [[0, '']];
    this.pageNo = 0;
    this.columns = null;
    await this.load();
  },

  // One page: PAGE_ROWS rows (name filter applied), read with continue tokens.
  async load() {
    const q = this.query;
    const status = $('search-status');
    status.textContent = 'Searching…';
    let [nsIndex, token] = this.pages[this.pageNo];
    const rows = [];
    let reads = 0, scanned = 0;
    try {
      while (rows.length < PAGE_ROWS && nsIndex < q.namespaces.length && reads < 20) {
        const limit = q.name ? 500 : PAGE_ROWS - rows.length;
        const response = await request(this.url(q.t, q.namespaces[nsIndex], { labelSelector: q.labelSelector, fieldSelector: q.fieldSelector, limit, continue: token }), { headers: { Accept: TABLE } });
        const table = await response.json();
        if (q.run !== this.run) return;
        reads++;
        if (!this.columns) {
          this.columns = table.columnDefinitions.filter((c) => c.priority === 0);
          this.columnIndex = this.columns.map((c) => table.columnDefinitions.indexOf(c));
        }
        // kubefold's resourceVersion is one sequence for every namespace and
        // member: the first list's is where every watch of the search starts.
        if (!q.rv) q.rv = table.metadata.resourceVersion;
        for (const row of table.rows || []) {
          scanned++;
          if (!q.name || this.rowName(row).toLowerCase().includes(q.name)) rows.push(row);
        }
        token = table.metadata.continue || '';
        if (!token) { nsIndex++; }
      }
    } catch (e) {
      status.textContent = 'The search failed: ' + e.message;
      return;
    }
    this.pages[this.pageNo + 1] = [nsIndex, token];
    const more = nsIndex < q.namespaces.length;
    this.render(rows);
    status.textContent = `${rows.length} shown on page ${this.pageNo + 1}` + (q.name ? ` (${scanned} read, names containing "${q.name}")` : '') + (more ? '; more on the next page' : '');
    const pager = $('result-pager');
    pager.innerHTML = `<button type="button" id="prev-page" ${this.pageNo === 0 ? 'disabled' : ''}>previous</button><button type="button" id="next-page" ${more ? '' : 'disabled'}>next</button>`;
    $('prev-page').onclick = () => { this.pageNo--; this.load(); };
    $('next-page').onclick = () => { this.pageNo++; this.load(); };
    if (!this.watches.length) this.watch();
  },

  rowName(row) { return (row.object && row.object.metadata && row.object.metadata.name) || String(row.cells[0]); },
  rowKey(row) {
    const m = (row.object && row.object.metadata) || {};
    return `${m.namespace || ''}/${m.name || row.cells[0]}`;
  },

  rowHtml(row, fresh) {
    const m = (row.object && row.object.metadata) || {};
    const cells = this.columnIndex.map((i) => `<td>${esc(row.cells[i])}</td>`).join('');
    return `<tr data-key="${esc(this.rowKey(row))}" data-name="${esc(m.name || row.cells[0])}" data-namespace="${esc(m.namespace || '')}"${fresh ? ' class="fresh"' : ''}>`
      + (this.query.t.namespaced ? `<td>${esc(m.namespace || '')}</td>` : '') + cells + '</tr>';
  },

  render(rows) {
    if (!this.columns) return;
    $('results').querySelector('thead').innerHTML = '<tr>' + (this.query.t.namespaced ? '<th>NAMESPACE</th>' : '')
      + this.columns.map((c) => `<th title="${esc(c.description)}">${esc(c.name.toUpperCase())}</th>`).join('') + '</tr>';
    $('results').querySelector('tbody').innerHTML = rows.map((r) => this.rowHtml(r)).join('');
    this.bindRows();
  },

  bindRows() {
    for (const tr of $('results').querySelectorAll('tbody tr')) tr.onclick = () => this.open(tr.dataset.namespace, tr.dataset.name);
  },

  // Watches from the list's resourceVersion, with the same selectors: rows change in place, new ones appear.
  watch() {
    const q = this.query;
    if (!q.rv) return;
    q.namespaces.forEach((ns) => {
      let rv = q.rv;
      this.watches.push(follow(
        (signal) => request(this.url(q.t, ns, { watch: 'true', resourceVersion: rv, labelSelector: q.labelSelector, fieldSelector: q.fieldSelector, allowWatchBookmarks: 'true' }), { signal, headers: { Accept: TABLE } }),
        (event) => {
          if (q.run !== this.run) return;
          if (event.type === 'ERROR') { if (event.object && event.object.code === 410) this.execute(); return; }
          const table = event.object;
          if (table.metadata && table.metadata.resourceVersion) rv = table.metadata.resourceVersion;
          if (event.type === 'BOOKMARK' || !table.rows || !this.columns) return;
          for (const row of table.rows) this.change(event.type, row);
        },
      ));
    });
  },

  change(type, row) {
    const key = this.rowKey(row);
    const body = $('results').querySelector('tbody');
    const existing = [...body.querySelectorAll('tr')].find((tr) => tr.dataset.key === key);
    if (type === 'DELETED') {
      if (existing) existing.remove();
      $('search-status').textContent = $('search-status').textContent.replace(/^\d+ shown/, `${body.rows.length} shown`);
      return;
    }
    if (this.query.name && !this.rowName(row).toLowerCase().includes(this.query.name)) return;
    const holder = document.createElement('tbody');
    holder.innerHTML = this.rowHtml(row, type === 'ADDED' && !existing);
    const tr = holder.firstElementChild;
    if (existing) existing.replaceWith(tr);
    else if (type === 'ADDED' && this.pageNo === 0) body.prepend(tr);
    else return;
    tr.onclick = () => this.open(tr.dataset.namespace, tr.dataset.name);
    $('search-status').textContent = $('search-status').textContent.replace(/^\d+ shown/, `${body.rows.length} shown`);
  },

  // The object as YAML, and its events (those of its member, naming it).
  async open(namespace, name) {
    const t = this.query.t;
    const section = $('object');
    section.hidden = false;
    section.innerHTML = `<h2>${esc(t.kind)} ${esc(namespace ? namespace + '/' : '')}${esc(name)}</h2><p>Loading…</p>`;
    try {
      const path = t.namespaced ? `${t.base}/namespaces/${encodeURIComponent(namespace)}/${t.plural}/${encodeURIComponent(name)}` : `${t.base}/${t.plural}/${encodeURIComponent(name)}`;
      const object = await (await request(path)).json();
      const annotations = object.metadata.annotations || {};
      const cluster = annotations['kubefold.io/cluster'] || '';
      const original = cluster && name.endsWith('_' + cluster) ? name.slice(0, -cluster.length - 1) : name;
      const fields = [`involvedObject.name=${original}`, `involvedObject.kind=${object.kind || t.kind}`];
      const eventsPath = (namespace ? `/api/v1/namespaces/${encodeURIComponent(namespace)}/events` : '/api/v1/events') + '?' + new URLSearchParams({ fieldSelector: fields.join(','), labelSelector: cluster ? `kubefold.io/cluster=${cluster}` : '' });
      let events = '';
      try {
        const list = await (await request(eventsPath, { headers: { Accept: TABLE } })).json();
        const cols = list.columnDefinitions.filter((c) => c.priority === 0);
        const idx = cols.map((c) => list.columnDefinitions.indexOf(c));
        events = list.rows.length
          ? `<table id="object-events"><thead><tr>${cols.map((c) => `<th>${esc(c.name.toUpperCase())}</th>`).join('')}</tr></thead><tbody>${list.rows.map((r) => `<tr>${idx.map((i) => `<td>${esc(r.cells[i])}</td>`).join('')}</tr>`).join('')}</tbody></table>`
          : '<p>No events.</p>';
      } catch (e) {
        events = `<p>Events could not be read: ${esc(e.message)}</p>`;
      }
      section.innerHTML = `<h2>${esc(t.kind)} ${esc(namespace ? namespace + '/' : '')}${esc(name)} <small>in ${esc(cluster)}</small></h2>`
        + `<pre id="object-yaml">${esc(yaml(object))}</pre><h2>Events</h2>${events}`;
    } catch (e) {
      section.innerHTML = `<p>The object could not be read: ${esc(e.message)}</p>`;
    }
  },
};

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').onsubmit = (ev) => {
    ev.preventDefault();
    const token = $('token').value.trim();
    $('token').value = '';
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    boot(true);
  };
  $('logout').onclick = () => { sessionStorage.removeItem(TOKEN_KEY); location.reload(); };
  boot(false);
});
