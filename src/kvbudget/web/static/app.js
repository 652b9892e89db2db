// kvbudget serve: the page. Vanilla JavaScript, no build step, nothing fetched from elsewhere.
// Every figure comes from the JSON API (the CLI's own --json documents); the page only draws them.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const FIELDS = ["model", "gpu", "engine", "kv_dtype", "context", "sessions", "prefix", "tp", "weights"];
  const OPTIONAL = new Set(["sessions", "prefix", "weights"]);
  // what only /api/size reads: the latency targets, the load as an arrival rate (instead of Sessions wanted), the
  // request shape, and more models and engines to size (added to the chosen ones, as the GPUs compared are)
  // workload: a dropped workload .toml's upload id (the server reads no file of its own for a client)
  const SIZE_FIELDS = ["ttft", "itl", "rate", "isl", "osl", "size_model", "size_engine", "workload"];
  const SIZE_LISTS = { size_model: "model", size_engine: "engine" };
  // an option named in an error message -> the field that sets it
  const OPTION_FIELD = {
    model: "model", gpu: "gpu", engine: "engine", "kv-dtype": "kv_dtype", "k-dtype": "kv_dtype",
    "v-dtype": "kv_dtype", context: "context", tokens: "context", sessions: "sessions", prefix: "prefix",
    tp: "tp", weights: "weights", ttft: "ttft", itl: "itl", rate: "rate", isl: "isl", osl: "osl", workload: "workload",
  };
  const MODEL_ERRORS = new Set(["SourceError", "ConfigError", "UnknownArchitectureError"]);
  const CAPS = [4096, 8192, 16384, 32768, 65536, 131072];
  const DEBOUNCE_MS = 250;
  const MAX_SEND = 64 * 1024 * 1024;
  const GIB = 2 ** 30;
  // what needs the chosen deployment's plan, put away while it is refused (levers is the same refusal again)
  const PLAN_SECTIONS = ["ledger-section", "levers-section", "commands-section"];
  const state = { extra: [], prices: new Map(), generation: 0, timer: 0, controller: null, curve: null };

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
  // a drawing's coordinate that is not a finite number (a null or absent field of a document) is a defect of the
  // page: it is refused loudly here, never written into the SVG as "NaN"
  function shape(tag, attrs, text) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (typeof v === "number" && !Number.isFinite(v)) throw new TypeError(`<${tag} ${k}=${v}>: not a finite number`);
      el.setAttribute(k, String(v));
    }
    if (text !== undefined) el.textContent = text;
    return el;
  }
  // every figure a document may leave null or out is written as a dash, never as "null", "NaN" or a silent 0
  const DASH = "–";
  const known = (n) => typeof n === "number" && Number.isFinite(n);
  const int = (n) => (known(n) ? n.toLocaleString("en-US") : DASH);
  const gib = (b) =>
    (b / GIB).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 }) + " GiB";
  function bytes(b) {
    if (!known(b)) return DASH;
    if (b >= GIB / 4) return gib(b);
    if (b >= 1024 * 1024) return (b / 2 ** 20).toFixed(1) + " MiB";
    if (b >= 1024) return (b / 1024).toFixed(1) + " KiB";
    return int(b) + " B";
  }
  const tokens = (n) => (!known(n) ? DASH : n % 1024 === 0 ? `${n / 1024}K` : int(n));
  const fixed = (x, digits) =>
    x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  // a latency as kvbudget report writes one (report/sections.py seconds): milliseconds under a second, else seconds
  const seconds = (x) => (!known(x) ? DASH : x < 1 ? `${fixed(x * 1000, 1)} ms` : `${fixed(x, 2)} s`);
  const perSecond = (x) => (known(x) ? fixed(x, 1) : DASH);
  // a price as kvbudget compare writes it (cli/compare.py _money): "-" when there is none, 4 decimals under 1
  function money(x) {
    if (!known(x)) return "-";
    const digits = x < 1 ? 4 : 2;
    return x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }
  // a token count as the CLI reads one (units.parse_tokens: 32768, 32k, 128K; k = 1024); NaN when it is not one
  function tokenCount(text) {
    if (known(text)) return text;
    const m = String(text).match(/^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$/);
    if (!m) return NaN;
    const value = Number(m[1]) * { "": 1, k: 1024, m: 1024 * 1024 }[m[2].toLowerCase()];
    return Number.isInteger(value) && value >= 1 ? value : NaN;
  }
  // a CLI line with its option names (--weights, --tp 4) kept whole when it wraps; its text is the line as given
  function optionsWhole(el, line) {
    el.replaceChildren(...String(line).split(/(--[a-z][a-z0-9-]*)/).map((part, i) =>
      (i % 2 ? node("span", { class: "option", text: part }) : part)));
    return el;
  }
  // a cell: text, an element, or { text, span, cls, options } (a cell across several columns; a CLI line)
  function cell(tag, content, label) {
    let td;
    if (content instanceof Node) td = node(tag, {}, content);
    else if (content !== null && typeof content === "object") {
      td = node(tag, { text: String(content.text ?? DASH) });
      if (content.options) optionsWhole(td, content.text ?? DASH);
      if (content.span) td.colSpan = content.span;
      if (content.cls) td.className = content.cls;
    } else td = node(tag, { text: String(content ?? DASH) });
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
  // a query string; a list value is a repeated parameter (price=h100-sxm=2.49/h&price=h200=3.10/h)
  function query(p) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(p)) {
      for (const x of [].concat(v)) if (x !== "" && x !== undefined && x !== null) q.append(k, x);
    }
    return q;
  }
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
    if (named.length && named.every((f) => f === named[0]) && [...FIELDS, ...SIZE_FIELDS].includes(named[0])) return named[0];
    if (MODEL_ERRORS.has(kind)) return "model";
    return null;
  }
  function clearErrors() {
    for (const f of [...FIELDS, ...SIZE_FIELDS]) {
      $(`${f}-error`).textContent = "";
      $(f).removeAttribute("aria-invalid");
    }
    for (const li of $("prices").children) {
      li.querySelector(".error").textContent = "";
      li.querySelector("input").removeAttribute("aria-invalid");
    }
    $("general-error").textContent = "";
  }
  // compare's error for a bad --price names it ("--price h200=abc: cannot read 'abc'; ..."): the GPU whose field it is
  function priceField(doc) {
    const m = doc.error.message.match(/^--price ([^=\s]+)=/);
    return m ? [...$("prices").children].find((li) => li.dataset.gpu === m[1]) || null : null;
  }
  function showError(doc, field) {
    const where = field || fieldFor(doc);
    const line = `Error: ${doc.error.message}`;
    if (where) {
      optionsWhole($(`${where}-error`), line);
      $(where).setAttribute("aria-invalid", "true");
    } else {
      optionsWhole($("general-error"), line);
    }
  }

  // --- rendering -------------------------------------------------------------------------------
  function renderHeadline(plan) {
    $("sessions-count").textContent = int(plan.sessions);
    $("sessions-count").classList.remove("refused");
    const replicas = plan.replicas > 1 ? ` per replica; ${int(plan.total_sessions)} on ${plan.replicas} replicas` : "";
    $("sessions-label").textContent =
      `concurrent sessions at a ${tokens(plan.context)} cap on ${(plan.gpu && plan.gpu.id) || "the GPU"}${replicas}`;
    $("statement").textContent = plan.statement || "";
    const extra = [];
    if (plan.sessions_requested) {
      const most = plan.max_context_for_sessions;
      if (known(most)) {
        extra.push(most > 0
          ? `${int(plan.sessions_requested)} sessions fit at a cap of up to ${int(most)} tokens`
          : `${int(plan.sessions_requested)} sessions do not fit at any cap on this deployment`);
      }
    }
    if (plan.prefix) extra.push(`with the shared prefix: ${int(plan.prefix.sessions)} sessions (${plan.prefix.basis})`);
    $("extra-line").textContent = extra.join(" · ");
    $("warnings").replaceChildren(...(plan.warnings || []).map((w) => node("li", { text: w })));
  }

  // the chosen deployment refused (the plan's error is a refusal, not a bad field): no sessions to count
  function renderRefusedHeadline(view) {
    $("sessions-count").textContent = "refused";
    $("sessions-count").classList.add("refused");
    $("sessions-label").textContent = `at a ${tokens(view.cap)} cap on ${view.gpu}: the reason and its fixes above`;
    $("statement").textContent = "";
    $("extra-line").textContent = "";
    $("warnings").replaceChildren();
  }

  function renderLedger(plan) {
    const used = Math.min(plan.sessions * plan.per_session_bytes, plan.kv_pool_bytes);
    const parts = [
      ["weights", "weights", plan.weights_bytes],
      ["overhead", "runtime overhead", plan.overhead_bytes],
      ["kv", `KV of ${int(plan.sessions)} sessions at the cap`, used],
      ["free", "KV pool left over", Math.max(0, plan.kv_pool_bytes - used)],
      ["reserved", "not used by the engine", Math.max(0, plan.gpu_memory_bytes - plan.usable_bytes)],
    ].map(([cls, label, b]) => [cls, label, known(b) ? b : 0]);
    const total = Math.max(1, plan.gpu_memory_bytes || 0, parts.reduce((s, p) => s + p[2], 0));
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

  // per token and per session from the plan, or from the cost document when there is no plan (refused)
  function renderPerToken(cost, plan) {
    const perToken = plan ? plan.kv_bytes_per_token : cost.ok ? cost.doc.kv_bytes_per_token : null;
    const perSession = plan ? plan.per_session_bytes : cost.ok ? cost.doc.sequence_bytes : null;
    $("per-token").textContent = `${int(perToken)} B per token · ${bytes(perSession)} per session`;
    if (!cost.ok) {
      fillTable($("groups"), ["per-token breakdown"], [[cost.doc.error.message]]);
      return;
    }
    const groups = cost.doc.groups;
    const size = (g) => (known(g.per_token_bytes) ? g.per_token_bytes : 0) + (known(g.state_bytes) ? g.state_bytes : 0);
    const most = Math.max(1, ...groups.map(size));
    fillTable($("groups"), ["layers", "count", "B/token", "share", "arithmetic"], groups.map((g) => {
      const meter = shape("svg", { viewBox: "0 0 100 10", class: "meter", "aria-hidden": "true" });
      const width = known(g.per_token_bytes) ? (100 * g.per_token_bytes) / most : 0;
      meter.append(shape("rect", { x: 0, y: 0, width, height: 10, class: "seg kv" }));
      return [g.label, g.layers, int(g.per_token_bytes), meter, g.arithmetic];
    }));
  }

  // the rows of a compare, one per GPU and cap (the cap chosen is sent once; refused rows may still repeat a cap). A refused row carries its
  // choice as given (context "128k", engine "vllm") and no figures: its cap is read here as the CLI reads it, and
  // `served` says whether it has sessions to draw.
  function compareRows(doc) {
    const seen = new Set();
    const out = [];
    for (const r of doc.rows) {
      const context = tokenCount(r.context);
      if (!known(context)) continue;
      const key = `${r.gpu} ${context}`;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push({ ...r, context, served: !r.refused && known(r.sessions) });
    }
    return out;
  }

  function renderCurve(compare, view) {
    const svg = $("curve");
    svg.replaceChildren();
    if (!compare.ok) {
      state.curve = null;
      $("curve-note").textContent = `Error: ${compare.doc.error.message}`;
      return;
    }
    state.curve = [compare, view];
    const all = compareRows(compare.doc);
    const served = all.filter((r) => r.served);
    const gpus = [...new Set(all.map((r) => r.gpu))];
    const order = [view.gpu, ...state.extra];
    gpus.sort((a, b) => order.indexOf(a) - order.indexOf(b));
    // the drawing's width follows the element's, so its text stays at the stylesheet's size on a phone
    const W = Math.round(Math.min(720, Math.max(340, svg.getBoundingClientRect().width || 560)));
    const H = W < 480 ? 250 : 320, L = 52, R = 30, T = 16, B = 44;
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const caps = [...new Set([...all.map((r) => r.context), view.cap].filter(known))].sort((a, b) => a - b);
    if (caps.length === 0) {
      $("curve-note").textContent = "no cap to draw";
      return;
    }
    const lo = Math.log2(caps[0]), hi = Math.log2(caps[caps.length - 1]);
    const top = Math.max(1, ...served.map((r) => r.sessions));
    const X = (c) => L + ((Math.log2(c) - lo) / Math.max(1e-9, hi - lo)) * (W - L - R);
    const Y = (s) => H - B - (s / top) * (H - T - B);
    svg.append(shape("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
    svg.append(shape("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
    for (const c of caps) {
      svg.append(shape("text", { x: X(c), y: H - B + 20, class: "tick", "text-anchor": "middle" }, tokens(c)));
    }
    for (const s of new Set([0, Math.round(top / 2), top])) {
      svg.append(shape("text", { x: L - 8, y: Y(s) + 5, class: "tick", "text-anchor": "end" }, int(s)));
      svg.append(shape("line", { x1: L, y1: Y(s), x2: W - R, y2: Y(s), class: "grid" }));
    }
    svg.append(shape("text", { x: (L + W - R) / 2, y: H - 6, class: "tick", "text-anchor": "middle" }, "context cap (tokens)"));
    if (known(view.cap)) {
      svg.append(shape("line", { x1: X(view.cap), y1: T, x2: X(view.cap), y2: H - B, class: "cap" }));
    }
    const refusedAt = [];
    // the chosen GPU drawn last, on top of a compared one with nearly the same curve
    [...gpus.entries()].reverse().forEach(([i, gpu]) => {
      const points = all.filter((r) => r.gpu === gpu).sort((a, b) => a.context - b.context);
      const cls = `series s${i % 4}`;
      // a line joins served caps next to each other; a refused cap breaks it
      let run = [];
      const runs = [run];
      for (const r of points) {
        if (r.served) run.push(r);
        else runs.push((run = []));
      }
      for (const line of runs.filter((x) => x.length > 1)) {
        svg.append(shape("polyline", { points: line.map((r) => `${X(r.context)},${Y(r.sessions)}`).join(" "), class: cls }));
      }
      for (const r of points) {
        const x = X(r.context);
        if (r.served) {
          const dot = shape("circle", { cx: x, cy: Y(r.sessions), r: 4, class: cls });
          dot.append(shape("title", {}, `${gpu} at ${tokens(r.context)}: ${int(r.sessions)} sessions`));
          svg.append(dot);
        } else {
          // refused: a cross on the axis, the reason in its tooltip; no sessions are made up for it
          const y = H - B;
          const mark = shape("path", { d: `M${x - 5},${y - 5}L${x + 5},${y + 5}M${x + 5},${y - 5}L${x - 5},${y + 5}`, class: `refused s${i % 4}` });
          mark.append(shape("title", {}, `${gpu} at ${tokens(r.context)}: refused: ${r.refused || "no sessions figure"}`));
          svg.append(mark);
        }
      }
      const none = !points.some((r) => r.served);
      svg.append(shape("text", { x: W - R - 8, y: T + 14 + 18 * i, class: `label s${i % 4}`, "text-anchor": "end" },
        none ? `${gpu} (refused)` : gpu));
      const refused = points.filter((r) => !r.served);
      if (refused.length) {
        refusedAt.unshift(`${gpu} ${refused.length === points.length ? "at every cap" : "at " + refused.map((r) => tokens(r.context)).join(", ")}`);
      }
    });
    $("curve-note").textContent = `sessions at each cap (kvbudget compare); the dashed line is the cap chosen` +
      (refusedAt.length ? `; × on the axis: refused (${refusedAt.join("; ")}), the reason in its tooltip` : "");
  }

  // the compared deployments at the chosen cap, as kvbudget compare lists them: served ones first (most sessions),
  // refused ones last with the CLI's reason and fixes; $/h and $/session-h as the CLI writes them
  function renderCompare(compare, view) {
    const section = $("compare-section");
    const rows = compare.ok ? compareRows(compare.doc).filter((r) => r.context === view.cap) : [];
    section.hidden = rows.length === 0 || !(state.extra.length || view.priced || view.refused || rows.some((r) => !r.served));
    if (section.hidden) {
      $("compare-warnings").replaceChildren();
      return;
    }
    $("compare-cap").textContent = `at ${tokens(view.cap)}, most sessions first`;
    const head = ["GPU", "sessions", "per session", "KV pool", "weights per GPU", "$/h", "$/session-h"];
    fillTable($("compare"), head, rows.map((r) =>
      r.served
        ? [`${r.gpu} x ${int(r.gpus)}`, int(r.sessions), bytes(r.per_session_bytes), bytes(r.kv_pool_bytes),
          bytes(r.weights_bytes_per_gpu), money(r.cost_per_hour), money(r.cost_per_session_hour)]
        : [r.gpu, "refused", { text: r.refused || "no sessions figure in the compare document", span: head.length - 2, cls: "reason", options: true }]));
    for (const tr of $("compare").tBodies[0].rows) {
      if (tr.cells[1].textContent === "refused") tr.classList.add("refused");
    }
    // what plan warns for each compared deployment (a cap past the trained window, an engine's own limits)
    $("compare-warnings").replaceChildren(...rows.flatMap((r) =>
      (r.warnings || []).map((w) => node("li", { text: `${r.gpu}: ${w}` }))));
  }

  // kvbudget speed at the sessions the plan holds (every replica full): what a session would feel at that load
  function renderLatency(speed, why) {
    const line = $("latency-line"), basis = $("latency-basis");
    $("latency-shape").textContent = "";
    if (!speed) {
      line.textContent = why;
      basis.textContent = "";
      return;
    }
    if (!speed.ok) {
      line.textContent = "not computed";
      optionsWhole(basis, `kvbudget speed: ${speed.doc.error.message}`);
      return;
    }
    const s = speed.doc;
    $("latency-shape").textContent =
      `${int(s.isl)}-token prompts, ${int(s.osl)} tokens out, ${int(s.concurrency)} requests in flight`;
    line.replaceChildren("TTFT ", node("b", { text: seconds(s.ttft_s) }), " · inter-token ",
      node("b", { text: seconds(s.itl_s) }),
      ` · ${perSecond(s.decode_tokens_per_s_per_request)} tokens/s per session at ${int(s.batch_per_replica)} ` +
      `sessions per replica · binds: ${s.binding}`);
    const warned = s.warnings.length ? ` · ${s.warnings.join(" · ")}` : "";
    basis.textContent = `${s.provenance} (kvbudget speed, the roofline): ${s.compute_basis}; efficiencies: ` +
      `${s.efficiency.basis}${warned}`;
  }

  // kvbudget size for Sessions wanted over the GPUs compared: the deployments that meet it, cheapest first, drawn
  // as the answer's own table (size --json table, built by plan/sizing_table.py as the report's): its heading,
  // columns, rows, notes and unmet lines, whatever columns it holds; figures are set right
  function renderSizing(size) {
    const section = $("sizing-section");
    section.hidden = !size;
    $("sizing-error").textContent = "";
    $("sizing-unmet").replaceChildren();
    $("sizing-notes").replaceChildren();
    $("recommendation").textContent = "";
    $("sizing-load").textContent = "";
    if (!size) return;
    if (!size.ok) {
      const field = fieldFor(size.doc);
      if (SIZE_FIELDS.includes(field)) showError(size.doc, field);
      else optionsWhole($("sizing-error"), `Error: ${size.doc.error.message}`);
      $("sizing").replaceChildren();
      return;
    }
    const t = size.doc.table;
    $("sizing-load").textContent = t.heading;
    fillTable($("sizing"), t.columns.map((c) => c.label), t.rows.map((row) =>
      row.map((text, i) => (t.columns[i].right ? { text, cls: "figure" } : text))));
    $("sizing-notes").replaceChildren(...t.notes.map((text) => node("li", { text })));
    $("sizing-unmet").replaceChildren(...t.unmet.map((text) => node("li", { text })));
    $("recommendation").textContent = size.doc.recommendation;
  }

  function renderLevers(levers) {
    if (!levers.ok) {
      fillTable($("levers"), ["levers"], [[`Error: ${levers.doc.error.message}`]]);
      return;
    }
    fillTable($("levers"), ["lever", "change", "sessions", "gain", "memory"], levers.doc.levers.map((l) =>
      !l.refused
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
  function compared(p) {
    return [...new Set([p.gpu, ...state.extra])];
  }
  // price=GPU=PRICE for each compared GPU with a price typed in
  function priceParams(p) {
    return compared(p).filter((g) => (state.prices.get(g) || "").trim()).map((g) => `${g}=${state.prices.get(g).trim()}`);
  }

  async function update() {
    const generation = ++state.generation;
    if (state.controller) state.controller.abort();
    const controller = new AbortController();
    state.controller = controller;
    document.body.dataset.state = "busy";
    const p = params();
    const shared = ["model", "engine", "kv_dtype", "tp", "weights", "prefix"];
    const prices = priceParams(p);
    const sizing = Object.fromEntries(SIZE_FIELDS.map((f) => [f, $(f).value.trim()]));
    const share = query({ ...p, ...sizing, compare: state.extra.join(","), price: prices });
    history.replaceState(null, "", `?${share}`);
    $("api-link").href = `api/plan?${query(p)}`;
    // the chosen cap once: a list that repeats a value is refused (32k is 32768)
    const caps = (CAPS.includes(tokenCount(p.context)) ? CAPS.map(String) : [...CAPS.map(String), p.context]).join(",");
    const compareParams = { ...pick(p, shared), gpu: compared(p).join(","), context: caps };
    // the chosen model and engine, then the others to size (each once, in the order given)
    const listed = (own, more) => [...new Set([own, ...more.split(",").map((x) => x.trim()).filter((x) => x)])].join(",");
    const sizeParams = {
      ...pick(p, ["kv_dtype", "tp", "weights", "context", "sessions"]),
      ...pick(sizing, SIZE_FIELDS.filter((f) => !(f in SIZE_LISTS))),
      ...Object.fromEntries(Object.entries(SIZE_LISTS).map(([f, option]) => [option, listed(p[option], sizing[f])])),
      gpu: compared(p).join(","), price: prices,
    };
    let results, speed = null, priceError = null;
    try {
      results = await Promise.all([
        call("plan", p, controller.signal),
        call("cost", { ...pick(p, ["model", "engine", "kv_dtype", "tp"]), tokens: p.context }, controller.signal),
        call("levers", p, controller.signal),
        call("compare", { ...compareParams, price: prices }, controller.signal),
        p.sessions || sizing.rate ? call("size", sizeParams, controller.signal) : null,
      ]);
      // a bad price is compare's error for the whole command: shown under its field, the rest drawn without prices
      if (!results[3].ok && prices.length && priceField(results[3].doc)) {
        priceError = results[3].doc;
        results[3] = await call("compare", compareParams, controller.signal);
        if (results[4]) results[4] = await call("size", { ...sizeParams, price: [] }, controller.signal);
      }
      // the speed model at the planned sessions: as many requests in flight as the plan holds over its replicas
      if (results[0].ok && results[0].doc.total_sessions > 0) {
        const shape = pick(sizing, ["isl", "osl"]);  // the request shape sizing uses, also timed at the planned sessions
        const planned = pick(p, ["model", "gpu", "engine", "kv_dtype", "tp", "weights", "prefix"]);
        speed = await call("speed", { ...planned, ...shape, concurrency: results[0].doc.total_sessions }, controller.signal);
      }
    } catch (err) {
      if (err.name === "AbortError") return;
      if (generation !== state.generation) return;
      clearErrors();
      $("general-error").textContent = `Error: the server did not answer (${err.message})`;
      document.body.dataset.state = "error";
      return;
    }
    if (generation !== state.generation) return;
    const [plan, cost, levers, compare, size] = results;
    clearErrors();
    if (priceError) {
      const li = priceField(priceError);
      optionsWhole(li.querySelector(".error"), `Error: ${priceError.error.message}`);
      li.querySelector("input").setAttribute("aria-invalid", "true");
    }
    const view = { gpu: p.gpu, cap: plan.ok ? plan.doc.context : tokenCount(p.context), priced: prices.length > 0 && !priceError, refused: false };
    if (!plan.ok) {
      const field = fieldFor(plan.doc);
      showError(plan.doc, field);
      if (field || !compare.ok || !known(view.cap)) {
        // a value the CLI cannot read: the results stay as they were, faded, until it is fixed
        $("results").classList.add("stale");
        document.body.dataset.state = "error";
        return;
      }
      // the inputs are read but the deployment is refused (the model does not fit, the engine refuses it): the
      // refusal is the answer; what needs a plan (ledger, commands) is put away, the rest drawn as for any other
      view.refused = true;
      $("results").classList.remove("stale");
      for (const id of PLAN_SECTIONS) $(id).hidden = true;
      renderLatency(null, "the deployment is refused: there is no load to time");
      renderSizing(size);
      renderRefusedHeadline(view);
      renderPerToken(cost, null);
      renderCurve(compare, view);
      renderCompare(compare, view);
      document.body.dataset.state = "ready";
      return;
    }
    $("results").classList.remove("stale");
    for (const id of PLAN_SECTIONS) $(id).hidden = false;
    renderHeadline(plan.doc);
    renderLedger(plan.doc);
    renderPerToken(cost, plan.doc);
    renderCurve(compare, view);
    renderCompare(compare, view);
    renderLevers(levers);
    renderCommands(plan.doc, p.engine);
    renderLatency(speed, "no session fits at the cap: there is no load to time");
    renderSizing(size);
    document.body.dataset.state = "ready";
  }

  // --- GPUs to compare, and their prices -------------------------------------------------------
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
    renderPrices();
  }
  // one price field per GPU on the page (the chosen one first); a price typed stays with its GPU
  function renderPrices() {
    const gpus = compared({ gpu: $("gpu").value });
    $("prices").replaceChildren(...gpus.map((gpu) => {
      const id = `price-${gpu.replace(/[^A-Za-z0-9_-]/g, "_")}`;
      const input = node("input", {
        id, inputmode: "decimal", spellcheck: "false", autocapitalize: "off", placeholder: "e.g. 2.49/h",
        "aria-describedby": `${id}-error`,
      });
      input.value = state.prices.get(gpu) || "";
      input.addEventListener("input", () => {
        state.prices.set(gpu, input.value);
        schedule();
      });
      return node("li", { "data-gpu": gpu }, node("label", { for: id, text: gpu }), input,
        node("p", { class: "error", id: `${id}-error`, role: "alert" }));
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

  // a workload .toml for the sizing: stored by the server as an upload (read as --workload reads it, the CLI's
  // one-line error otherwise), then named by its id in /api/size
  async function uploadWorkload(file) {
    $("workload-error").textContent = "";
    $("workload").removeAttribute("aria-invalid");
    $("workload-note").textContent = `reading ${file.name}…`;
    let response, doc;
    try {
      const q = new URLSearchParams({ name: file.name });
      response = await fetch(`api/upload?${q}`, { method: "POST", body: file, headers: { "content-type": "application/octet-stream" } });
      doc = await response.json();
    } catch (err) {
      $("workload-note").textContent = "";
      $("workload-error").textContent = `Error: the upload failed (${err.message})`;
      return;
    }
    $("workload-file").value = "";
    if (!response.ok) {
      $("workload-note").textContent = "";
      showError(doc, "workload");
      return;
    }
    $("workload").value = doc.upload.id;
    $("workload-note").textContent = `${file.name}: workload ${doc.upload.workload || "(unnamed)"}, as ${doc.upload.id}`;
    $("workload-clear").hidden = false;
    schedule(0);
  }

  function wireWorkload() {
    $("workload-file").addEventListener("change", () => {
      if ($("workload-file").files[0]) uploadWorkload($("workload-file").files[0]);
    });
    $("workload-clear").addEventListener("click", () => {
      $("workload").value = "";
      $("workload-note").textContent = "";
      $("workload-clear").hidden = true;
      schedule(0);
    });
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

  // --- the form ----------------------------------------------------------------------------------
  // a field of the form is declared in index.html by data-option (its parameter) and data-label (data-sub: the
  // label's note), with its control, or for a text field the control's data-value, data-placeholder, data-inputmode
  // and data-list; this makes the control when it is not there, its label and the paragraph its error is shown in
  // (id "<option>-error"), and keeps the browser from correcting what is typed in a text field (names, sizes and
  // durations, not words)
  const INPUT_ATTRIBUTES = ["value", "placeholder", "inputmode", "list"];
  function buildField(field) {
    let control = field.querySelector("input, select");
    if (!control) {
      const { option } = field.dataset;
      control = node("input", { id: option, name: option });
      for (const a of INPUT_ATTRIBUTES) if (field.dataset[a] !== undefined) control.setAttribute(a, field.dataset[a]);
      field.append(control);
    }
    const label = node("label", { for: control.id, text: field.dataset.label });
    if (field.dataset.sub) label.append(" ", node("span", { class: "sub", text: field.dataset.sub }));
    field.prepend(label);
    field.append(node("p", { class: "error", id: `${field.dataset.option}-error`, role: "alert" }));
    if (control.tagName === "INPUT" && !control.hasAttribute("inputmode")) {
      control.setAttribute("spellcheck", "false");
      control.setAttribute("autocapitalize", "off");
    }
  }

  // --- start -----------------------------------------------------------------------------------
  async function start() {
    for (const field of document.querySelectorAll(".field[data-label]")) buildField(field);
    const [models, gpus] = await Promise.all([call("models", {}), call("gpus", {})]);
    const names = [];
    for (const m of models.doc.models) names.push(m.name, ...m.aliases.filter((a) => !a.includes("/")));
    $("model-list").replaceChildren(...names.map((n) => node("option", { value: n })));
    const options = gpus.doc.gpus.map((g) => [g.id, `${g.id} · ${g.name}`]);
    $("gpu").replaceChildren(...options.map(([id, label]) => node("option", { value: id, text: label })));
    $("gpu-add").append(...options.map(([id, label]) => node("option", { value: id, text: label })));
    $("gpu").value = "h100-sxm";
    const given = new URLSearchParams(location.search);
    for (const f of [...FIELDS, ...SIZE_FIELDS]) if (given.has(f)) $(f).value = given.get(f);
    for (const item of given.getAll("price")) {
      const at = item.indexOf("=");
      if (at > 0) state.prices.set(item.slice(0, at), item.slice(at + 1));
    }
    for (const id of (given.get("compare") || "").split(",")) addGpu(id.trim());
    for (const f of [...FIELDS, ...SIZE_FIELDS]) {
      $(f).addEventListener("input", () => schedule());
      $(f).addEventListener("change", () => schedule());
    }
    $("gpu").addEventListener("change", renderPrices);
    $("gpu-add").addEventListener("change", () => {
      addGpu($("gpu-add").value);
      $("gpu-add").value = "";
      schedule(0);
    });
    wireDrop();
    wireWorkload();
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
