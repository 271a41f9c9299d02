// podmanager's page: the cluster, its runs, one run's timeline and output, a service, the
// events. Hand-written, no library; every view polls its small JSON replies (paths relative to
// the page, so the same page works served on the controller or through the laptop's forward).
"use strict";
(function () {
  const { esc, fmtS, fmtTime } = PM;
  const view = document.getElementById("view");
  const live = document.getElementById("live");
  const POLL_MS = 1000, LOG_POLL_MS = 250;
  let timer = null, generation = 0, liveWord = "live";  // "history" on a deleted cluster's kept copy

  async function getJSON(path) {
    const reply = await fetch(path, { cache: "no-store", credentials: "same-origin" });
    if (!reply.ok) {
      let message = reply.status + " " + reply.statusText;
      try { message = (await reply.json()).message || message; } catch (e) { /* not JSON */ }
      throw new Error(message);
    }
    return reply.json();
  }

  function parseHash() {
    const [path, query] = (location.hash.replace(/^#\/?/, "") || "cluster").split("?");
    return { parts: path.split("/").map(decodeURIComponent), query: new URLSearchParams(query || "") };
  }

  function setHash(parts, query) {
    const q = query && query.toString();
    location.hash = "#/" + parts.map(encodeURIComponent).join("/") + (q ? "?" + q : "");
  }

  // Each view: render(state) once, then again every `every` ms while it is shown.
  function show(every, render) {
    const mine = ++generation;
    clearTimeout(timer);
    const tick = async () => {
      if (mine !== generation) return;
      try {
        await render(mine);
        live.textContent = liveWord + " · " + new Date().toLocaleTimeString(undefined, { hour12: false });
        live.classList.remove("error");
      } catch (error) {
        live.textContent = "not reachable: " + error.message;
        live.classList.add("error");
      }
      if (mine === generation && every) timer = setTimeout(tick, every);
    };
    tick();
  }

  function table(headers, rows, attrs) {
    return `<table ${attrs || ""}><tr>${headers.map((h) => `<th>${esc(h)}</th>`).join("")}</tr>` +
      rows.join("") + "</table>";
  }

  function nav(which) {
    for (const a of document.querySelectorAll("header a[data-nav]")) a.classList.toggle("on", a.dataset.nav === which);
  }

  // ---------------------------------------------------------------- cluster
  function clusterView() {
    nav("cluster");
    view.innerHTML = '<div id="c"></div>';
    show(POLL_MS, async (mine) => {
      const c = await getJSON("api/cluster");
      if (mine !== generation) return;
      const ray = document.getElementById("ray-link");
      let rayUrl = c.ray_dashboard_url;
      if (!rayUrl && c.ray_hint) {  // a controller VM's: the laptop forwards it, and says where
        try { rayUrl = (await getJSON("/_local/ray")).url; } catch (e) { /* served without the laptop's proxy */ }
      }
      ray.innerHTML = rayUrl ? `<a href="${esc(rayUrl)}" target="_blank" rel="noopener">Ray dashboard</a>`
        : c.ray_hint ? `<span class="muted" title="${esc(c.ray_hint)}">Ray dashboard: ${esc(c.ray_hint)}</span>` : "";
      const slices = c.slices.map((s) => `<tr data-slice="${s.index}" data-role="${s.spare ? "spare" : "work"}">` +
        `<td>${s.index}</td><td>${esc(s.name)}</td><td>${s.spare ? "spare" : "work"}</td>` +
        `<td class="state-${esc(s.state)}">${esc(s.state)}</td><td>${esc(s.zone || "")}</td><td>${esc(s.accelerator)}</td>` +
        `<td>${fmtTime(s.created)}</td><td>${esc((s.boot || []).join(", "))}</td><td>${s.run ? `<a href="#/run/${encodeURIComponent(s.run)}">${esc(s.run)}</a>` : ""}</td></tr>`);
      const hosts = c.hosts.map((h) => `<tr><td>slice-${h.slice_index}/${h.worker_id}</td><td>${esc(h.node_name)}</td>` +
        `<td class="health-${h.healthy ? "healthy" : "unreachable"}">${h.healthy ? "healthy" : esc(h.state)}</td>` +
        `<td>${h.last_heartbeat ? fmtS(c.now - h.last_heartbeat) + " ago" : "–"}</td><td>${h.chips}</td>` +
        `<td>${esc(h.ip || "")}</td><td class="muted">${esc(h.detail)}</td></tr>`);
      const services = c.services.map((s) => `<tr><td><a href="#/service/${encodeURIComponent(s.service_id)}">` +
        `${esc(s.service_id)}</a></td><td>${esc(s.status)}</td><td>${esc(s.endpoint)}</td><td>${s.slices.join(", ")}</td></tr>`);
      const swaps = c.swaps.map((e) => `<tr class="swap"><td>${fmtTime(e.time)}</td><td>${esc(e.message)}</td></tr>`);
      document.getElementById("c").innerHTML =
        `<h2>Cluster ${esc(c.name)} <span class="muted">${esc(c.backend)} · ${esc(c.project || "")} · ${esc(c.state)}</span></h2>` +
        (c.problem ? `<p class="error">${esc(c.problem)}</p>` : "") +
        `<p class="muted">controller: ${esc(c.controller)} · Ray head: ${esc(c.ray_address || "not up")}` +
        ` · slices observed ${c.slices_observed_at ? fmtS(c.now - c.slices_observed_at) + " ago" : "–"}` +
        ` · hosts probed ${c.hosts_observed_at ? fmtS(c.now - c.hosts_observed_at) + " ago" : "–"}</p>` +
        "<h3>Slices</h3>" + table(["#", "name", "role", "state", "zone", "accelerator", "created", "boot stage", "run"], slices, 'id="slices"') +
        "<h3>Hosts</h3>" + table(["host", "node", "agent", "last heartbeat", "chips", "ip", "detail"], hosts, 'id="hosts"') +
        "<h3>Services</h3>" + (services.length ? table(["service", "status", "endpoint", "slices"], services) : "<p>none</p>") +
        "<h3>Spare swaps</h3>" + (swaps.length ? table(["when", "what"], swaps, 'id="swaps"') : "<p>none</p>");
      document.getElementById("cluster-name").textContent = c.name;
    });
  }

  // ---------------------------------------------------------------- runs
  function runsView(query) {
    nav("runs");
    const page = Number(query.get("page") || 0), size = 50;
    view.innerHTML = `<h2>Runs</h2><div class="filters"><input id="q" placeholder="run id or program" value="${esc(query.get("q") || "")}">` +
      `<select id="status"><option value="">any status</option>${["starting", "running", "recovering", "succeeded", "failed", "cancelled"]
        .map((s) => `<option ${query.get("status") === s ? "selected" : ""}>${s}</option>`).join("")}</select>` +
      `<span class="pager"><button id="prev">‹ newer</button><span id="pos" class="muted"></span><button id="next">older ›</button></span></div><div id="r"></div>`;
    const go = (changes) => {
      const q = new URLSearchParams(query);
      for (const [k, v] of Object.entries(changes)) v === "" || v == null ? q.delete(k) : q.set(k, v);
      setHash(["runs"], q);
    };
    let searching;
    document.getElementById("q").oninput = (e) => { clearTimeout(searching); searching = setTimeout(() => go({ q: e.target.value, page: "" }), 300); };
    document.getElementById("status").onchange = (e) => go({ status: e.target.value, page: "" });
    document.getElementById("prev").onclick = () => go({ page: Math.max(0, page - 1) || "" });
    document.getElementById("next").onclick = () => go({ page: page + 1 });
    show(POLL_MS, async (mine) => {
      const p = new URLSearchParams({ offset: page * size, limit: size, status: query.get("status") || "", q: query.get("q") || "" });
      const r = await getJSON("api/runs?" + p);
      if (mine !== generation) return;
      document.getElementById("pos").textContent = r.total ? `${r.offset + 1}–${r.offset + r.runs.length} of ${r.total}` : "no runs";
      document.getElementById("next").disabled = r.offset + r.runs.length >= r.total;
      document.getElementById("prev").disabled = page === 0;
      document.getElementById("r").innerHTML = table(["run", "kind", "status", "attempt", "step", "goodput", "slices", "started", "elapsed", "program"],
        r.runs.map((x) => `<tr data-run="${esc(x.run_id)}"><td><a href="#/run/${encodeURIComponent(x.run_id)}">${esc(x.run_id)}</a></td>` +
          `<td>${x.service ? `replica of <a href="#/service/${encodeURIComponent(x.service)}">${esc(x.service)}</a>` : "run"}</td><td class="status-${esc(x.status)}">${esc(x.status)}</td><td>${x.attempt}</td>` +
          `<td>${x.step == null ? "–" : x.step}</td><td>${x.goodput == null ? "–" : (100 * x.goodput).toFixed(1) + " %"}</td>` +
          `<td>${x.slices.join(", ")}</td><td>${fmtTime(x.started)}</td><td>${fmtS(x.elapsed_s)}</td><td class="muted">${esc(x.program)}</td></tr>`),
        'id="runs"');
    });
  }

  // ---------------------------------------------------------------- one run
  function runView(runId) {
    nav("runs");
    view.innerHTML = `<h2>Run ${esc(runId)} <span id="st" class="muted"></span></h2><div id="tl"></div><div id="charts"></div>` +
      `<h3>Output</h3><div class="filters"><select id="host"></select><input id="find" placeholder="search the output">` +
      `<label><input type="checkbox" id="follow" checked> follow</label><a id="download" href="#">download</a></div>` +
      `<pre class="log" id="log"></pre>`;
    const out = { host: null, offset: 0, text: "" };
    const hostSel = document.getElementById("host"), logEl = document.getElementById("log");
    const find = document.getElementById("find");
    const paint = () => {
      const needle = find.value;
      if (!needle) { logEl.textContent = out.text; }
      else {
        const lines = out.text.split("\n").filter((l) => l.toLowerCase().includes(needle.toLowerCase()));
        const pattern = new RegExp(needle.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "gi");
        logEl.innerHTML = lines.map((l) => esc(l).replace(pattern, (m) => `<mark>${m}</mark>`)).join("\n");
      }
      if (document.getElementById("follow").checked) logEl.scrollTop = logEl.scrollHeight;
    };
    find.oninput = paint;
    hostSel.onchange = () => { out.host = hostSel.value; out.offset = 0; out.text = ""; paint(); setDownload(); };
    const setDownload = () => {
      document.getElementById("download").href = `api/run/${encodeURIComponent(runId)}/log?host=${encodeURIComponent(out.host || "")}`;
    };
    let lastTimeline = 0, finished = false, drawing = false;
    const series = { points: [], offset: 0 };  // the program's metrics, read on from where the last read ended
    const refresh = async (mine) => {  // the timeline, once a second: never holding up the output's reads
      drawing = true;
      try {
        const r = await getJSON(`api/run/${encodeURIComponent(runId)}`);
        if (mine !== generation) return;
        finished = !r.timeline.live;
        document.getElementById("st").textContent = `${r.timeline.status} · attempt ${r.attempt} · ${r.program}`;
        PM.drawTimeline(document.getElementById("tl"), r.timeline);
        const m = await getJSON(`api/run/${encodeURIComponent(runId)}/metrics?offset=${series.offset}`);
        if (mine !== generation) return;
        if (m.points.length) {
          series.points = series.points.concat(m.points);
          if (series.points.length > 4000) series.points = series.points.filter((p, i) => i % 2 === 0 || i === series.points.length - 1);
          series.offset = m.offset;
          PM.drawMetrics(document.getElementById("charts"), series.points);
        }
        if (hostSel.options.length !== r.hosts.length) {
          hostSel.innerHTML = r.hosts.map((h) => `<option>${esc(h)}</option>`).join("");
          if (out.host == null && r.hosts.length) { out.host = r.hosts[0]; setDownload(); }
          if (out.host) hostSel.value = out.host;
        }
      } catch (error) {
        live.textContent = "not reachable: " + error.message;
      } finally {
        drawing = false;
      }
    };
    show(LOG_POLL_MS, async (mine) => {
      const now = Date.now();
      if (!drawing && (lastTimeline === 0 || (!finished && now - lastTimeline >= POLL_MS))) {
        lastTimeline = now;
        refresh(mine);
      }
      if (!out.host) return;
      const asked = out.host;
      const l = await getJSON(`api/run/${encodeURIComponent(runId)}/logs?host=${encodeURIComponent(asked)}&offset=${out.offset}`);
      if (mine !== generation || asked !== out.host) return;
      if (l.text) { out.text += l.text; out.offset = l.offset; paint(); }
      else out.offset = l.offset;
    });
  }

  // ---------------------------------------------------------------- a service
  function serviceView(serviceId) {
    nav("runs");
    view.innerHTML = `<h2>Service ${esc(serviceId)} <span id="st" class="muted"></span></h2><div id="sv"></div>`;
    show(POLL_MS, async (mine) => {
      const s = await getJSON(`api/service/${encodeURIComponent(serviceId)}`);
      if (mine !== generation) return;
      const c = s.counters;
      // The router's history, kept whether or not a page was open: [start, width, requests, failed, p50, p99, replicas]
      const at = (p) => p[0] + p[1] / 2;
      const rps = [[s.history.map((p) => [at(p), p[2] / p[1]]), "line"], [s.history.map((p) => [at(p), p[3] / p[1]]), "line failed"]];
      const latency = [[s.history.filter((p) => p[4] != null).map((p) => [at(p), p[4]]), "line"],
        [s.history.filter((p) => p[5] != null).map((p) => [at(p), p[5]]), "line p99"]];
      document.getElementById("st").textContent = `${s.status} · ${s.program}`;
      document.getElementById("sv").innerHTML =
        table(["requests", "served", "failed", "rejected", "errors", "queued", "p50", "p99", "goodput"],
          [`<tr id="counters" data-failed="${c.failed}"><td>${c.requests}</td><td>${c.served}</td><td class="failed">${c.failed}</td>` +
            `<td>${c.rejected}</td><td>${c.errors}</td><td>${c.queued}</td><td>${c.p50_ms == null ? "–" : c.p50_ms.toFixed(1) + " ms"}</td>` +
            `<td>${c.p99_ms == null ? "–" : c.p99_ms.toFixed(1) + " ms"}</td><td>${s.goodput == null ? "–" : (100 * s.goodput).toFixed(1) + " %"}</td></tr>`]) +
        "<h3>Replicas over time</h3>" + chart(s.replicas_over_time, s.preemptions, s.start, s.end, "replicas", true, "replicas") +
        `<h3>Requests per second <span class="muted">(and failed, red; ${s.history.length} points: each second of the last hour, ` +
        "then each minute, then each hour)</span></h3>" + chart(rps, s.preemptions, s.start, s.end, "req/s", false, "requests") +
        '<h3>Latency <span class="muted">(p50, and p99 dashed)</span></h3>' + chart(latency, s.preemptions, s.start, s.end, "ms", false, "latency") +
        "<h3>Preemptions and other incidents</h3>" + (s.preemptions.length ? table(["when", "replica run", "kind", "slices", "detect", "recover"],
          s.preemptions.map((p) => `<tr class="preemption" data-kind="${esc(p.kind)}"><td>${fmtTime(p.time)}</td><td><a href="#/run/${encodeURIComponent(p.run_id)}">${esc(p.run_id)}</a></td>` +
            `<td>${esc(p.kind)}</td><td>${p.slices.join(", ")}</td><td>${fmtS(p.detect_s)}</td><td>${fmtS(p.recover_s)}</td></tr>`), 'id="preemptions"') : "<p>none</p>") +
        "<h3>Replicas now</h3>" + table(["slice", "run", "attempt", "state", "outstanding", "served", "checkpoint step"],
          c.replicas.map((r) => `<tr><td>${r.replica}</td><td><a href="#/run/${encodeURIComponent(r.run_id)}">${esc(r.run_id)}</a></td>` +
            `<td>${r.attempt}</td><td>${esc(r.state)}</td><td>${r.outstanding}</td><td>${r.served}</td><td>${r.step == null ? "–" : r.step}</td></tr>`));
    });
  }

  // A step (or line) chart of [time, value] points over [start, end], each preemption marked;
  // `points` may be several lines: [[points, class], ...].
  function chart(points, marks, start, end, unit, steps, name) {
    const w = 720, h = 150, left = 44, pad = 18;
    const lines = points.length && Array.isArray(points[0]) && Array.isArray(points[0][0]) ? points : [[points, "line"]];
    const every = lines.flatMap((l) => l[0]);
    if (every.length) {
      start = Math.min(start, ...every.map((p) => p[0]));
      end = Math.max(end, ...every.map((p) => p[0]));
    }
    const span = Math.max(end - start, 1e-3), top = Math.max(1, ...every.map((p) => p[1]));
    const x = (t) => left + ((t - start) / span) * (w - left - pad), y = (v) => h - pad - (v / top) * (h - 2 * pad);
    const paths = lines.map(([pts, cls]) => {
      let d = "";
      pts.forEach((p, i) => {
        if (i === 0) d += `M${x(p[0])},${y(p[1])}`;
        else d += steps ? ` H${x(p[0])} V${y(p[1])}` : ` L${x(p[0])},${y(p[1])}`;
      });
      if (steps && pts.length) d += ` H${x(end)}`;
      return `<path class="${cls}" data-points="${pts.length}" d="${d}"/>`;
    }).join("");
    const preempts = marks.map((m) => `<line class="preempt" x1="${x(m.time)}" x2="${x(m.time)}" y1="${pad / 2}" y2="${h - pad}">` +
      `<title>${esc(m.kind)} (${esc(m.run_id)}) at ${fmtTime(m.time)}</title></line>`).join("");
    return `<div class="chart" data-chart="${esc(name || unit)}"><svg width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">` +
      `<text x="2" y="${pad}" class="tick">${top.toFixed(steps ? 0 : 1)} ${unit}</text><text x="2" y="${h - pad}" class="tick">0</text>` +
      `<line x1="${left}" x2="${w - pad}" y1="${h - pad}" y2="${h - pad}" stroke="#ccc"/>` +
      `${paths}${preempts}</svg></div>`;
  }

  // ---------------------------------------------------------------- events
  function eventsView(query) {
    nav("events");
    view.innerHTML = `<h2>Events</h2><div class="filters"><select id="kind"><option value="">every kind</option></select>` +
      `<input id="slice" placeholder="slice" size="5" value="${esc(query.get("slice") || "")}">` +
      `<input id="run" placeholder="run id" value="${esc(query.get("run") || "")}">` +
      `<span class="pager"><button id="newest">newest</button><button id="older">older ›</button></span>` +
      `<span id="count" class="muted"></span></div><div id="ev"></div>`;
    const go = (changes) => {
      const q = new URLSearchParams(query);
      for (const [k, v] of Object.entries(changes)) v === "" || v == null ? q.delete(k) : q.set(k, v);
      setHash(["events"], q);
    };
    document.getElementById("slice").onchange = (e) => go({ slice: e.target.value, before: "" });
    document.getElementById("run").onchange = (e) => go({ run: e.target.value, before: "" });
    document.getElementById("newest").onclick = () => go({ before: "" });
    let oldest = null;
    document.getElementById("older").onclick = () => oldest && go({ before: oldest });
    let kindsShown = false;
    show(query.get("before") ? 0 : POLL_MS, async (mine) => {
      const p = new URLSearchParams({ kind: query.get("kind") || "", slice: query.get("slice") || "", run: query.get("run") || "",
        before: query.get("before") || "", limit: 200 });
      const r = await getJSON("api/events?" + p);
      if (mine !== generation) return;
      if (!kindsShown) {
        kindsShown = true;
        const sel = document.getElementById("kind");
        sel.innerHTML += r.kinds.map((k) => `<option ${query.get("kind") === k ? "selected" : ""}>${esc(k)}</option>`).join("");
        sel.onchange = (e) => go({ kind: e.target.value, before: "" });
      }
      oldest = r.events.length ? r.events[r.events.length - 1].id : null;
      document.getElementById("older").disabled = !r.more;
      document.getElementById("count").textContent = `${r.total} event(s) in the ledger`;
      document.getElementById("ev").innerHTML = table(["#", "when", "kind", "slice", "run", "message"], r.events.map((e) =>
        `<tr data-kind="${esc(e.kind)}"><td>${e.id}</td><td>${fmtTime(e.time)}</td><td>${esc(e.kind)}</td><td>${e.slice == null ? "" : e.slice}</td>` +
        `<td>${e.run_id ? `<a href="#/run/${encodeURIComponent(e.run_id)}">${esc(e.run_id)}</a>` : ""}</td><td>${esc(e.message)}</td></tr>`), 'id="events"');
    });
  }

  function route() {
    const { parts, query } = parseHash();
    if (parts[0] === "runs") runsView(query);
    else if (parts[0] === "run" && parts[1]) runView(parts[1]);
    else if (parts[0] === "service" && parts[1]) serviceView(parts[1]);
    else if (parts[0] === "events") eventsView(query);
    else clusterView();
  }
  // A copy of a deleted cluster's history (kept by `down`): said on every view.
  getJSON("api/cluster").then((c) => {
    const banner = document.getElementById("history-banner");
    if (c.history) { banner.textContent = c.history + " (read-only)"; banner.hidden = false; liveWord = "history"; }
  }).catch(() => { /* the views say why the page cannot be read */ });
  window.addEventListener("hashchange", route);
  route();
})();
