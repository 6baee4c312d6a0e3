/* ctxledger report: one session's steps, compactions and views; or, served by `ctxledger ui`,
 * the index of a log's sessions. Every text from the log goes into the page through
 * textContent or SVG text nodes, never as markup. The page makes no request of its own except,
 * when served live, to the same origin's JSON endpoints. */
(function () {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const boot = JSON.parse(document.getElementById("ctxledger-boot").textContent);
  const app = document.getElementById("app");
  const KINDS = {
    auto: "automatic (threshold)",
    prepared: "background-prepared",
    manual: "manual",
    reactive: "reactive (prompt too long)",
  };
  const SHOWN_CHARS = 1500;
  const POLL_MS = 1000;

  let D = null; // the report data of the session shown
  let chartX = null; // step -> x of the chart drawn last
  const ui = { step: 0, compaction: -1, follow: true, log: null, query: "" };
  let cache = { step: 0, ids: [] };
  let clipped = new Set();
  let pins = new Set();

  // --- DOM helpers ---------------------------------------------------------------------------
  function h(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function tokens(value) {
    if (value === null || value === undefined) return "–";
    const abs = Math.abs(value);
    for (const [scale, suffix] of [[1e6, "M"], [1e3, "k"]]) {
      if (abs >= scale) {
        const scaled = value / scale;
        const text = Math.abs(scaled) >= 100 ? scaled.toFixed(0) : scaled.toFixed(1);
        return text.replace(/\.0$/, "") + suffix;
      }
    }
    return String(Math.round(value));
  }
  function count(value) {
    return value === null || value === undefined ? "–" : Number(value).toLocaleString("en-US");
  }
  function seconds(value) {
    if (!value) return "0 s";
    if (value < 1) return (value * 1000).toFixed(value < 0.01 ? 1 : 0) + " ms";
    if (value < 60) return value.toFixed(value < 10 ? 2 : 1) + " s";
    return Math.floor(value / 60) + " min " + Math.round(value % 60) + " s";
  }
  function when(unix) {
    if (!unix) return "–";
    const date = new Date(unix * 1000);
    const pad = (n) => String(n).padStart(2, "0");
    return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
      `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  }
  function maxOf(values, start) {
    let best = start;
    for (const v of values) if (v !== null && v > best) best = v;
    return best;
  }
  function minOf(values, start) {
    let best = start;
    for (const v of values) if (v !== null && v < best) best = v;
    return best;
  }
  function text(index) { return index >= 0 ? D.texts[index] : ""; }
  function status(message) {
    const node = document.getElementById("status");
    if (node) node.textContent = message;
  }

  // --- data ----------------------------------------------------------------------------------
  async function staticData() {
    const encoded = document.getElementById("ctxledger-data").textContent.trim();
    const binary = atob(encoded);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }
  async function getJson(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
    return { body: await response.json(), headers: response.headers };
  }
  function adopt(data) {
    D = data;
    cache = { step: 0, ids: [] };
    clipped = new Set(D.clipped);
    pins = new Set(D.pins);
    const steps = D.steps.seq.length;
    if (ui.follow || ui.step < 1 || ui.step > steps) ui.step = steps;
    if (ui.compaction >= D.compactions.length) ui.compaction = -1;
  }
  function viewIds(step) {
    const views = D.steps.view;
    const start = Math.floor((step - 1) / D.keyframe_every) * D.keyframe_every;
    let ids = [];
    let next = start;
    if (cache.step && cache.step <= step && cache.step > start) {
      ids = cache.ids;
      next = cache.step;
    }
    for (; next < step; next++) {
      const encoded = views[next];
      ids = ids.slice(0, encoded[0]);
      for (let j = 1; j < encoded.length; j += 2) {
        for (let k = 0; k < encoded[j + 1]; k++) ids.push(encoded[j] + k);
      }
    }
    cache = { step, ids };
    return ids;
  }

  // --- the session page ----------------------------------------------------------------------
  function renderSession() {
    const cfg = D.config;
    const target = cfg.target_tokens ? ` · target ${tokens(cfg.target_tokens)}` : "";
    app.replaceChildren(
      h("header", null,
        h("h1", null, "ctxledger · ", h("span", { class: "sid", text: D.session_id })),
        h("p", { class: "sub" },
          `window ${tokens(cfg.context_window)} · threshold ${tokens(cfg.threshold_tokens)} ` +
          `(${cfg.compression_threshold})${target} · ${cfg.threshold_policy} policy` +
          (D.forked_from ? ` · forked from ${D.forked_from}` : "")),
        h("p", { id: "status", class: "status" },
          boot.mode === "live" ? "live: following the log" : "static report: works offline")),
      h("section", { class: "card totals", id: "totals" }),
      h("section", { class: "card" },
        h("div", { class: "row" }, h("h2", null, "Tokens per step"), chartControls()),
        h("div", { id: "chart", class: "chart" }),
        h("div", { id: "legend" })),
      h("div", { class: "cols" },
        h("section", { id: "compaction", class: "card" }),
        h("section", { id: "step", class: "card" })),
      h("section", { class: "card" }, h("h2", null, "Compactions"), h("div", { id: "ctable" })),
      h("div", { id: "failures" }),
      h("section", { class: "card" }, h("h2", null, "Search the history"), searchBox(),
        h("div", { id: "results" })),
    );
    refresh();
  }
  function refresh() {
    document.getElementById("totals").replaceChildren(totals());
    document.getElementById("legend").replaceChildren(legend());
    document.getElementById("ctable").replaceChildren(compactionTable());
    document.getElementById("failures").replaceChildren(failures() || "");
    drawChart();
    renderCompaction();
    renderStep();
    runSearch();
  }

  function totals() {
    const t = D.totals;
    const byKind = {};
    for (const c of D.compactions) byKind[c.kind] = (byKind[c.kind] || 0) + 1;
    const kinds = Object.keys(KINDS).filter((k) => byKind[k])
      .map((k) => `${byKind[k]} ${k}`).join(", ") || "none";
    const peak = maxOf(D.steps.e, 0);
    const items = [
      ["steps", count(t.steps)], ["messages", count(t.messages)],
      ["history", tokens(t.history_tokens) + " tokens"], ["peak view", tokens(peak) + " tokens"],
      ["compactions", `${t.compactions} (${kinds})`], ["failed compactions", count(t.failed)],
      ["summariser time", seconds(t.summary_seconds)], ["agent waited", seconds(t.waited_seconds)],
    ];
    if (t.usage) {
      const u = t.usage;
      items.push(["provider usage", `${count(u.calls)} calls · input ${tokens(u.input_tokens)} ` +
        `(cached ${tokens(u.cached_tokens)}, cache writes ${tokens(u.cache_write_tokens)}) · ` +
        `output ${tokens(u.output_tokens)}`]);
      items.push(["cost", t.cost === null ? "no prices given (--pricing)" : "$" + t.cost.toFixed(4)]);
    } else {
      items.push(["provider usage", "not recorded"]);
    }
    items.push(["last activity", when(D.last_activity)]);
    return h("dl", null,
      items.map(([k, v]) => h("div", null, h("dt", { text: k }), h("dd", { text: v }))));
  }

  function chartControls() {
    const box = h("input", { type: "checkbox", id: "logscale" });
    box.checked = useLog();
    box.addEventListener("change", () => { ui.log = box.checked; drawChart(); });
    return h("label", { class: "control" }, box, " log scale");
  }
  function useLog() {
    if (ui.log !== null) return ui.log;
    const peakView = maxOf(D.steps.e, 0);
    const peakHistory = maxOf(D.steps.h, 0);
    return peakView > 0 && peakHistory > 8 * peakView;
  }
  function legend() {
    const entries = [
      ["line history", "history (everything kept)"],
      ["line view", "view sent (the estimate the policy compares)"],
      ["line threshold", "compaction threshold"],
    ];
    if (D.steps.tgt.some((v) => v !== null)) entries.push(["line target", "compaction target"]);
    for (const [kind, label] of Object.entries(KINDS)) entries.push([`mark ${kind}`, label]);
    entries.push(["mark failed", "failed compaction"]);
    return h("ul", { class: "legend" },
      entries.map(([cls, label]) => h("li", null, h("span", { class: "swatch " + cls }), label)));
  }

  function ticks(lo, hi, wanted) {
    const span = Math.max(hi - lo, 1);
    const raw = span / wanted;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(v);
    return out;
  }

  function drawChart() {
    const box = document.getElementById("chart");
    box.replaceChildren();
    const st = D.steps;
    const n = st.seq.length;
    if (!n) {
      box.append(h("p", { class: "empty", text: "No view was served yet: nothing to draw." }));
      return;
    }
    const width = Math.max(box.clientWidth || 900, 360);
    const height = 320;
    const m = { l: 58, r: 14, t: 14, b: 34 };
    const pw = width - m.l - m.r;
    const ph = height - m.t - m.b;
    const log = useLog();
    const befores = D.compactions.map((c) => c.tokens_before);
    const top = Math.max(maxOf(st.h, 1), maxOf(st.e, 1), maxOf(st.thr, 1), maxOf(st.tgt, 1),
      maxOf(befores, 1)) * 1.05;
    const low = Math.max(1, Math.min(minOf(st.e, top), minOf(st.h, top), minOf(st.thr, top)));
    const bottom = log ? Math.pow(10, Math.floor(Math.log10(low))) : 0;
    const x = (step) => m.l + (n === 1 ? pw / 2 : ((step - 1) / (n - 1)) * pw);
    chartX = x;
    const y = (v) => {
      if (log) {
        const clamped = Math.max(v, bottom);
        const share = (Math.log10(clamped) - Math.log10(bottom)) /
          Math.max(Math.log10(top) - Math.log10(bottom), 1e-9);
        return m.t + (1 - share) * ph;
      }
      return m.t + (1 - v / top) * ph;
    };
    const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": "tokens per step" });
    const grid = svg("g", { class: "grid" });
    const yTicks = log ? logTicks(bottom, top) : ticks(0, top, 5);
    for (const v of yTicks) {
      grid.append(svg("line", { x1: m.l, x2: m.l + pw, y1: y(v), y2: y(v) }));
      grid.append(svg("text", { x: m.l - 6, y: y(v) + 4, class: "ylabel" }, tokens(v)));
    }
    for (const v of ticks(1, n, Math.min(8, n)).filter((v) => v >= 1 && Number.isInteger(v))) {
      grid.append(svg("text", { x: x(v), y: m.t + ph + 16, class: "xlabel" }, String(v)));
    }
    grid.append(svg("text", { x: m.l + pw / 2, y: height - 2, class: "xlabel" }, "step"));
    chart.append(grid);
    const line = (series, cls) => {
      const points = [];
      for (let i = 0; i < n; i++) if (series[i] !== null) points.push(`${x(i + 1)},${y(series[i])}`);
      if (points.length) chart.append(svg("polyline", { points: points.join(" "), class: cls }));
    };
    const stairs = (series, cls) => {
      const first = series.findIndex((v) => v !== null);
      if (first < 0) return;
      let d = `M${n === 1 ? m.l : x(first + 1)},${y(series[first])}`;
      for (let i = first + 1; i < n; i++) {
        if (series[i] === null) continue;
        d += `H${x(i + 1)}V${y(series[i])}`;
      }
      d += `H${m.l + pw}`;
      chart.append(svg("path", { d, class: cls }));
    };
    line(st.h, "series history");
    line(st.e, "series view");
    stairs(st.thr, "series threshold");
    stairs(st.tgt, "series target");
    const guide = svg("line", { class: "guide", x1: 0, x2: 0, y1: m.t, y2: m.t + ph });
    guide.style.visibility = "hidden";
    const cursor = svg("line", { class: "cursor", x1: x(ui.step), x2: x(ui.step), y1: m.t,
      y2: m.t + ph });
    chart.append(guide, cursor);
    const overlay = svg("rect", { x: m.l, y: m.t, width: pw, height: ph, class: "overlay" });
    const tip = h("div", { class: "tip" });
    tip.style.visibility = "hidden";
    const stepAt = (event) => {
      const rect = chart.getBoundingClientRect();
      const share = (event.clientX - rect.left - m.l) / Math.max(pw, 1);
      return Math.min(n, Math.max(1, Math.round(share * (n - 1)) + 1));
    };
    overlay.addEventListener("mousemove", (event) => {
      const step = stepAt(event);
      guide.setAttribute("x1", x(step));
      guide.setAttribute("x2", x(step));
      guide.style.visibility = "visible";
      tip.textContent = `step ${step} · #${st.seq[step - 1]} · view ${tokens(st.e[step - 1])}` +
        ` · history ${tokens(st.h[step - 1])} · threshold ${tokens(st.thr[step - 1])}`;
      tip.style.left = Math.min(x(step) + 8, width - 260) + "px";
      tip.style.visibility = "visible";
    });
    overlay.addEventListener("mouseleave", () => {
      guide.style.visibility = "hidden";
      tip.style.visibility = "hidden";
    });
    overlay.addEventListener("click", (event) => selectStep(stepAt(event)));
    chart.append(overlay);
    const marks = svg("g", { class: "marks" });
    D.compactions.forEach((c, index) => {
      const step = Math.min(c.step, n);
      marks.append(marker(c.kind, x(step), y(c.tokens_before), index,
        `${KINDS[c.kind]} compaction at step ${c.step}: ${tokens(c.tokens_before)} → ` +
        `${tokens(c.tokens_after)} tokens`));
    });
    for (const f of D.failed) {
      const step = Math.min(f.step, n);
      const mark = svg("circle", { cx: x(step), cy: y(st.e[step - 1]), r: 5, class: "mark failed" });
      mark.append(svg("title", {}, `failed compaction at step ${f.step}: ${f.reason}`));
      marks.append(mark);
    }
    chart.append(marks);
    box.append(chart, tip);
  }
  function logTicks(lo, hi) {
    const out = [];
    for (let p = Math.floor(Math.log10(lo)); Math.pow(10, p) <= hi; p++) {
      for (const f of [1, 2, 5]) {
        const v = f * Math.pow(10, p);
        if (v >= lo && v <= hi) out.push(v);
      }
    }
    return out;
  }
  function marker(kind, cx, cy, index, label) {
    let node;
    if (kind === "manual") {
      node = svg("rect", { x: cx - 6, y: cy - 6, width: 12, height: 12 });
    } else if (kind === "reactive") {
      node = svg("path", { d: `M${cx},${cy - 8}L${cx + 7},${cy + 6}L${cx - 7},${cy + 6}Z` });
    } else if (kind === "prepared") {
      node = svg("path", { d: `M${cx},${cy - 8}L${cx + 7},${cy}L${cx},${cy + 8}L${cx - 7},${cy}Z` });
    } else {
      node = svg("circle", { cx, cy, r: 6.5 });
    }
    node.setAttribute("class", `mark ${kind}${index === ui.compaction ? " chosen" : ""}`);
    node.setAttribute("tabindex", "0");
    node.setAttribute("data-compaction", String(index));
    node.append(svg("title", {}, label));
    const open = (event) => { event.stopPropagation(); selectCompaction(index); };
    node.addEventListener("click", open);
    node.addEventListener("keydown", (event) => { if (event.key === "Enter") open(event); });
    return node;
  }

  function selectStep(step) {
    ui.step = step;
    ui.follow = step === D.steps.seq.length;
    renderStep();
    const cursor = document.querySelector("#chart .cursor");
    if (cursor && chartX) {
      cursor.setAttribute("x1", chartX(step));
      cursor.setAttribute("x2", chartX(step));
    }
  }
  function selectCompaction(index) {
    ui.compaction = index;
    renderCompaction();
    for (const node of document.querySelectorAll("#chart .mark")) {
      node.classList.toggle("chosen", node.getAttribute("data-compaction") === String(index));
    }
    document.getElementById("compaction").scrollIntoView({ block: "nearest" });
  }

  function renderCompaction() {
    const box = document.getElementById("compaction");
    box.replaceChildren(h("h2", null, "Compaction"));
    const c = D.compactions[ui.compaction];
    if (!c) {
      box.append(h("p", { class: "hint", text: D.compactions.length
        ? "Click a marker on the chart (or a row of the table below) to open a compaction."
        : "This session has no compaction." }));
      return;
    }
    const saved = c.tokens_before - c.tokens_after;
    const rows = [
      ["kind", `${KINDS[c.kind]} · reason ${c.reason}` + (c.prepared ? " · prepared summary" : "")],
      ["checkpoint", c.id + (c.previous_id ? ` (extends ${c.previous_id})` : "")],
      ["covered", `#${c.first_seq}–#${c.covers_through_seq} (${count(c.messages)} messages); ` +
        `raw from #${c.retain_from_seq}`],
      ["tokens", `${count(c.tokens_before)} → ${count(c.tokens_after)} (saves ${count(saved)})`],
      ["summariser", (c.summarizer || "not recorded") +
        (c.calls ? ` · ${c.calls} call${c.calls === 1 ? "" : "s"}` : "")],
      ["wall time", seconds(c.seconds)],
      ["agent waited", `${seconds(c.waited)} (${c.waited_how})`],
      ["input → summary", `${count(c.input_chars)} → ${count(c.output_chars)} characters`],
      ["made", `${when(c.t)}, before step ${c.step}`],
    ];
    if (c.focus >= 0) rows.push(["focus", text(c.focus)]);
    box.append(
      h("p", { class: "title" }, `Compaction ${ui.compaction + 1} of ${D.compactions.length}`),
      h("dl", { class: "facts" }, rows.map(([k, v]) => [h("dt", { text: k }), h("dd", { text: v })])),
      h("div", { class: "row" },
        h("button", { type: "button", onclick: () => selectStep(Math.min(c.step,
          D.steps.seq.length)) }, "show the view it gave"),
        h("button", { type: "button", disabled: ui.compaction === 0,
          onclick: () => selectCompaction(ui.compaction - 1) }, "◀ previous"),
        h("button", { type: "button", disabled: ui.compaction === D.compactions.length - 1,
          onclick: () => selectCompaction(ui.compaction + 1) }, "next ▶")),
      h("h3", null, "Summary"),
      h("pre", { class: "summary", text: text(c.summary) }),
      h("h3", null, "Fact block (kept beside the summary)"),
      c.facts >= 0 ? h("pre", { class: "facts-block", text: text(c.facts) })
        : h("p", { class: "hint", text: "none" }),
      h("h3", null, "Audit: facts of the covered messages"),
      auditTable(c.audit),
      lostList(c.audit));
  }
  function auditTable(audit) {
    const rows = Object.entries(audit.counts).map(([kind, [facts, kept, lost]]) =>
      h("tr", null, h("td", { text: kind }), h("td", { text: count(facts) }),
        h("td", { text: count(kept) }), h("td", { text: count(lost) })));
    return h("table", { class: "grid-table" },
      h("thead", null, h("tr", null, ["kind", "facts", "kept", "lost"].map((t) => h("th", { text: t })))),
      h("tbody", null, rows));
  }
  function lostList(audit) {
    if (!audit.lost_total) return h("p", { class: "hint", text: "Nothing was lost." });
    const more = audit.lost_total - audit.lost.length;
    return h("div", null,
      h("p", { text: `Lost (not in the view the checkpoint gave): ${count(audit.lost_total)}` }),
      h("ul", { class: "lost" }, audit.lost.map(([seq, kind, t]) =>
        h("li", null, h("span", { class: "seq", text: "#" + seq }), " ",
          h("span", { class: "kind", text: kind }), " ", h("span", { text: text(t) })))),
      more > 0 ? h("p", { class: "hint", text: `… and ${count(more)} more` }) : null);
  }

  function renderStep() {
    const box = document.getElementById("step");
    if (!box) return;
    const n = D.steps.seq.length;
    box.replaceChildren(h("h2", null, "The view served at a step"));
    if (!n) {
      box.append(h("p", { class: "hint", text: "No view was served yet." }));
      return;
    }
    const range = h("input", { type: "range", min: 1, max: n, value: ui.step, id: "step-range",
      "aria-label": "step" });
    const number = h("input", { type: "number", min: 1, max: n, value: ui.step,
      id: "step-number", "aria-label": "step number" });
    range.addEventListener("input", () => selectStep(Number(range.value)));
    number.addEventListener("change", () => {
      const v = Math.min(n, Math.max(1, Math.round(Number(number.value) || 1)));
      selectStep(v);
    });
    box.append(h("div", { class: "row picker" },
      h("button", { type: "button", disabled: ui.step <= 1,
        onclick: () => selectStep(ui.step - 1) }, "◀"),
      range, number,
      h("button", { type: "button", disabled: ui.step >= n,
        onclick: () => selectStep(ui.step + 1) }, "▶"),
      h("span", { class: "hint", text: `of ${count(n)}` })));
    const i = ui.step - 1;
    const st = D.steps;
    const cp = st.cp[i] >= 0 ? `checkpoint ${D.compactions[st.cp[i]].id}` : "full history";
    box.append(h("p", { class: "title", id: "step-title" },
      `Step ${ui.step}: through #${st.seq[i]} · ${count(st.n[i])} messages · ` +
      `estimate ${count(st.e[i])} tokens (messages ${count(st.vt[i])}) · ${cp} · ` +
      (st.ok[i] ? "rebuilt to the recorded hash ✓" : "DOES NOT rebuild to the recorded hash ✗")));
    const list = h("div", { class: "view", id: "view" });
    for (const id of viewIds(ui.step)) list.append(messageNode(D.msgs[id]));
    box.append(list);
  }
  function messageNode(entry) {
    const [seq, role, name, textIndex, flag, calls, callId, synthetic] = entry;
    const badges = [];
    if (flag !== "raw" && flag !== "summary") badges.push(flag);
    if (pins.has(seq) && role !== "summary") badges.push("pinned");
    if (synthetic) badges.push("interrupted");
    if (clipped.has(textIndex)) badges.push("clipped in this report");
    const body = text(textIndex);
    const node = h("div", { class: `msg role-${role} flag-${flag}`, "data-seq": seq || null },
      h("div", { class: "msg-head" },
        seq ? h("span", { class: "seq", text: "#" + seq }) : null,
        h("span", { class: "role", text: role }),
        name ? h("span", { class: "name", text: name }) : null,
        callId ? h("span", { class: "call-id", text: "answers " + callId }) : null,
        badges.map((b) => h("span", { class: "badge " + b.split(" ")[0], text: b }))));
    if (body) {
      const pre = h("pre", { class: "body" });
      if (body.length > SHOWN_CHARS) {
        pre.textContent = body.slice(0, SHOWN_CHARS);
        const more = h("button", { type: "button", class: "more" },
          `show all ${count(body.length)} characters`);
        more.addEventListener("click", () => { pre.textContent = body; more.remove(); });
        node.append(pre, more);
      } else {
        pre.textContent = body;
        node.append(pre);
      }
    }
    for (const [id, callName, args] of calls) {
      node.append(h("div", { class: "call" }, "→ ", h("b", { text: callName }),
        h("code", { text: `(${text(args)})` }), h("span", { class: "call-id", text: " " + id })));
    }
    return node;
  }

  function compactionTable() {
    if (!D.compactions.length) return h("p", { class: "hint", text: "None." });
    const head = ["#", "step", "kind", "covered", "tokens", "summariser", "time", "waited",
      "lost facts"];
    return h("table", { class: "grid-table clickable" },
      h("thead", null, h("tr", null, head.map((t) => h("th", { text: t })))),
      h("tbody", null, D.compactions.map((c, index) => h("tr", {
        onclick: () => selectCompaction(index), "data-compaction": index },
      h("td", { text: String(index + 1) }), h("td", { text: String(c.step) }),
      h("td", { text: c.kind }), h("td", { text: `#${c.first_seq}–#${c.covers_through_seq}` }),
      h("td", { text: `${tokens(c.tokens_before)} → ${tokens(c.tokens_after)}` }),
      h("td", { text: c.summarizer || "–" }), h("td", { text: seconds(c.seconds) }),
      h("td", { text: seconds(c.waited) }),
      h("td", { text: `${count(c.audit.lost_total)} of ${count(c.audit.kept + c.audit.lost_total)}` })))));
  }
  function failures() {
    if (!D.failed.length && !D.reverts.length) return null;
    const items = [
      ...D.failed.map((f) => `step ${f.step}: compaction failed (${f.reason}` +
        `${f.background ? ", background" : ""}) ${text(f.detail)}`),
      ...D.reverts.map((r) => `before step ${r.step}: checkpoint ${r.checkpoint_id} reverted, ` +
        (r.restored_id === null ? `the full history served again ${text(r.reason)}`
          : `${r.restored_id} active again ${text(r.reason)}`)),
    ];
    return h("section", { class: "card" }, h("h2", null, "Failed compactions and reverts"),
      h("ul", null, items.map((t) => h("li", { text: t }))));
  }

  function searchBox() {
    const input = h("input", { type: "search", id: "search", placeholder: "words or a phrase",
      "aria-label": "search the history" });
    input.value = ui.query;
    let timer = 0;
    input.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => { ui.query = input.value; runSearch(); }, 150);
    });
    return input;
  }
  function runSearch() {
    const box = document.getElementById("results");
    if (!box) return;
    box.replaceChildren();
    const query = ui.query.trim().toLowerCase();
    if (!query) return;
    const hits = [];
    let total = 0;
    for (const id of D.history) {
      const entry = D.msgs[id];
      const body = text(entry[3]);
      const at = body.toLowerCase().indexOf(query);
      if (at < 0) continue;
      total++;
      if (hits.length < 100) hits.push([entry, body, at]);
    }
    box.append(h("p", { class: "hint", text: `${count(total)} messages match` +
      (total > hits.length ? ` (the first ${hits.length} shown)` : "") }));
    box.append(h("ul", { class: "hits" }, hits.map(([entry, body, at]) => {
      const from = Math.max(0, at - 60);
      const to = Math.min(body.length, at + query.length + 60);
      return h("li", { onclick: () => jumpTo(entry[0]) },
        h("span", { class: "seq", text: "#" + entry[0] }), " ",
        h("span", { class: "role", text: entry[1] }), " ",
        (from ? "…" : "") + body.slice(from, at),
        h("mark", { text: body.slice(at, at + query.length) }),
        body.slice(at + query.length, to) + (to < body.length ? "…" : ""));
    })));
  }
  function jumpTo(seq) {
    const index = D.steps.seq.findIndex((s) => s >= seq);
    if (index < 0) return;
    selectStep(index + 1);
    const node = document.querySelector(`#view .msg[data-seq="${seq}"]`);
    if (node) {
      node.classList.add("hit");
      node.scrollIntoView({ block: "center" });
    }
  }

  // --- the index of sessions (ui) ------------------------------------------------------------
  const index = { offset: 0, limit: 50, q: "", sort: "activity", total: 0 };
  function renderIndexShell() {
    const filter = h("input", { type: "search", id: "filter", placeholder: "session id contains",
      "aria-label": "filter sessions" });
    let timer = 0;
    filter.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => { index.q = filter.value; index.offset = 0; loadIndex(); }, 200);
    });
    const sort = h("select", { id: "sort", "aria-label": "sort" },
      h("option", { value: "activity" }, "most recent activity first"),
      h("option", { value: "id" }, "session id"));
    sort.addEventListener("change", () => { index.sort = sort.value; index.offset = 0; loadIndex(); });
    app.replaceChildren(
      h("header", null, h("h1", null, "ctxledger · sessions"),
        h("p", { class: "sub", text: boot.db || "" }),
        h("p", { id: "status", class: "status", text: "loading…" })),
      h("section", { class: "card" }, h("div", { class: "row" }, filter, sort),
        h("div", { id: "sessions" }), h("div", { class: "row", id: "pager" })));
  }
  async function loadIndex() {
    const params = new URLSearchParams({ offset: index.offset, limit: index.limit, q: index.q,
      sort: index.sort });
    try {
      const { body, headers } = await getJson(`/api/sessions?${params}`);
      index.total = Number(headers.get("X-Total-Count") || body.length);
      drawIndex(body);
      status(`live: ${count(index.total)} sessions · updated ${when(Date.now() / 1000)}`);
    } catch (error) {
      status(`cannot reach the server: ${error.message}`);
    }
  }
  function drawIndex(rows) {
    const head = ["session", "messages", "checkpoints", "view tokens", "events", "last activity"];
    const table = h("table", { class: "grid-table" },
      h("thead", null, h("tr", null, head.map((t) => h("th", { text: t })))),
      h("tbody", null, rows.map((r) => h("tr", null,
        h("td", null, h("a", { href: "/sessions/" + encodeURIComponent(r.session_id),
          text: r.session_id })),
        h("td", { text: count(r.messages) }), h("td", { text: count(r.checkpoints) }),
        h("td", { text: count(r.view_tokens) }), h("td", { text: count(r.last_seq) }),
        h("td", { text: when(r.last_activity) })))));
    document.getElementById("sessions").replaceChildren(
      rows.length ? table : h("p", { class: "hint", text: "No sessions." }));
    const pager = document.getElementById("pager");
    const last = Math.min(index.offset + rows.length, index.total);
    pager.replaceChildren(
      h("button", { type: "button", disabled: index.offset === 0,
        onclick: () => { index.offset = Math.max(0, index.offset - index.limit); loadIndex(); } },
      "◀ newer"),
      h("span", { class: "hint",
        text: `${count(rows.length ? index.offset + 1 : 0)}–${count(last)} of ${count(index.total)}` }),
      h("button", { type: "button", disabled: last >= index.total,
        onclick: () => { index.offset += index.limit; loadIndex(); } }, "older ▶"));
  }

  // --- start ---------------------------------------------------------------------------------
  async function follow() {
    try {
      const { body } = await getJson(boot.api + "/version");
      if (body.event_seq !== D.event_seq) {
        const fresh = await getJson(boot.api);
        adopt(fresh.body.report);
        refresh();
      }
      status(`live: following the log · event ${count(D.event_seq)} · checked ` +
        when(Date.now() / 1000));
    } catch (error) {
      status(`cannot reach the server: ${error.message}`);
    }
    setTimeout(follow, POLL_MS);
  }
  async function start() {
    try {
      if (boot.mode === "index") {
        renderIndexShell();
        await loadIndex();
        setInterval(loadIndex, POLL_MS * 1.5);
        return;
      }
      if (boot.mode === "live") {
        adopt((await getJson(boot.api)).body.report);
        renderSession();
        setTimeout(follow, POLL_MS);
        return;
      }
      adopt(await staticData());
      renderSession();
    } catch (error) {
      app.replaceChildren(h("p", { class: "error", text: `cannot show the report: ${error.message}` }));
    }
  }
  let resizeTimer = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (D && boot.mode !== "index") drawChart(); }, 150);
  });
  start();
})();
