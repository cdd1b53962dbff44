// wprof's HTML report: routing between views, the sortable and filterable flat table,
// the call graph and the icicle of the calling-context tree. Everything comes from the
// JSON in #data; nothing is fetched.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("data").textContent);
  const fns = new Map(data.functions.map((f) => [f.id, f]));
  const $ = (id) => document.getElementById(id);
  const NS = "http://www.w3.org/2000/svg";

  function amount(v) {
    if (data.unit !== "ns") return v.toLocaleString("en-US");
    if (v < 1e3) return v + " ns";
    if (v < 1e6) return (v / 1e3).toFixed(2) + " µs";
    if (v < 1e9) return (v / 1e6).toFixed(2) + " ms";
    return (v / 1e9).toFixed(2) + " s";
  }
  function svgEl(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const clip = (s, n) => (s.length > n ? s.slice(0, n - 1) + "…" : s);
  // Names too long for their cell end in an ellipsis (CSS); the full name shows on hover,
  // set here rather than repeated in the page.
  document.addEventListener("mouseover", (event) => {
    const link = event.target.closest && event.target.closest("td.name a");
    if (link && !link.title && link.scrollWidth > link.clientWidth) link.title = link.textContent;
  });

  // ---- the flat table: click a header to sort, type to filter (regex, case-insensitive)
  const table = (function () {
    const flat = $("flat");
    const tbody = flat.tBodies[0];
    const rows = Array.from(tbody.rows);
    let key = "self";
    let asc = false;
    function sort(k, ascending) {
      key = k;
      asc = ascending;
      rows.sort((a, b) => {
        const x = a.dataset[k];
        const y = b.dataset[k];
        const c = k === "name" ? (x < y ? -1 : x > y ? 1 : 0) : Number(x) - Number(y);
        return asc ? c : -c;
      });
      rows.forEach((r) => tbody.appendChild(r));
      flat.querySelectorAll("th").forEach((th) => {
        th.classList.toggle("sorted", th.dataset.key === k);
        th.classList.toggle("asc", th.dataset.key === k && asc);
      });
      flat.dataset.sort = k + (asc ? ":asc" : ":desc");
    }
    function filter(text) {
      let re = null;
      try {
        re = new RegExp(text, "i");
      } catch (e) {
        re = null;
      }
      let shown = 0;
      rows.forEach((r) => {
        const name = r.dataset.name;
        const ok = !text || (re ? re.test(name) : name.includes(text));
        r.hidden = !ok;
        if (ok) shown++;
      });
      $("shown").textContent = shown + " of " + rows.length + " functions";
    }
    flat.querySelectorAll("th").forEach((th) =>
      th.addEventListener("click", () => {
        const k = th.dataset.key;
        sort(k, k === key ? !asc : k === "name");
      })
    );
    $("filter").addEventListener("input", (e) => filter(e.target.value));
    return {
      apply(params) {
        if (params.has("sort")) {
          const [k, dir] = params.get("sort").split(":");
          sort(k, dir === "asc");
        }
        if (params.has("filter")) {
          $("filter").value = params.get("filter");
          filter(params.get("filter"));
        }
      },
    };
  })();

  // ---- the call graph: layered from the root, arcs as wide as log(callee inclusive)
  const graph = (function () {
    const svg = $("graph");
    const out = new Map();
    for (const [from, to, calls, incl] of data.edges) {
      if (from < 0 || from === to) continue;
      if (!out.has(from)) out.set(from, []);
      out.get(from).push({ to, calls, incl });
    }
    const byIncl = [...data.functions].sort((a, b) => b.incl - a.incl);
    let root = byIncl.length ? byIncl[0].id : null;
    let minpct = 0;
    // At most this many functions (ties at the minimum would otherwise show thousands).
    let limit = Infinity;
    const select = $("root");
    byIncl.forEach((f) => {
      const option = new Option(clip(f.name, 80), f.id);
      option.title = f.name;
      select.appendChild(option);
    });
    select.addEventListener("change", () => (location.hash = "#graph/" + select.value));
    $("minpct").addEventListener("change", () => {
      minpct = Number($("minpct").value) || 0;
      limit = Infinity;
      draw();
    });
    $("more").addEventListener("click", () => step(10));
    $("fewer").addEventListener("click", () => step(-10));

    const rootIncl = () => Math.max(1, fns.get(root).incl);
    const pctOf = (id) => (100 * fns.get(id).incl) / rootIncl();
    // Every function reachable from the root, largest inclusive first (ties by id).
    function reachable() {
      const seen = new Set([root]);
      const queue = [root];
      for (let i = 0; i < queue.length; i++)
        for (const e of out.get(queue[i]) || [])
          if (!seen.has(e.to)) {
            seen.add(e.to);
            queue.push(e.to);
          }
      return [...seen].sort((a, b) => pctOf(b) - pctOf(a) || a - b);
    }
    const reachablePcts = () => reachable().map(pctOf);
    function step(delta) {
      const pcts = reachablePcts();
      const now = Math.min(limit, pcts.filter((p) => p >= minpct).length);
      const want = Math.max(1, Math.min(pcts.length, now + delta));
      minpct = pcts[want - 1];
      limit = want;
      draw();
    }
    function show(r, min) {
      if (r !== null && fns.has(r)) root = r;
      if (min !== null) {
        minpct = Number(min);
        limit = Infinity;
      } else {
        const pcts = reachablePcts();
        minpct = pcts.length > 30 ? pcts[29] : 0;
        limit = 30;
      }
      draw();
    }
    function draw() {
      svg.textContent = "";
      if (root === null) return;
      // Layers: breadth-first from the root through the functions above the minimum, at
      // most `limit` of them.
      const all = reachable();
      const shown = new Set(all.filter((id) => pctOf(id) >= minpct).slice(0, limit));
      shown.add(root);
      const depth = new Map([[root, 0]]);
      const order = [root];
      for (let i = 0; i < order.length; i++)
        for (const e of out.get(order[i]) || [])
          if (!depth.has(e.to) && shown.has(e.to)) {
            depth.set(e.to, depth.get(order[i]) + 1);
            order.push(e.to);
          }
      const layers = [];
      for (const id of order) (layers[depth.get(id)] = layers[depth.get(id)] || []).push(id);
      // Order each layer by the mean position of its callers in the layer above.
      const pos = new Map();
      layers[0].forEach((id, i) => pos.set(id, i));
      const callers = new Map();
      for (const id of order)
        for (const e of out.get(id) || [])
          if (depth.get(e.to) === depth.get(id) + 1) {
            if (!callers.has(e.to)) callers.set(e.to, []);
            callers.get(e.to).push(id);
          }
      for (let d = 1; d < layers.length; d++) {
        const mean = (id) => {
          const ps = callers.get(id) || [];
          return ps.reduce((s, p) => s + pos.get(p), 0) / Math.max(1, ps.length);
        };
        layers[d].sort((a, b) => mean(a) - mean(b));
        layers[d].forEach((id, i) => pos.set(id, i));
      }
      const W = 180, H = 38, GX = 24, GY = 56;
      const widest = Math.max(...layers.map((l) => l.length));
      const xy = new Map();
      layers.forEach((layer, d) => {
        const offset = ((widest - layer.length) * (W + GX)) / 2;
        layer.forEach((id, i) => xy.set(id, { x: 10 + offset + i * (W + GX), y: 10 + d * (H + GY) }));
      });
      // Scaled down to the page's width when wider, never up.
      const width = 80 + widest * (W + GX);
      svg.setAttribute("viewBox", `0 0 ${width} ${20 + layers.length * (H + GY)}`);
      svg.style.width = "100%";
      svg.style.maxWidth = width + "px";
      const arcs = svgEl("g", { class: "arcs" });
      svg.appendChild(arcs);
      for (const id of order)
        for (const e of out.get(id) || []) {
          if (!depth.has(e.to)) continue;
          const a = xy.get(id);
          const b = xy.get(e.to);
          const width = 1 + 2.5 * Math.log(1 + (1000 * e.incl) / rootIncl());
          let d;
          if (b.y > a.y) {
            const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y, my = (y1 + y2) / 2;
            d = `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`;
          } else {
            // A call back up (or across): a loop on the right-hand side.
            d = `M${a.x + W},${a.y + H / 2} C${a.x + W + 50},${a.y + H / 2} ${b.x + W + 50},${b.y + H / 2} ${b.x + W},${b.y + H / 2}`;
          }
          const path = svgEl("path", { d, class: "arc", "stroke-width": width.toFixed(2), "data-from": id, "data-to": e.to });
          path.appendChild(svgEl("title", {}, `${fns.get(id).name} → ${fns.get(e.to).name}: ${e.calls} calls, ${amount(e.incl)}`));
          arcs.appendChild(path);
        }
      for (const id of order) {
        const f = fns.get(id);
        const { x, y } = xy.get(id);
        const node = svgEl("g", { class: id === root ? "node root" : "node", "data-id": id, transform: `translate(${x},${y})` });
        node.appendChild(svgEl("rect", { width: W, height: H }));
        node.appendChild(svgEl("text", { x: 6, y: 15 }, clip(f.name, 28)));
        node.appendChild(svgEl("text", { x: 6, y: 31 }, `${pctOf(id).toFixed(1)}% · ${f.calls} calls`));
        node.appendChild(svgEl("title", {}, `${f.name}\ninclusive ${amount(f.incl)}, self ${amount(f.self)}`));
        node.addEventListener("click", () => (location.hash = "#f" + id));
        svg.appendChild(node);
      }
      svg.dataset.root = root;
      svg.dataset.nodes = order.length;
      select.value = root;
      $("minpct").value = Number(minpct.toFixed(4));
      $("graph-info").textContent = `${order.length} of ${all.length} functions shown`;
    }
    return { show };
  })();

  // ---- the icicle: contexts [parent, function, calls, self, width], outermost on top
  const flame = (function () {
    const box = $("flame");
    const ctx = data.contexts;
    const kids = ctx.map(() => []);
    const roots = [];
    ctx.forEach((c, i) => (c[0] < 0 ? roots : kids[c[0]]).push(i));
    kids.forEach((k) => k.sort((a, b) => ctx[b][4] - ctx[a][4]));
    $("unzoom").addEventListener("click", () => (location.hash = "#flame"));
    function color(name) {
      let h = 0;
      for (const ch of name) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
      return `hsl(${15 + (h % 40)}, ${65 + (h % 25)}%, ${58 + ((h >> 8) % 18)}%)`;
    }
    function show(zoom) {
      if (!(zoom >= 0 && zoom < ctx.length)) zoom = -1;
      box.textContent = "";
      const top = zoom < 0 ? roots : [zoom];
      const total = top.reduce((s, i) => s + ctx[i][4], 0) || 1;
      let rows = 0;
      let cells = 0;
      const place = (i, x, depth) => {
        const w = ctx[i][4] / total;
        if (w < 0.0005) return;
        const f = fns.get(ctx[i][1]);
        const cell = document.createElement("div");
        cell.className = "cell";
        cell.style.left = x * 100 + "%";
        cell.style.width = w * 100 + "%";
        cell.style.top = depth * 18 + "px";
        cell.style.background = color(f.name);
        cell.textContent = f.name;
        cell.title = `${f.name}\n${amount(ctx[i][4])} (${((100 * ctx[i][4]) / Math.max(1, data.total)).toFixed(2)}% of all), self ${amount(ctx[i][3])}, ${ctx[i][2]} calls`;
        cell.dataset.node = i;
        cell.addEventListener("click", () => (location.hash = "#flame/" + i));
        box.appendChild(cell);
        cells++;
        rows = Math.max(rows, depth + 1);
        let at = x;
        for (const k of kids[i]) {
          place(k, at, depth + 1);
          at += ctx[k][4] / total;
        }
      };
      let x = 0;
      for (const r of top) {
        place(r, x, 0);
        x += ctx[r][4] / total;
      }
      box.style.height = rows * 18 + "px";
      box.dataset.zoom = zoom;
      box.dataset.cells = cells;
      const crumbs = $("crumbs");
      crumbs.textContent = "";
      for (let i = zoom; i >= 0; i = ctx[i][0]) {
        const a = document.createElement("a");
        a.href = "#flame/" + i;
        a.textContent = fns.get(ctx[i][1]).name;
        crumbs.prepend(a);
      }
    }
    return { show };
  })();

  // ---- a function's page (#f<id>): made from the data the first time it is shown
  const callersOf = new Map();
  const calleesOf = new Map();
  for (const [caller, callee, calls, incl, text] of data.edges) {
    if (!callersOf.has(callee)) callersOf.set(callee, []);
    callersOf.get(callee).push({ id: caller, calls, incl, text });
    if (caller >= 0) {
      if (!calleesOf.has(caller)) calleesOf.set(caller, []);
      calleesOf.get(caller).push({ id: callee, calls, incl, text });
    }
  }
  function el(name, attrs, ...children) {
    const e = document.createElement(name);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    for (const c of children) e.append(c);
    return e;
  }
  function links(kind, list, of) {
    if (!list || list.length === 0) return el("p", {}, "nothing");
    const body = el("tbody");
    for (const e of [...list].sort((a, b) => b.incl - a.incl)) {
      const share = of > 0 ? (100 * e.incl) / of : 0;
      const name =
        e.id < 0 ? "<root>" : el("a", { href: "#f" + e.id }, (fns.get(e.id) || { name: "func[" + e.id + "]" }).name);
      const bar = el("span", { class: "bar", style: "width:" + Math.round(Math.min(share, 100) * 0.8) + "px" });
      body.append(
        el("tr", {}, el("td", { class: "name" }, name), el("td", {}, String(e.calls)), el("td", {}, e.text),
          el("td", {}, bar, " " + share.toFixed(2) + "%"))
      );
    }
    const head = el("thead", {}, el("tr", {}, ...[kind, "calls", "inclusive", "share"].map((h) => el("th", {}, h))));
    return el("table", { class: "links " + kind + "s" }, head, body);
  }
  // A function's source lines, each with the wasm instructions of it that ran (a cost
  // profile) or the time samples found there (a sampled one).
  function annotated(f) {
    const body = el("tbody");
    const most = Math.max(1, ...f.ann.map((l) => l[1]));
    for (const [line, cost, text] of f.ann) {
      const bar = el("span", { class: "bar", style: "width:" + Math.round((cost / most) * 80) + "px" });
      body.append(
        el("tr", { class: cost > 0 ? "ran" : "" },
          el("td", {}, cost > 0 ? (data.unit === "ns" ? amount(cost) : String(cost)) : ""), el("td", {}, cost > 0 ? bar : ""),
          el("td", { class: "line" }, String(line)), el("td", { class: "code" }, text))
      );
    }
    const head = el("thead", {}, el("tr", {}, ...[data.unit === "ns" ? "time" : "instructions", "", "line", f.file].map((h) => el("th", {}, h))));
    return el("table", { class: "source" }, head, body);
  }
  function functionPage(id) {
    const existing = $("view-f" + id);
    if (existing) return existing;
    const f = fns.get(id);
    if (!f) return null;
    const [selfText, selfPct, inclText, inclPct, minText, maxText] = f.t;
    const tag = () => (f.imp ? [" ", el("span", { class: "tag" }, "import")] : []);
    const numbers = el("dl", { class: "numbers" });
    for (const [k, v] of [
      ["calls", String(f.calls)],
      ["self", selfText + " (" + selfPct + ")"],
      ["inclusive", inclText + " (" + inclPct + ")"],
      ["self per call", "min " + minText + ", max " + maxText],
    ])
      numbers.append(el("dt", {}, k), el("dd", {}, v));
    const page = el(
      "section",
      { class: "view fn", id: "view-f" + id, "data-id": String(id) },
      el("p", { class: "back" }, el("a", { href: "#table" }, "← all functions"), " · ",
        el("a", { href: "#graph/" + id }, "call graph from here")),
      el("h2", {}, f.name, ...tag())
    );
    if (f.src) page.append(el("p", { class: "src" }, f.src));
    if (f.raw) page.append(el("p", { class: "src" }, "symbol: " + f.raw));
    page.append(numbers, el("h3", {}, "Called by"), links("caller", callersOf.get(id), f.incl),
      el("h3", {}, "Calls"), links("callee", calleesOf.get(id), f.incl));
    if (f.ann) page.append(el("h3", {}, "Source"), annotated(f));
    $("view-graph").before(page);
    return page;
  }

  // ---- routing: #table?sort=calls:desc&filter=re, #f<id>, #graph/<root>?min=<pct>, #flame/<node>
  function route() {
    const [path, query] = decodeURIComponent(location.hash.slice(1)).split("?");
    const parts = path.split("/");
    const params = new URLSearchParams(query || "");
    let view = parts[0] || "table";
    const panel = /^f\d+$/.test(view) ? functionPage(Number(view.slice(1))) : null;
    if (panel) view = "function";
    else if (!["table", "graph", "flame"].includes(view)) view = "table";
    document.querySelectorAll(".view").forEach((v) => (v.hidden = true));
    document.body.dataset.view = view;
    for (const n of ["table", "graph", "flame"]) $("nav-" + n).classList.toggle("active", n === view);
    if (view === "function") {
      panel.hidden = false;
      document.body.dataset.fn = panel.dataset.id;
      window.scrollTo(0, 0);
    } else if (view === "graph") {
      $("view-graph").hidden = false;
      graph.show(parts[1] ? Number(parts[1]) : null, params.get("min"));
    } else if (view === "flame") {
      $("view-flame").hidden = false;
      flame.show(parts[1] ? Number(parts[1]) : -1);
    } else {
      $("view-table").hidden = false;
      table.apply(params);
    }
  }
  // How many of the shown view's controls (navigation, its controls and back links) end
  // past the window's right edge: 0 on any window wide enough for the numbers (read by the
  // tests through the DOM, which has no geometry of its own).
  function checkLayout() {
    const shown = "nav a, .view:not([hidden]) .controls > *, .view:not([hidden]) .back a";
    const outside = [...document.querySelectorAll(shown)].filter(
      (e) => e.getBoundingClientRect().right > window.innerWidth + 1
    ).length;
    document.body.dataset.controlsOutside = String(outside);
  }
  window.addEventListener("hashchange", () => {
    route();
    checkLayout();
  });
  route();
  checkLayout();
})();
