// A run's timeline (state/run_timeline.py's RunTimeline, as JSON) drawn as inline SVG, with its
// incidents and its badput breakdown as tables. Shared by the dashboard and the standalone file
// of `podmanager timeline RUN --html FILE`; no library, no network.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = {
    productive: "#2e9e5b", setup: "#8a8f98", startup: "#e0b43a", restore: "#d98f2b",
    waiting: "#b7bcc4", lost: "#d64545", wind_down: "#7fc79c",
  };

  function esc(text) {
    return String(text == null ? "" : text).replace(/[&<>"']/g,
      (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  function fmtS(seconds) {
    if (seconds == null) return "–";
    const s = Math.abs(seconds);
    if (s < 60) return seconds.toFixed(s < 10 ? 2 : 1) + " s";
    if (s < 3600) return Math.floor(s / 60) + " m " + Math.round(s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " m";
  }

  function fmtTime(unix) {
    if (unix == null) return "–";
    const d = new Date(unix * 1000);
    return d.toLocaleString(undefined, { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
  }

  function node(name, attrs, parent, title) {
    const el = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (title) {
      const t = document.createElementNS(SVG, "title");
      t.textContent = title;
      el.appendChild(t);
    }
    if (parent) parent.appendChild(el);
    return el;
  }

  // An attempt's segments, as the buckets cut it (the same rule as run_timeline._buckets).
  function segments(bar, first) {
    const out = [["setup", bar.setup_start, bar.started]];
    const stepAt = bar.first_step_time != null ? bar.first_step_time
      : (bar.status === "running" && bar.last_step_time != null ? bar.started : null);
    const start = first ? "startup" : "restore";
    if (stepAt == null) { out.push([start, bar.started, bar.ended]); return out; }
    out.push([start, bar.started, stepAt]);
    const last = bar.last_step_time != null ? bar.last_step_time : stepAt;
    let kept = last;
    if (bar.status !== "running" && bar.kept_until_step != null && bar.last_step > bar.first_step) {
      const share = Math.max(0, Math.min(1, (bar.kept_until_step - bar.first_step) / (bar.last_step - bar.first_step)));
      kept = stepAt + share * (last - stepAt);
    }
    out.push(["productive", stepAt, kept], ["lost", kept, last]);
    out.push([bar.status === "running" ? "productive" : bar.status === "succeeded" ? "wind_down" : "lost", last, bar.ended]);
    return out;
  }

  function drawTimeline(root, t) {
    root.innerHTML = "";
    root.classList.add("pm-timeline");
    const width = Math.max(600, root.clientWidth || 960);
    const left = 90, right = 20, lane = 26, top = 28;
    const rows = t.slices.length;
    const height = top + 2 * lane + rows * lane + 30;
    const span = Math.max(t.end - t.start, 1e-3);
    const x = (time) => left + ((time - t.start) / span) * (width - left - right);
    const svg = node("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": `timeline of run ${t.run_id}` }, root);
    // the axis: seconds since the run's start
    const ticks = 8;
    for (let i = 0; i <= ticks; i++) {
      const time = t.start + (span * i) / ticks, px = x(time);
      node("line", { x1: px, x2: px, y1: top - 6, y2: height - 24, class: "grid" }, svg);
      node("text", { x: px, y: height - 8, class: "tick", "text-anchor": "middle" }, svg).textContent =
        "+" + fmtS(time - t.start);
    }
    const laneY = (i) => top + 2 * lane + i * lane;
    node("text", { x: 4, y: top + 16, class: "lane" }, svg).textContent = "incidents";
    node("text", { x: 4, y: top + lane + 16, class: "lane" }, svg).textContent = "events";  // and checkpoints
    t.slices.forEach((s, i) => {
      node("text", { x: 4, y: laneY(i) + 16, class: "lane" }, svg).textContent = "slice " + s;
    });
    // each attempt: one group, a bar in every lane of its slices
    t.attempts.forEach((bar, index) => {
      const g = node("g", { class: "attempt", "data-attempt": bar.attempt, "data-status": bar.status }, svg);
      const label = `attempt ${bar.attempt} (${bar.status}${bar.degraded ? ", on fewer slices" : ""}) on slices ` +
        `${bar.slices.join(", ")}: ${fmtS(bar.ended - bar.setup_start)}` +
        (bar.first_step != null ? `, steps ${bar.first_step}–${bar.last_step}` : "") +
        (bar.failure ? `; ${bar.failure}` : "");
      for (const s of bar.slices) {
        const row = t.slices.indexOf(s);
        if (row < 0) continue;
        for (const [kind, from, to] of segments(bar, index === 0)) {
          if (to <= from) continue;
          node("rect", { x: x(from), y: laneY(row) + 4, width: Math.max(1, x(to) - x(from)), height: lane - 8,
            fill: COLORS[kind], class: "seg " + kind }, g, `${label}\n${kind}: ${fmtS(to - from)}`);
        }
        node("rect", { x: x(bar.setup_start), y: laneY(row) + 4, width: Math.max(1, x(bar.ended) - x(bar.setup_start)),
          height: lane - 8, class: "outline" + (bar.degraded ? " degraded" : "") }, g, label);
      }
      const row0 = Math.min(...bar.slices.map((s) => t.slices.indexOf(s)).filter((r) => r >= 0));
      if (Number.isFinite(row0)) {
        node("text", { x: x(bar.setup_start) + 3, y: laneY(row0) + 2, class: "attempt-label" }, g).textContent =
          "#" + bar.attempt;
      }
    });
    // each incident: its detect phase (last healthy check to detection) and recover phase
    // (detection to the next attempt's first step)
    for (const inc of t.incidents) {
      const g = node("g", { class: "incident", "data-kind": inc.kind, "data-detect-s": inc.detect_s,
        "data-recover-s": inc.recover_s }, svg);
      const text = `${inc.kind} in attempt ${inc.attempt} (slices ${inc.slices.join(", ") || "–"}): ${inc.detail}\n` +
        `detect ${fmtS(inc.detect_s)}, recover ${fmtS(inc.recover_s)}, lost steps ${inc.lost_steps == null ? "–" : inc.lost_steps}`;
      if (inc.detect_start != null) {
        node("rect", { x: x(inc.detect_start), y: top + 4, width: Math.max(2, x(inc.detected_at) - x(inc.detect_start)),
          height: lane - 8, class: "detect" }, g, "detect: " + fmtS(inc.detect_s));
      }
      if (inc.recovered_at != null) {
        node("rect", { x: x(inc.detected_at), y: top + 4, width: Math.max(2, x(inc.recovered_at) - x(inc.detected_at)),
          height: lane - 8, class: "recover" }, g, "recover: " + fmtS(inc.recover_s));
      }
      node("line", { x1: x(inc.detected_at), x2: x(inc.detected_at), y1: top, y2: height - 24,
        class: "incident-line " + inc.kind.replace(/ /g, "-") }, g, text);
    }
    for (const mark of t.marks) {
      const px = x(mark.time), y = top + lane + 4;
      if (mark.kind === "checkpoint") {  // a diamond at its time, its step beside it
        node("path", { d: `M${px},${y} L${px + 5},${y + 6} L${px},${y + 12} L${px - 5},${y + 6} Z`, class: "mark checkpoint",
          "data-kind": mark.kind, "data-step": mark.step, "data-time": mark.time }, svg,
          `checkpoint at step ${mark.step} saved at +${fmtS(mark.time - t.start)}`);
        node("text", { x: px + 6, y: y + 10, class: "checkpoint-step" }, svg).textContent = String(mark.step);
        continue;
      }
      node("path", { d: `M${px - 5},${y} L${px + 5},${y} L${px},${y + 12} Z`, class: "mark " + mark.kind.replace(/ /g, "-"),
        "data-kind": mark.kind }, svg, `${mark.kind} at +${fmtS(mark.time - t.start)}: ${mark.message}`);
    }
    // the legend and the tables
    const legend = document.createElement("div");
    legend.className = "legend";
    legend.innerHTML = Object.entries(COLORS).map(([k, c]) =>
      `<span><i style="background:${c}"></i>${esc((t.buckets.find((b) => b.name === k) || {}).label || k)}</span>`).join("") +
      `<span><i class="detect"></i>detect</span><span><i class="recover"></i>recover</span>`;
    root.appendChild(legend);
    root.appendChild(breakdown(t));
    root.appendChild(incidentTable(t));
    if (t.marks.length) root.appendChild(markTable(t));
    if (t.series && t.series.length >= 2) {
      const box = document.createElement("div");
      root.appendChild(box);
      drawMetrics(box, t.series);
    } else {
      const chart = lossChart(t);
      if (chart) root.appendChild(chart);
    }
  }

  // The metrics the program reported (loss and its own), one chart each, by step; each attempt's
  // start marked. `points`: the run folder's series ({attempt, step, time, loss?, ...}).
  function drawMetrics(box, points) {
    box.innerHTML = "";
    box.className = "metrics";
    const names = [];
    for (const p of points) for (const k of Object.keys(p)) {
      if (!["attempt", "step", "time"].includes(k) && !names.includes(k)) names.push(k);
    }
    names.sort((a, b) => (a === "loss" ? -1 : b === "loss" ? 1 : a.localeCompare(b)));
    for (const name of names.slice(0, 8)) {
      const pts = points.filter((p) => typeof p[name] === "number");
      if (pts.length < 2) continue;
      const head = document.createElement("h3");
      head.textContent = `${name} by step (${pts.length} points)`;
      box.appendChild(head);
      const w = 640, h = 170, left = 60, pad = 22;
      const xs = pts.map((p) => p.step), ys = pts.map((p) => p[name]);
      const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
      const px = (v) => left + ((v - x0) / (x1 - x0 || 1)) * (w - left - pad);
      const py = (v) => h - pad - ((v - y0) / (y1 - y0 || 1)) * (h - 2 * pad);
      const svg = node("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, class: "metric", "data-metric": name }, box);
      node("text", { x: 2, y: pad, class: "tick" }, svg).textContent = y1.toPrecision(4);
      node("text", { x: 2, y: h - pad, class: "tick" }, svg).textContent = y0.toPrecision(4);
      node("text", { x: left, y: h - 4, class: "tick" }, svg).textContent = "step " + x0;
      node("text", { x: w - pad, y: h - 4, class: "tick", "text-anchor": "end" }, svg).textContent = "step " + x1;
      let d = "", attempt = null;
      for (const p of pts) {
        const jump = attempt !== null && p.attempt !== attempt;
        if (jump) {
          node("line", { x1: px(p.step), x2: px(p.step), y1: pad / 2, y2: h - pad, class: "attempt-start" }, svg,
            `attempt ${p.attempt} starts at step ${p.step}`);
        }
        d += (d === "" || jump ? "M" : "L") + px(p.step) + "," + py(p[name]) + " ";
        attempt = p.attempt;
      }
      node("path", { d, class: "loss-line" }, svg);
    }
  }

  function breakdown(t) {
    const box = document.createElement("div");
    box.className = "breakdown";
    const total = t.buckets.reduce((a, b) => a + b.seconds, 0) || 1;
    const strip = t.buckets.filter((b) => b.seconds > 0).map((b) =>
      `<i style="width:${(100 * b.seconds) / total}%;background:${COLORS[b.name]}" title="${esc(b.label)}: ${fmtS(b.seconds)}"></i>`).join("");
    box.innerHTML = `<h3>Where the time went: wall ${fmtS(t.wall_s)}, goodput ` +
      `${t.goodput == null ? "–" : (100 * t.goodput).toFixed(1) + " %"}</h3><div class="strip">${strip}</div>` +
      `<table class="buckets"><tr><th>bucket</th><th>seconds</th><th>share</th></tr>` +
      t.buckets.map((b) => `<tr data-bucket="${b.name}" data-seconds="${b.seconds}"><td><i style="background:${COLORS[b.name]}">` +
        `</i>${esc(b.label)}</td><td>${b.seconds.toFixed(3)}</td><td>${(t.wall_s ? (100 * b.seconds) / t.wall_s : 0).toFixed(1)} %</td></tr>`).join("") +
      `<tr class="total" data-wall-s="${t.wall_s}"><td>wall time</td><td>${t.wall_s.toFixed(3)}</td><td></td></tr></table>`;
    return box;
  }

  function incidentTable(t) {
    const box = document.createElement("div");
    box.className = "incidents";
    if (!t.incidents.length) { box.innerHTML = "<h3>Incidents</h3><p>none</p>"; return box; }
    box.innerHTML = "<h3>Incidents</h3><table><tr><th>attempt</th><th>kind</th><th>slices</th><th>detected</th>" +
      "<th>detect</th><th>recover</th><th>lost steps</th><th>phases</th><th>swaps</th><th>detail</th></tr>" +
      t.incidents.map((i) => `<tr class="incident-row" data-detect-s="${i.detect_s}" data-recover-s="${i.recover_s}">` +
        `<td>${i.attempt}</td><td>${esc(i.kind)}</td><td>${i.slices.join(", ")}</td><td>${fmtTime(i.detected_at)}</td>` +
        `<td>${fmtS(i.detect_s)}</td><td>${fmtS(i.recover_s)}</td><td>${i.lost_steps == null ? "–" : i.lost_steps}</td>` +
        `<td>${Object.entries(i.phases).map(([k, v]) => esc(k) + " " + fmtS(v)).join(", ")}</td>` +
        `<td>${i.swaps.map((s) => s[0] + "→" + s[1]).join(", ")}</td><td>${esc(i.detail)}</td></tr>`).join("") + "</table>";
    return box;
  }

  function markTable(t) {
    const box = document.createElement("div");
    box.className = "marks";
    box.innerHTML = "<h3>Checkpoints, swaps, shrinks, grow-backs, notices</h3><table><tr><th>when</th><th>what</th><th>step</th>" +
      "<th>slices</th><th>message</th></tr>" + t.marks.map((m) => `<tr data-kind="${esc(m.kind)}"><td>+${fmtS(m.time - t.start)}</td>` +
        `<td>${esc(m.kind)}</td><td>${m.step == null ? "" : m.step}</td><td>${m.slices.join(", ")}</td><td>${esc(m.message)}</td></tr>`).join("") + "</table>";
    return box;
  }

  // The loss the ledger keeps (each attempt's first and last reported), by step.
  function lossChart(t) {
    const points = [];
    for (const a of t.attempts) {
      if (a.first_loss != null && a.first_step != null) points.push([a.first_step, a.first_loss, a.attempt]);
      if (a.last_loss != null && a.last_step != null) points.push([a.last_step, a.last_loss, a.attempt]);
    }
    if (points.length < 2) return null;
    const box = document.createElement("div");
    box.className = "loss";
    box.innerHTML = "<h3>Loss by step (each attempt's first and last report)</h3>";
    const w = 480, h = 160, pad = 36;
    const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
    const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    const px = (v) => pad + ((v - x0) / (x1 - x0 || 1)) * (w - 2 * pad);
    const py = (v) => h - pad + -((v - y0) / (y1 - y0 || 1)) * (h - 2 * pad);
    const svg = node("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}` }, box);
    node("text", { x: 2, y: pad - 8, class: "tick" }, svg).textContent = y1.toPrecision(4);
    node("text", { x: 2, y: h - pad, class: "tick" }, svg).textContent = y0.toPrecision(4);
    node("text", { x: pad, y: h - 8, class: "tick" }, svg).textContent = "step " + x0;
    node("text", { x: w - pad, y: h - 8, class: "tick", "text-anchor": "end" }, svg).textContent = "step " + x1;
    node("polyline", { points: points.map((p) => px(p[0]) + "," + py(p[1])).join(" "), class: "loss-line" }, svg);
    for (const p of points) node("circle", { cx: px(p[0]), cy: py(p[1]), r: 3, class: "loss-dot" }, svg,
      `attempt ${p[2]}: step ${p[0]}, loss ${p[1]}`);
    return box;
  }

  window.PM = Object.assign(window.PM || {}, { drawTimeline, drawMetrics, esc, fmtS, fmtTime, COLORS, node });
})();
