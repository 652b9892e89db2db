// kvbudget serve: the page. Vanilla JavaScript, no build step, nothing fetched from elsewhere.
// Every figure comes from the JSON API (the CLI's own --json documents); the page only draws them.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const FIELDS = ["model", "gpu", "engine", "kv_dtype", "context", "sessions", "prefix", "tp", "weights"];
  const OPTIONAL = new Set(["sessions", "prefix", "weights"]);
  // an option named in an error message -> the field that sets it
  const OPTION_FIELD = {
    model: "model", gpu: "gpu", engine: "engine", "kv-dtype": "kv_dtype", "k-dtype": "kv_dtype",
    "v-dtype": "kv_dtype", context: "context", tokens: "context", sessions: "sessions", prefix: "prefix",
    tp: "tp", weights: "weights",
  };
  const MODEL_ERRORS = new Set(["SourceError", "ConfigError", "UnknownArchitectureError"]);
  const CAPS = [4096, 8192, 16384, 32768, 65536, 131072];
  const DEBOUNCE_MS = 250;
  const MAX_SEND = 64 * 1024 * 1024;
  const GIB = 2 ** 30;
  const state = { extra: [], generation: 0, timer: 0, controller: null, curve: null };

  // --- small helpers ---------------------------------------------------------------------------
  function node(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") el.textContent = v;
      else el.setAttribute(k, v);
    }
    for (const child of children) el.append(child);
    return el;
  }
  function shape(tag, attrs, text) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    if (text !== undefined) el.textContent = text;
    return el;
  }
  const int = (n) => Number(n).toLocaleString("en-US");
  const gib = (b) =>
    (b / GIB).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 }) + " GiB";
  function bytes(b) {
    if (b >= GIB / 4) return gib(b);
    if (b >= 1024 * 1024) return (b / 2 ** 20).toFixed(1) + " MiB";
    if (b >= 1024) return (b / 1024).toFixed(1) + " KiB";
    return int(b) + " B";
  }
  const tokens = (n) => (n % 1024 === 0 ? `${n / 1024}K` : int(n));
  function cell(tag, content, label) {
    const td = content instanceof Node ? node(tag, {}, content) : node(tag, { text: String(content) });
    if (label) td.dataset.label = label;
    return td;
  }
  // a table; on a phone the stylesheet lays each row out as a card, its cells labelled by data-label
  function fillTable(table, head, rows) {
    table.replaceChildren(
      node("thead", {}, node("tr", {}, ...head.map((h) => cell("th", h)))),
      node("tbody", {}, ...rows.map((r) => node("tr", {}, ...r.map((c, i) => cell("td", c, head[i]))))),
    );
  }

  // --- inputs ----------------------------------------------------------------------------------
  function params() {
    const out = {};
    for (const f of FIELDS) {
      const v = $(f).value.trim();
      if (v !== "" || !OPTIONAL.has(f)) out[f] = v;
    }
    return out;
  }
  const query = (p) => new URLSearchParams(Object.entries(p).filter(([, v]) => v !== "" && v !== undefined));
  function pick(p, names) {
    return Object.fromEntries(names.filter((n) => n in p).map((n) => [n, p[n]]));
  }

  async function call(command, p, signal) {
    const response = await fetch(`api/${command}?${query(p)}`, { signal });
    return { ok: response.ok, doc: await response.json() };
  }

  function schedule(delay = DEBOUNCE_MS) {
    document.body.dataset.state = "pending";
    clearTimeout(state.timer);
    state.timer = setTimeout(update, delay);
  }

  // --- errors next to the field ----------------------------------------------------------------
  function fieldFor(doc) {
    const { kind, message } = doc.error;
    const lead = message.match(/^--([a-z][a-z0-9-]*)/);
    if (lead && OPTION_FIELD[lead[1]]) return OPTION_FIELD[lead[1]];
    const named = [...message.matchAll(/--([a-z][a-z0-9-]*)/g)].map((m) => OPTION_FIELD[m[1]] || m[1]);
    if (named.length && named.every((f) => f === named[0]) && FIELDS.includes(named[0])) return named[0];
    if (MODEL_ERRORS.has(kind)) return "model";
    return null;
  }
  function clearErrors() {
    for (const f of FIELDS) {
      $(`${f}-error`).textContent = "";
      $(f).removeAttribute("aria-invalid");
    }
    $("general-error").textContent = "";
  }
  function showError(doc, field) {
    const where = field || fieldFor(doc);
    const line = `Error: ${doc.error.message}`;
    if (where) {
      $(`${where}-error`).textContent = line;
      $(where).setAttribute("aria-invalid", "true");
    } else {
      $("general-error").textContent = line;
    }
  }

  // --- rendering -------------------------------------------------------------------------------
  function renderHeadline(plan) {
    $("sessions-count").textContent = int(plan.sessions);
    const replicas = plan.replicas > 1 ? ` per replica; ${int(plan.total_sessions)} on ${plan.replicas} replicas` : "";
    $("sessions-label").textContent =
      `concurrent sessions at a ${tokens(plan.context)} cap on ${plan.gpu ? plan.gpu.id : "the GPU"}${replicas}`;
    $("statement").textContent = plan.statement;
    const extra = [];
    if (plan.sessions_requested) {
      const most = plan.max_context_for_sessions;
      extra.push(most > 0
        ? `${int(plan.sessions_requested)} sessions fit at a cap of up to ${int(most)} tokens`
        : `${int(plan.sessions_requested)} sessions do not fit at any cap on this deployment`);
    }
    if (plan.prefix) extra.push(`with the shared prefix: ${int(plan.prefix.sessions)} sessions (${plan.prefix.basis})`);
    $("extra-line").textContent = extra.join(" · ");
    $("warnings").replaceChildren(...plan.warnings.map((w) => node("li", { text: w })));
  }

  function renderLedger(plan) {
    const used = Math.min(plan.sessions * plan.per_session_bytes, plan.kv_pool_bytes);
    const parts = [
      ["weights", "weights", plan.weights_bytes],
      ["overhead", "runtime overhead", plan.overhead_bytes],
      ["kv", `KV of ${int(plan.sessions)} sessions at the cap`, used],
      ["free", "KV pool left over", Math.max(0, plan.kv_pool_bytes - used)],
      ["reserved", "not used by the engine", Math.max(0, plan.gpu_memory_bytes - plan.usable_bytes)],
    ];
    const total = Math.max(plan.gpu_memory_bytes, parts.reduce((s, p) => s + p[2], 0));
    const bar = $("ledger-bar");
    bar.replaceChildren();
    let x = 0;
    for (const [cls, label, b] of parts) {
      const w = (b / total) * 1000;
      const rect = shape("rect", { x, y: 0, width: Math.max(0, w), height: 36, class: `seg ${cls}` });
      rect.append(shape("title", {}, `${label}: ${bytes(b)}`));
      bar.append(rect);
      x += w;
    }
    $("ledger-legend").replaceChildren(...parts.map(([cls, label, b]) =>
      node("li", {}, node("span", { class: `swatch ${cls}` }), `${label} `,
        node("b", { text: bytes(b) }), ` (${((100 * b) / total).toFixed(1)}%)`)));
    $("ledger-gpu").textContent = `per GPU · ${plan.gpu ? plan.gpu.name : "given memory"}`;
    fillTable($("ledger-table"), ["line", "bytes", "size", "figure", "basis"], plan.ledger.map((l) =>
      [l.label, int(l.bytes), bytes(l.bytes), l.provenance, l.basis]));
  }

  function renderPerToken(cost, plan) {
    $("per-token").textContent = `${int(plan.kv_bytes_per_token)} B per token · ${bytes(plan.per_session_bytes)} per session`;
    if (!cost.ok) {
      fillTable($("groups"), ["per-token breakdown"], [[cost.doc.error.message]]);
      return;
    }
    const groups = cost.doc.groups;
    const most = Math.max(1, ...groups.map((g) => g.per_token_bytes + g.state_bytes));
    fillTable($("groups"), ["layers", "count", "B/token", "share", "arithmetic"], groups.map((g) => {
      const meter = shape("svg", { viewBox: "0 0 100 10", class: "meter", "aria-hidden": "true" });
      meter.append(shape("rect", { x: 0, y: 0, width: (100 * g.per_token_bytes) / most, height: 10, class: "seg kv" }));
      return [g.label, g.layers, int(g.per_token_bytes), meter, g.arithmetic];
    }));
  }

  // the rows of a compare, one per GPU and cap (the cap chosen may repeat one of CAPS)
  function distinct(rows) {
    const seen = new Set();
    return rows.filter((r) => {
      const key = `${r.gpu} ${r.context}`;
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    });
  }

  function renderCurve(compare, plan) {
    const svg = $("curve");
    svg.replaceChildren();
    if (!compare.ok) {
      $("curve-note").textContent = `Error: ${compare.doc.error.message}`;
      return;
    }
    const all = distinct(compare.doc.rows);
    const rows = all.filter((r) => r.refused === null);
    const gpus = [...new Set(compare.doc.rows.map((r) => r.gpu))];
    const order = [plan.gpu ? plan.gpu.id : gpus[0], ...state.extra];
    gpus.sort((a, b) => order.indexOf(a) - order.indexOf(b));
    // the drawing's width follows the element's, so its text stays at the stylesheet's size on a phone
    const W = Math.round(Math.min(720, Math.max(340, svg.getBoundingClientRect().width || 560)));
    const H = W < 480 ? 250 : 320, L = 52, R = 30, T = 16, B = 44;
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    state.curve = [compare, plan];
    const caps = [...new Set(compare.doc.rows.map((r) => r.context))].sort((a, b) => a - b);
    const lo = Math.log2(caps[0]), hi = Math.log2(caps[caps.length - 1]);
    const top = Math.max(1, ...rows.map((r) => r.sessions));
    const X = (c) => L + ((Math.log2(c) - lo) / Math.max(1e-9, hi - lo)) * (W - L - R);
    const Y = (s) => H - B - (s / top) * (H - T - B);
    svg.append(shape("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
    svg.append(shape("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
    for (const c of caps) {
      svg.append(shape("text", { x: X(c), y: H - B + 20, class: "tick", "text-anchor": "middle" }, tokens(c)));
    }
    for (const s of [0, Math.round(top / 2), top]) {
      svg.append(shape("text", { x: L - 8, y: Y(s) + 5, class: "tick", "text-anchor": "end" }, int(s)));
      svg.append(shape("line", { x1: L, y1: Y(s), x2: W - R, y2: Y(s), class: "grid" }));
    }
    svg.append(shape("text", { x: (L + W - R) / 2, y: H - 6, class: "tick", "text-anchor": "middle" }, "context cap (tokens)"));
    svg.append(shape("line", { x1: X(plan.context), y1: T, x2: X(plan.context), y2: H - B, class: "cap" }));
    // the chosen GPU drawn last, on top of a compared one with nearly the same curve
    [...gpus.entries()].reverse().forEach(([i, gpu]) => {
      const points = rows.filter((r) => r.gpu === gpu).sort((a, b) => a.context - b.context);
      const cls = `series s${i % 4}`;
      svg.append(shape("polyline", { points: points.map((r) => `${X(r.context)},${Y(r.sessions)}`).join(" "), class: cls }));
      for (const r of points) {
        const dot = shape("circle", { cx: X(r.context), cy: Y(r.sessions), r: 4, class: cls });
        dot.append(shape("title", {}, `${gpu} at ${tokens(r.context)}: ${int(r.sessions)} sessions`));
        svg.append(dot);
      }
      svg.append(shape("text", { x: W - R, y: T + 14 + 18 * i, class: `label s${i % 4}`, "text-anchor": "end" }, gpu));
    });
    const refused = all.length - rows.length;
    $("curve-note").textContent = `sessions at each cap (kvbudget compare); the dashed line is the cap chosen` +
      (refused ? `; ${refused} point(s) refused (the model does not fit or the engine refuses)` : "");
  }

  function renderCompare(compare, plan) {
    const section = $("compare-section");
    section.hidden = !compare.ok || state.extra.length === 0;
    if (section.hidden) return;
    const rows = distinct(compare.doc.rows).filter((r) => r.context === plan.context);
    $("compare-cap").textContent = `at ${tokens(plan.context)}, most sessions first`;
    fillTable($("compare"), ["GPU", "sessions", "per session", "KV pool", "weights per GPU"], rows.map((r) =>
      r.refused === null
        ? [`${r.gpu} x ${r.gpus}`, int(r.sessions), bytes(r.per_session_bytes), bytes(r.kv_pool_bytes), bytes(r.weights_bytes_per_gpu)]
        : [`${r.gpu} x ${r.gpus}`, "refused", r.refused, "", ""]));
  }

  function renderLevers(levers) {
    if (!levers.ok) {
      fillTable($("levers"), ["levers"], [[`Error: ${levers.doc.error.message}`]]);
      return;
    }
    fillTable($("levers"), ["lever", "change", "sessions", "gain", "memory"], levers.doc.levers.map((l) =>
      l.refused === null
        ? [l.lever, l.change, int(l.sessions), (l.delta > 0 ? "+" : "") + int(l.delta), l.memory_effect]
        : [l.lever, l.change, "refused", "", l.refused]));
  }

  function renderCommands(plan, engine) {
    const names = Object.keys(plan.commands);
    names.sort((a, b) => (a === engine ? -1 : b === engine ? 1 : 0));
    $("commands").replaceChildren(...names.map((name) => {
      const cmd = plan.commands[name];
      const code = node("code", { text: cmd.text });
      const box = node("div", { class: "command", "data-engine": name }, node("h3", { text: name }),
        node("pre", {}, code));
      if (cmd.argv !== null) {
        const button = node("button", { type: "button", class: "copy", text: "Copy" });
        button.addEventListener("click", () => copy(cmd.text, code, button));
        box.append(button);
      }
      return box;
    }));
  }

  async function copy(text, code, button) {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "Copied";
    } catch {
      const range = document.createRange();
      range.selectNodeContents(code);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      button.textContent = "Selected: Ctrl-C";
    }
    setTimeout(() => { button.textContent = "Copy"; }, 2000);
  }

  // --- one update: plan, cost, levers and compare for the inputs as they are --------------------
  async function update() {
    const generation = ++state.generation;
    if (state.controller) state.controller.abort();
    const controller = new AbortController();
    state.controller = controller;
    document.body.dataset.state = "busy";
    const p = params();
    const shared = ["model", "engine", "kv_dtype", "tp", "weights", "prefix"];
    const share = query({ ...p, compare: state.extra.join(",") });
    history.replaceState(null, "", `?${share}`);
    $("api-link").href = `api/plan?${query(p)}`;
    const caps = [...CAPS.map(String), p.context].join(",");
    let results;
    try {
      results = await Promise.all([
        call("plan", p, controller.signal),
        call("cost", { ...pick(p, ["model", "engine", "kv_dtype", "tp"]), tokens: p.context }, controller.signal),
        call("levers", p, controller.signal),
        call("compare", { ...pick(p, shared), gpu: [p.gpu, ...state.extra].join(","), context: caps }, controller.signal),
      ]);
    } catch (err) {
      if (err.name === "AbortError") return;
      if (generation !== state.generation) return;
      clearErrors();
      $("general-error").textContent = `Error: the server did not answer (${err.message})`;
      document.body.dataset.state = "error";
      return;
    }
    if (generation !== state.generation) return;
    const [plan, cost, levers, compare] = results;
    clearErrors();
    if (!plan.ok) {
      showError(plan.doc);
      $("results").classList.add("stale");
      document.body.dataset.state = "error";
      return;
    }
    $("results").classList.remove("stale");
    renderHeadline(plan.doc);
    renderLedger(plan.doc);
    renderPerToken(cost, plan.doc);
    renderCurve(compare, plan.doc);
    renderCompare(compare, plan.doc);
    renderLevers(levers);
    renderCommands(plan.doc, p.engine);
    document.body.dataset.state = "ready";
  }

  // --- GPUs to compare -------------------------------------------------------------------------
  function renderChips() {
    $("gpu-chips").replaceChildren(...state.extra.map((id) => {
      const button = node("button", { type: "button", class: "chip", "aria-label": `stop comparing ${id}`, text: `${id} ×` });
      button.addEventListener("click", () => {
        state.extra = state.extra.filter((g) => g !== id);
        renderChips();
        schedule(0);
      });
      return node("li", {}, button);
    }));
  }
  function addGpu(id) {
    if (id && id !== $("gpu").value && !state.extra.includes(id)) state.extra.push(id);
    renderChips();
  }

  // --- dropped files ---------------------------------------------------------------------------
  async function upload(file) {
    clearErrors();
    $("model-note").textContent = `reading ${file.name}…`;
    const magic = new Uint8Array(await file.slice(0, 4).arrayBuffer());
    const gguf = String.fromCharCode(...magic) === "GGUF";
    const body = gguf ? file.slice(0, Math.min(file.size, MAX_SEND)) : file;
    const q = new URLSearchParams({ name: file.name, size: String(file.size) });
    let response, doc;
    try {
      response = await fetch(`api/upload?${q}`, { method: "POST", body, headers: { "content-type": "application/octet-stream" } });
      doc = await response.json();
    } catch (err) {
      $("model-note").textContent = "";
      $("model-error").textContent = `Error: the upload failed (${err.message})`;
      return;
    }
    if (!response.ok) {
      $("model-note").textContent = "";
      showError(doc, "model");
      return;
    }
    const u = doc.upload;
    $("model-list").append(node("option", { value: u.id, label: `${u.model} (${file.name})` }));
    $("model").value = u.id;
    $("model-note").textContent = `${file.name}: ${u.model} (${u.model_type}), as ${u.id}` +
      (u.kind === "gguf" ? ` · header ${int(u.sent_bytes)} B of ${int(u.file_bytes)} B sent` : "");
    schedule(0);
  }

  function wireDrop() {
    const drop = $("drop");
    for (const type of ["dragenter", "dragover"]) {
      document.addEventListener(type, (e) => { e.preventDefault(); drop.classList.add("over"); });
    }
    document.addEventListener("dragleave", (e) => { if (e.target === document.documentElement) drop.classList.remove("over"); });
    document.addEventListener("drop", (e) => {
      e.preventDefault();
      drop.classList.remove("over");
      const file = e.dataTransfer && e.dataTransfer.files[0];
      if (file) upload(file);
    });
    $("file").addEventListener("change", () => { if ($("file").files[0]) upload($("file").files[0]); });
  }

  // --- start -----------------------------------------------------------------------------------
  async function start() {
    const [models, gpus] = await Promise.all([call("models", {}), call("gpus", {})]);
    const names = [];
    for (const m of models.doc.models) names.push(m.name, ...m.aliases.filter((a) => !a.includes("/")));
    $("model-list").replaceChildren(...names.map((n) => node("option", { value: n })));
    const options = gpus.doc.gpus.map((g) => [g.id, `${g.id} · ${g.name}`]);
    $("gpu").replaceChildren(...options.map(([id, label]) => node("option", { value: id, text: label })));
    $("gpu-add").append(...options.map(([id, label]) => node("option", { value: id, text: label })));
    $("gpu").value = "h100-sxm";
    const given = new URLSearchParams(location.search);
    for (const f of FIELDS) if (given.has(f)) $(f).value = given.get(f);
    for (const id of (given.get("compare") || "").split(",")) addGpu(id.trim());
    for (const f of FIELDS) {
      $(f).addEventListener("input", () => schedule());
      $(f).addEventListener("change", () => schedule());
    }
    $("gpu-add").addEventListener("change", () => {
      addGpu($("gpu-add").value);
      $("gpu-add").value = "";
      schedule(0);
    });
    wireDrop();
    await update();
  }

  let resizing = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => { if (state.curve) renderCurve(...state.curve); }, 150);
  });

  start().catch((err) => {
    $("general-error").textContent = `Error: the page could not start (${err.message})`;
    document.body.dataset.state = "error";
  });
})();
