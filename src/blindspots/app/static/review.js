// Review page: image, given mask, predicted mask, flagged regions outlined; a verdict per
// region; a confirmed error links to the label page to fix the mask.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  let images = [], idx = 0, sel = 0, classes = null;
  function name(k) { return classes && k < classes.names.length ? classes.names[k] : (k === 255 ? "unlabeled" : String(k)); }
  function progress() { $("progress").textContent = `${images.filter((x) => x.done).length} / ${images.length}`; }
  function show() {
    if (!images.length) { $("empty").hidden = false; $("review-view").hidden = true; return; }
    idx = Math.max(0, Math.min(idx, images.length - 1));
    const it = images[idx];
    sel = Math.max(0, Math.min(sel, it.regions.length - 1));
    $("image-id").textContent = `${it.set} · ${it.id}`;
    document.querySelectorAll("#review-view img").forEach((im) => {
      im.src = `/api/images/review?${BS.q({ set: it.set, id: it.id, layer: im.dataset.layer })}`;
      im.onload = () => drawBoxes();
    });
    const tb = $("regions"); tb.replaceChildren();
    it.regions.forEach((r, j) => {
      const tr = document.createElement("tr"); tr.dataset.region = r.region;
      if (j === sel) tr.classList.add("selected");
      const cells = [r.region, r.kind.replace("_", " "), `${name(r.given)} → ${name(r.predicted)}`, r.area, r.score.toFixed(3),
        r.verdict === "error" ? "error confirmed" : (r.verdict === "fine" ? "label is fine" : "–")];
      cells.forEach((c) => { const td = document.createElement("td"); td.textContent = c; tr.append(td); });
      const td = document.createElement("td");
      const be = document.createElement("button"); be.textContent = "Confirm error"; be.className = "verdict-error";
      be.addEventListener("click", () => verdict(j, "error"));
      const bf = document.createElement("button"); bf.textContent = "Label is fine"; bf.className = "verdict-fine";
      bf.addEventListener("click", () => verdict(j, "fine"));
      td.append(be, bf);
      if (r.verdict === "error") {
        const a = document.createElement("a"); a.className = "fix";
        a.href = `/label?${BS.q({ kind: "fix", ref: it.set, id: it.id })}`; a.textContent = "fix the mask →"; td.append(a);
      }
      tr.append(td); tr.addEventListener("click", (e) => { if (e.target.tagName !== "BUTTON" && e.target.tagName !== "A") { sel = j; show(); } });
      tb.append(tr);
    });
    progress(); drawBoxes();
    document.body.dataset.index = String(idx);
  }
  function drawBoxes() {
    const it = images[idx]; if (!it) return;
    document.querySelectorAll("#review-view .frame").forEach((f) => {
      const im = f.querySelector("img"), svg = f.querySelector("svg");
      const w = im.naturalWidth || 1, h = im.naturalHeight || 1;
      svg.setAttribute("viewBox", `0 0 ${w} ${h}`); svg.replaceChildren();
      it.regions.forEach((r, j) => {
        const rect = document.createElementNS(SVG, "rect");
        rect.setAttribute("x", r.box[0]); rect.setAttribute("y", r.box[1]);
        rect.setAttribute("width", r.box[2] - r.box[0]); rect.setAttribute("height", r.box[3] - r.box[1]);
        rect.setAttribute("class", "box" + (j === sel ? " selected" : "") + (r.verdict ? ` ${r.verdict}` : ""));
        svg.append(rect);
      });
    });
  }
  async function verdict(j, v) {
    const it = images[idx], r = it.regions[j];
    const out = await BS.api("POST", "/api/reviews", { set: it.set, image_id: it.id, region: r.region, verdict: v });
    r.verdict = v; it.done = it.regions.every((x) => x.verdict);
    $("saved").textContent = `saved region ${r.region} of ${it.id}` + (out.fix_url ? " — fix the mask on the label page" : "");
    sel = j; const nxt = it.regions.findIndex((x) => !x.verdict); if (nxt >= 0) sel = nxt;
    show();
  }
  document.addEventListener("keydown", (e) => {
    if (BS.typing(e) || e.ctrlKey || e.metaKey || e.altKey || !images.length) return;
    const k = e.key;
    if (k === "e" || k === "E") verdict(sel, "error");
    else if (k === "f" || k === "F") verdict(sel, "fine");
    else if (k === "ArrowDown") { sel += 1; show(); e.preventDefault(); }
    else if (k === "ArrowUp") { sel -= 1; show(); e.preventDefault(); }
    else if (k === "ArrowRight") { idx += 1; sel = 0; show(); }
    else if (k === "ArrowLeft") { idx -= 1; sel = 0; show(); }
  });
  document.addEventListener("DOMContentLoaded", async () => {
    $("prev").addEventListener("click", () => { idx -= 1; sel = 0; show(); });
    $("next").addEventListener("click", () => { idx += 1; sel = 0; show(); });
    const q = await BS.api("GET", "/api/reviews/queue");
    classes = q.classes;
    images = q.sets.flatMap((s) => s.images.map((x) => ({ ...x, set: s.set })));
    const first = images.findIndex((x) => !x.done); idx = first >= 0 ? first : 0;
    show(); document.body.dataset.ready = "1";
  });
})();
